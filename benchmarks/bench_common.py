"""What the benchmarks share: timed samples, completion counting, interleaved rounds and the
per-round table with medians, ratios and verdicts against a target.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from boost_tenancy import (
    BoostTenancyError,
    HandlerContext,
    IncomingMessage,
    TenantId,
    TenantProcessor,
)

CONSUME_TARGET = 1.0
"""The runner against the raw client with the same window and acknowledgement work."""
BATCH_TARGET = 1.0
"""A batch against the raw client's equivalent (receipt on last; pipelined sends on AMQP)."""
SEND_TARGET = 0.9
"""One confirmed send against the raw client's."""
FAIRNESS_TARGET = 0.8
"""The runner with the fairness gate on, against the same runner with it off."""


class BenchmarkError(RuntimeError):
    """A measurement did not complete; the message says what was received."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed run: messages per second, and CPU time of this process per message."""

    rate: float
    cpu_us: float
    """Process CPU time (all threads) per message, in microseconds."""

    @classmethod
    def of(cls, messages: int, wall_s: float, cpu_s: float) -> Sample:
        return cls(messages / wall_s, cpu_s / messages * 1e6)


# -- small helpers -------------------------------------------------------------------------------
def unique_queue(kind: str) -> str:
    return f"bench.{kind}.{uuid.uuid4().hex[:12]}"


def vm_rss_kib() -> int:
    """Resident set size of this process (VmRSS in /proc/self/status), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise BenchmarkError("VmRSS not found in /proc/self/status")


T = TypeVar("T")


def within(timeout_s: float, what: str, call: Callable[[], T]) -> T:
    """Run call on a daemon thread and give up after timeout_s.

    Guards the calls that may block without a limit (stomp.py waits for the broker's CONNECTED
    frame without one), so a broker that accepts the socket but never answers cannot hang the run.
    """
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"bench-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise BenchmarkError(f"{what}: no answer from the broker within {timeout_s:.0f}s")
    if failure:
        raise failure[0]
    return result[0]


class Completion:
    """Counts finished messages and stamps the moment the expected number is reached."""

    def __init__(self, expected: int, what: str) -> None:
        self.expected = expected
        self.what = what
        self.count = 0
        self.finished_at = 0.0
        self.finished_cpu = 0.0
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._done = threading.Event()

    def add(self, amount: int = 1) -> None:
        with self._lock:
            self.count += amount
            if self.count >= self.expected and not self._done.is_set():
                self.finished_at = time.perf_counter()
                self.finished_cpu = time.process_time()
                self._done.set()

    def problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)
        self._done.set()

    def wait(self, timeout_s: float) -> float:
        """Block until complete; returns the completion time (perf_counter) or raises."""
        if not self._done.wait(timeout_s):
            raise BenchmarkError(
                f"{self.what}: timed out after {timeout_s:.0f}s with {self.count} of "
                f"{self.expected} messages"
            )
        if self.problems:
            raise BenchmarkError(
                f"{self.what}: {self.count} of {self.expected} messages, then: "
                + "; ".join(self.problems[:5])
            )
        return self.finished_at


# -- toolkit pieces -------------------------------------------------------------------------------
class NoopProcessor(TenantProcessor):
    """Does nothing with a message: what is left is the toolkit's own cost."""

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        return None


def noop_processor(queue: str, *, json_body: bool = True) -> TenantProcessor:
    """A NoopProcessor consuming queue (queues is a class attribute of a processor).

    json_body=False: bodies are handed over as text, not decoded as JSON (plain-text messages).
    """
    decode = json_body

    class Noop(NoopProcessor):
        queues = (queue,)
        json_body = decode

    return Noop()


class CompletionObserver:
    """Counts outcomes after the dispatcher has acknowledged; anything but 'processed' fails."""

    def __init__(self, completion: Completion) -> None:
        self._completion = completion

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        if outcome == "processed":
            self._completion.add()
        else:
            self._completion.problem(f"unexpected outcome {outcome!r} on {queue}")


