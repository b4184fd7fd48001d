"""What the fairness gate costs: broker writes per message of a limited tenant, and the consume
rate of one runner serving 1,000 tenants with fairness on against off.

1. Deferral cost. A tenant limited to concurrency 1 (BOOST_TENANT_CONCURRENCY=1, handler 5 ms)
   or to a rate (BOOST_RATE_PER_S, short burst) has N messages queued on the shared queue the way
   a Java service sends them (plain STOMP SENDs, persistent, tenantUUID); then one runner with
   otherwise default settings (AppSettings.from_env: routed, fairness on) starts and handles
   them all. Every message the runner writes to the broker is counted by a wrapper around its
   transport (send, send_batch, open_batch, send_then_ack, send_then_ack_many items): the
   router's copies to the tenant's queue, delayed copies (deferrals and retries), anything else.
   The same run with BOOST_FAIRNESS=off is the baseline. At concurrency 1 the handler records
   each message's number, and the run checks they came in the order sent.

2. 1,000 tenants. K messages for each of T tenants (default 20 x 1,000) preloaded on their own
   queues (tenant.<t>.<queue>, sent by the toolkit's producer, as on a routed queue); one runner
   with default settings serves all T tenants (T subscriptions plus the router's), fairness on
   (the defaults) against BOOST_FAIRNESS=off, alternating over R rounds; medians.

    .venv/bin/python benchmarks/bench_fairness.py [--sizes 200,600,2000] [--rate 200]
        [--tenants 1000] [--per-tenant 20] [--rounds 3] [--only deferral,tenants] [--json out.json]

The broker is read from BOOST_BROKER_URL (default stomp://127.0.0.1:61613).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench_common import (
    FAIRNESS_TARGET,
    BenchmarkError,
    Completion,
    Sample,
    Series,
    interleaved,
    noop_processor,
    ratio,
    table,
    unique_queue,
    verdict,
)
from bench_noisy_neighbour import JavaStyleSender, app_settings, broker_env, build_gate, drain

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantId,
    TenantProcessor,
    TenantProducer,
    open_error_store,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.messages import WireMessage
from boost_tenancy.observability import configure_logging
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports.base import (
    BatchSink,
    Delivery,
    OnDelivery,
    Outgoing,
    SubscribeRequest,
    Subscription,
    Transport,
)
from boost_tenancy.transports.capabilities import TransportCapabilities
from boost_tenancy.transports.stomp import StompTransport

WRITES_TARGET = 1.1
LIMITED = "limited"
HANDLER_WORK_S = 0.005
PRELOAD_CHUNK = 1000
TIMEOUT_S = 180.0


# -- a transport that counts writes ---------------------------------------------------------------
class Writes:
    """Messages written to the broker, by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, kind: str, amount: int = 1) -> None:
        with self._lock:
            self.counts[kind] += amount

    def items(self, items: Sequence[Outgoing], moved: bool) -> None:
        for item in items:
            if item.delay_ms > 0:
                self.add("delayed")  # a deferral or a retry: the message comes back later
            elif moved:
                self.add("moved")  # a bulk move: the router's copy to the tenant's queue
            else:
                self.add("other")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class CountingBatch:
    def __init__(self, inner: BatchSink, writes: Writes) -> None:
        self._inner = inner
        self._writes = writes

    def add(self, queue: str, message: WireMessage) -> None:
        self._inner.add(queue, message)
        self._writes.add("other")

    def commit(self) -> None:
        self._inner.commit()

    def abort(self) -> None:
        self._inner.abort()


class CountingTransport:
    """A Transport that counts every message written through it and stamps its first
    subscription (where consumption starts)."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.writes = Writes()
        self.first_subscribe_at = 0.0
        self.first_subscribe_cpu = 0.0

    @property
    def capabilities(self) -> TransportCapabilities:
        return self._inner.capabilities

    def connect(self) -> None:
        self._inner.connect()

    def close(self) -> None:
        self._inner.close()

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._inner.send(queue, message, delay_ms=delay_ms)
        self.writes.items([Outgoing(queue, message, delay_ms)], moved=False)

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        self._inner.send_batch(items, atomic=atomic)
        self.writes.add("other", len(items))

    def open_batch(self, *, atomic: bool = True) -> BatchSink:
        return CountingBatch(self._inner.open_batch(atomic=atomic), self.writes)

    def _stamp(self) -> None:
        if not self.first_subscribe_at:
            self.first_subscribe_at = time.perf_counter()
            self.first_subscribe_cpu = time.process_time()

    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> Subscription:
        self._stamp()
        return self._inner.subscribe(
            queue, selector=selector, prefetch=prefetch, on_delivery=on_delivery
        )

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> Sequence[Subscription]:
        self._stamp()
        return self._inner.subscribe_many(requests)

    def unsubscribe(self, subscription: Subscription) -> None:
        self._inner.unsubscribe(subscription)

    def ack(self, delivery: Delivery) -> None:
        self._inner.ack(delivery)

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        self._inner.send_then_ack(delivery, items)
        self.writes.items(items, moved=False)

    def send_then_ack_many(
        self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]
    ) -> Sequence[Delivery]:
        return self._inner.send_then_ack_many(moves)
        for _delivery, items in moves:
            self.writes.items(items, moved=True)

    def is_live(self, delivery: Delivery) -> bool:
        return self._inner.is_live(delivery)


class Outcomes:
    """Counts the dispatcher's outcomes; completes `completion` on each processed message."""

    def __init__(self, completion: Completion) -> None:
        self.counts: Counter[str] = Counter()
        self._completion = completion
        self._lock = threading.Lock()

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        with self._lock:
            self.counts[outcome] += 1
        if outcome == "processed":
            self._completion.add()
        elif outcome != "deferred":
            self._completion.problem(f"unexpected outcome {outcome!r} on {queue}")


@dataclass(frozen=True, slots=True)
class RunResult:
    transport: CountingTransport
    """Its writes, and when the first subscription was made."""
    outcomes: Counter[str]
    events: Counter[str]
    """The gate's events (none with fairness off)."""
    start_s: float
    """How long runner.start() took: connect, every subscription confirmed, the router."""
    handled_during_start: int
    """Messages processed by the time start() returned."""
    finished: float
    """When (perf_counter) the last message was processed, and the CPU time (process_time)."""
    finished_cpu: float


def run_runner(
    settings: AppSettings, processor: TenantProcessor, tenants: Sequence[str], expected: int
) -> RunResult:
    """Start a runner as the settings describe, wait for expected processed messages, stop."""
    completion = Completion(expected, f"runner of {len(tenants)} tenant(s)")
    outcomes = Outcomes(completion)
    events: Counter[str] = Counter()
    gate = build_gate(settings, events)
    transport = CountingTransport(StompTransport(settings.stomp))
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        store = open_error_store(str(Path(tmp) / "errors.sqlite3"))
        runner = ProcessorRunner(
            processor,
            transport,
            list(tenants),
            error_store=store,
            settings=settings.runner,
            routing=settings.routing,
            gate=gate,
            observers=[outcomes],
        )
        try:
            began = time.perf_counter()
            runner.start()
            start_s = time.perf_counter() - began
            handled_during_start = completion.count
            finished = completion.wait(TIMEOUT_S)
        finally:
            runner.stop(grace_s=5.0)
            if gate is not None:
                gate.close()
            store.close()
    return RunResult(
        transport,
        outcomes.counts,
        events,
        start_s=start_s,
        handled_during_start=handled_during_start,
        finished=finished,
        finished_cpu=completion.finished_cpu,
    )


# -- 1. deferral cost -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LimitCase:
    key: str
    label: str
    env: dict[str, str]
    work_s: float
    check_order: bool