# -- rounds, medians, table -----------------------------------------------------------------------
@dataclass(slots=True)
class Series:
    """One figure per round."""

    label: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """The median of the rounds that completed; NaN when none did."""
        done = [value for value in self.values if not math.isnan(value)]
        return statistics.median(done) if done else math.nan

    def report(self) -> dict[str, Any]:
        """For the JSON report: a failed round (NaN) as null."""
        return {
            **asdict(self),
            "values": [None if math.isnan(v) else v for v in self.values],
            "median": None if math.isnan(self.median) else self.median,
        }


Variant = tuple[str, str, Callable[[], Sample]]
"""(key, label, measurement)."""


def interleaved(
    rounds: int, variants: Sequence[Variant], failures: list[str] | None = None
) -> tuple[dict[str, Series], dict[str, Series]]:
    """Run every variant once per round, rotating the order from round to round.

    Returns the rate series and the CPU-per-message series, by variant key. A run that fails
    (a timeout, a message missing, a transport error) counts as NaN in its round, shown as
    'failed', and its reason is added to failures: the other rounds still give their figures.
    """
    rates = {key: Series(label, "msg/s") for key, label, _ in variants}
    cpu = {key: Series(f"CPU per message: {label}", "us/msg") for key, label, _ in variants}
    for round_index in range(rounds):
        shift = round_index % len(variants)
        for key, label, measure in [*variants[shift:], *variants[:shift]]:
            print(f"  round {round_index + 1}/{rounds}: {label} ...", file=sys.stderr)
            try:
                sample = measure()
            except (BenchmarkError, BoostTenancyError) as exc:
                text = f"round {round_index + 1}, {label}: failed: {exc}"
                print(f"  {text}", file=sys.stderr)
                if failures is not None:
                    failures.append(text)
                sample = Sample(math.nan, math.nan)
            rates[key].values.append(sample.rate)
            cpu[key].values.append(sample.cpu_us)
    return rates, cpu


def ratio(label: str, numerator: Series, denominator: Series) -> Series:
    return Series(
        label, "x", [a / b for a, b in zip(numerator.values, denominator.values, strict=True)]
    )


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "failed"
    if unit in ("x", "s"):
        return f"{value:.3f}"
    if unit in ("MiB", "us/msg"):
        return f"{value:.1f}"
    return f"{value:,.0f}"


def table(title: str, rows: Sequence[Series], notes: Sequence[str] = ()) -> str:
    rounds = max(len(row.values) for row in rows)
    width = max(len(row.label) for row in rows) + 2
    head = f"{'':<{width}}{'unit':>7}" + "".join(f"{f'r{i + 1}':>10}" for i in range(rounds))
    lines = [title, head + f"{'median':>10}"]
    for row in rows:
        cells = "".join(f"{fmt(v, row.unit):>10}" for v in row.values)
        lines.append(f"{row.label:<{width}}{row.unit:>7}{cells}{fmt(row.median, row.unit):>10}")
    lines.extend(notes)
    return "\n".join(lines)


def verdict(value: float, target: float) -> str:
    if math.isnan(value):
        return f"NO FIGURE (every round failed; target >= {target})"
    return f"{'MET' if value >= target else 'MISSED'} (median {value:.3f}, target >= {target})"


Measurement = Callable[[], tuple[list[Series], list[str]]]
"""One numbered section of a benchmark: its table rows and the notes under them."""


def run_sections(
    header: str,
    sections: Sequence[tuple[str, str, Measurement]],
    report: dict[str, Any],
    json_path: Path | None,
) -> None:
    """Print header, then run and print each (name, title, measurement) as its table is ready;
    the rows go into report["sections"][name], written to json_path when one is given."""
    print(header, flush=True)
    report["sections"] = {}
    for name, title, measure in sections:
        rows, notes = measure()
        print("\n" + table(title, rows, notes), flush=True)
        report["sections"][name] = {
            "rows": [row.report() for row in rows],
            "notes": list(notes),
        }
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