@dataclass(frozen=True, slots=True)
class DeferralResult:
    case: str
    messages: int
    writes: dict[str, int]
    outcomes: dict[str, int]
    events: dict[str, int]
    seconds: float
    max_in_flight: int
    order_kept: bool

    @property
    def per_message(self) -> float:
        return sum(self.writes.values()) / self.messages


class Recording(TenantProcessor):
    """Records each message's number as its handler starts, and how many ran at once."""

    def __init__(self, queue: str, work_s: float) -> None:
        self._queue = queue
        self._work_s = work_s
        self.seen: list[int] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()

    @property
    def queues(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self._queue,)

    def handled(self) -> list[int]:
        """The numbers of the messages handled, in the order their handlers started."""
        with self._lock:
            return list(self.seen)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append(int(message.data["n"]))
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self._work_s:
                time.sleep(self._work_s)
        finally:
            with self._lock:
                self._in_flight -= 1


def run_deferral(case: LimitCase, messages: int) -> DeferralResult:
    """Queue messages of LIMITED on the shared queue (Java-style), then run one runner."""
    settings = app_settings(broker_env(**case.env))
    queue = unique_queue("fairness")
    sender = JavaStyleSender(settings.stomp)
    sender.send_many(queue, LIMITED, [{"n": n, "sentAt": time.time()} for n in range(messages)])
    sender.close()
    processor = Recording(queue, case.work_s)
    started = time.perf_counter()
    run = run_runner(settings, processor, [LIMITED], messages)
    seen = processor.handled()
    left = drain(settings.stomp, [queue, settings.routing.physical(queue, LIMITED)], idle_s=0.5)
    if left:
        print(f"  warning: {left} messages were left on the broker", file=sys.stderr)
    return DeferralResult(
        case=case.key,
        messages=messages,
        writes=dict(run.transport.writes.counts),
        outcomes=dict(run.outcomes),
        events=dict(run.events),
        seconds=run.finished - started,
        max_in_flight=processor.max_in_flight,
        order_kept=seen == list(range(messages)),
    )


def deferral_cases(rate: float, burst_s: float) -> list[LimitCase]:
    return [
        LimitCase(
            "off", "fairness off (baseline)", {"BOOST_FAIRNESS": "off"}, HANDLER_WORK_S, True
        ),
        LimitCase(
            "concurrency",
            "concurrency 1, handler 5 ms",
            {"BOOST_TENANT_CONCURRENCY": "1"},
            HANDLER_WORK_S,
            True,
        ),
        LimitCase(
            "rate",
            f"rate {rate:g}/s (burst {burst_s:g} s)",
            {"BOOST_RATE_PER_S": f"{rate:g}", "BOOST_RATE_BURST_S": f"{burst_s:g}"},
            0.0,
            False,
        ),
    ]


def bench_deferral(sizes: Sequence[int], rate: float, burst_s: float) -> list[DeferralResult]:
    cases = deferral_cases(rate, burst_s)
    print(
        "1. deferral cost: N messages of one tenant queued on the shared queue (raw STOMP, as a "
        "Java service sends), then one runner (AppSettings.from_env: routed, 4 workers, "
        "prefetch 10) handles them; broker writes the runner made, per message"
    )
    width = max(len(case.label) for case in cases) + 2
    print(
        f"{'case':<{width}}{'N':>6}{'writes':>8}{'/msg':>7}{'moved':>7}{'delayed':>8}"
        f"{'other':>7}{'vs off':>8}{'held c/r':>10}{'expired':>8}{'max run':>8}{'order kept':>11}"
        f"{'s':>7}{'msg/s':>7}"
    )
    results: list[DeferralResult] = []
    for size in sizes:
        baseline: DeferralResult | None = None
        for case in cases:
            print(f"  {case.label}, {size} messages ...", file=sys.stderr)
            result = run_deferral(case, size)
            results.append(result)
            if case.key == "off":
                baseline = result
            writes = result.writes
            held = f"{result.events.get('held_concurrency', 0)}/{result.events.get('held_rate', 0)}"
            versus = (
                f"{result.per_message / baseline.per_message:.2f}x"
                if baseline is not None and baseline.per_message
                else "-"
            )
            order = ("yes" if result.order_kept else "no") if case.check_order else "-"
            print(
                f"{case.label:<{width}}{size:>6}{sum(writes.values()):>8}"
                f"{result.per_message:>7.2f}{writes.get('moved', 0):>7}"
                f"{writes.get('delayed', 0):>8}{writes.get('other', 0):>7}{versus:>8}"
                f"{held:>10}{result.events.get('expired', 0):>8}{result.max_in_flight:>8}"
                f"{order:>11}{result.seconds:>7.1f}{size / result.seconds:>7.0f}",
                flush=True,
            )
    limited = [r for r in results if r.case != "off"]
    worst = max(limited, key=lambda r: r.per_message)
    print(
        f"target: <= {WRITES_TARGET} writes per message of a limited tenant: "
        f"{'MET' if worst.per_message <= WRITES_TARGET else 'MISSED'} "
        f"(worst {worst.per_message:.2f}, {worst.case}, N={worst.messages})"
    )
    kept = all(r.order_kept for r in results if r.case == "concurrency")
    print(f"order kept at concurrency 1: {'yes' if kept else 'no'}")
    print(
        "moved: the router's copy from the shared queue to tenant.<t>.<queue> (one per message "
        "sent to the shared queue, fairness or not); delayed: deferrals and retries; held c/r: "
        "times the gate held the tenant's head delivery for concurrency / for rate; expired: held "
        "past hold_s and deferred; max run: most handlers of the tenant at once; "
        "s: runner start to last message handled"
    )
    return results


# -- 2. 1,000 tenants -----------------------------------------------------------------------------
def tenant_names(count: int) -> list[str]:
    return [f"tenant-{index:05d}" for index in range(count)]


def preload(settings: AppSettings, queue: str, tenants: Sequence[str], per_tenant: int) -> None:
    """per_tenant messages of every tenant, tenants interleaved, on their own queues (not timed)."""
    transport = StompTransport(settings.stomp)
    transport.connect()
    try:
        producer = TenantProducer(transport, routing=settings.routing)
        order = [(n, tenant) for n in range(per_tenant) for tenant in tenants]
        for start in range(0, len(order), PRELOAD_CHUNK):
            with producer.batch() as batch:
                for n, tenant in order[start : start + PRELOAD_CHUNK]:
                    batch.send(queue, tenant, {"n": n})
    finally:
        transport.close()


@dataclass(slots=True)
class TenantsState:
    """The queue the runs share (each run empties it; a failed run moves on to a fresh one),
    and each variant's start() durations."""

    queue: str
    starts: dict[str, Series]
    during_start: dict[str, Series]


def consume_tenants(
    state: TenantsState, tenants: Sequence[str], per_tenant: int, fairness: bool
) -> Sample:
    env = broker_env() if fairness else broker_env(BOOST_FAIRNESS="off")
    settings = app_settings(env)
    expected = len(tenants) * per_tenant
    key = "on" if fairness else "off"
    preload(settings, state.queue, tenants, per_tenant)
    try:
        run = run_runner(settings, noop_processor(state.queue), tenants, expected)
    except BenchmarkError:
        state.queue = unique_queue("tenants")  # what is left there must not count next time
        for series in (state.starts, state.during_start):
            series[key].values.append(math.nan)
        raise
    state.starts[key].values.append(run.start_s)
    state.during_start[key].values.append(run.handled_during_start)
    if fairness and not run.events.get("admitted"):
        raise BenchmarkError("fairness on, but the gate admitted nothing")
    return Sample.of(
        expected,
        run.finished - run.transport.first_subscribe_at,
        run.finished_cpu - run.transport.first_subscribe_cpu,
    )


def idle_start(tenants: Sequence[str], queue: str) -> float:
    """How long start() takes for tenants on queue when there is nothing to consume."""
    settings = app_settings(broker_env())
    gate = build_gate(settings)
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        store = open_error_store(str(Path(tmp) / "errors.sqlite3"))
        runner = ProcessorRunner(
            noop_processor(queue),
            StompTransport(settings.stomp),
            list(tenants),
            error_store=store,
            settings=settings.runner,
            routing=settings.routing,
            gate=gate,
        )
        began = time.perf_counter()
        try:
            runner.start()
            return time.perf_counter() - began
        finally:
            runner.stop(grace_s=1.0)
            if gate is not None:
                gate.close()
            store.close()


def bench_tenants(tenant_count: int, per_tenant: int, rounds: int) -> list[Series]:
    tenants = tenant_names(tenant_count)
    state = TenantsState(
        unique_queue("tenants"),
        {
            key: Series(f"start(): {tenant_count + 1} subscriptions, fairness {key}", "s")
            for key in ("on", "off")
        },
        {key: Series(f"processed during start(), fairness {key}", "msgs") for key in ("on", "off")},
    )
    failures: list[str] = []
    variants: list[tuple[str, str, Callable[[], Sample]]] = [
        (
            "on",
            f"{tenant_count} tenants x {per_tenant}, fairness on",
            lambda: consume_tenants(state, tenants, per_tenant, fairness=True),
        ),
        (
            "off",
            f"{tenant_count} tenants x {per_tenant}, fairness off",
            lambda: consume_tenants(state, tenants, per_tenant, fairness=False),
        ),
    ]
    rates, cpu = interleaved(rounds, variants, failures)
    target = ratio("fairness on / off", rates["on"], rates["off"])
    rows = [
        rates["on"],
        rates["off"],
        target,
        cpu["on"],
        cpu["off"],
        state.starts["on"],
        state.starts["off"],
        state.during_start["on"],
        state.during_start["off"],
    ]
    notes = [
        f"target: on >= {FAIRNESS_TARGET} x off: " + verdict(target.median, FAIRNESS_TARGET),
        "rate: messages / (first subscribe call -> last message processed); subscribing "
        f"{tenant_count} tenant queues is included, since messages flow while it goes on; "
        f"start(): the {tenant_count} tenant queues and the router's shared queue",
        f"start() with nothing to consume, fairness on: {idle_start(tenants, state.queue):.3f} s "
        f"(the same, now empty, queues); {idle_start(tenants, unique_queue('tenants')):.3f} s "
        f"({tenant_count} new queues)",
        *failures,
    ]
    print(
        "\n"
        + table(
            f"2. {tenant_count} tenants, one runner (AppSettings.from_env: routed, 4 workers, "
            f"prefetch 10), {per_tenant} messages each preloaded on tenant.<t>.<queue>",
            rows,
            notes,
        ),
        flush=True,
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="200,600,2000", help="messages of the limited tenant")
    parser.add_argument("--rate", type=float, default=200.0, help="the rate case's msg/s")
    parser.add_argument("--burst", type=float, default=0.5, help="the rate case's burst, seconds")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--per-tenant", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="deferral,tenants")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := only - {"deferral", "tenants"}:
        parser.error(f"--only: unknown section {', '.join(sorted(unknown))}")
    configure_logging("console", "WARNING")
    report: dict[str, Any] = {}
    if "deferral" in only:
        sizes = [int(size) for size in args.sizes.split(",")]
        report["deferral"] = [
            {**asdict(r), "per_message": r.per_message}
            for r in bench_deferral(sizes, args.rate, args.burst)
        ]
    if "tenants" in only:
        rows = bench_tenants(args.tenants, args.per_tenant, args.rounds)
        report["tenants"] = [row.report() for row in rows]
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
