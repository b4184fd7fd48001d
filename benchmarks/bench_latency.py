"""End-to-end latency, from a producer's send to the start of the handler, through a
ProcessorRunner against a raw stomp.py subscriber, under load: 50% and 80% of the raw client's
maximum rate (one producer sending as fast as it can while the raw client consumes), measured
first in the same run.

One producer thread sends persistent JSON messages at a fixed rate (open loop: it never waits for
the consumer) to the tenant's broker queue, where the default (routed) topology has the runner read
them; each body carries its send time. The raw subscriber is bench_core's baseline: the toolkit's
connection options and window, a worker thread that decodes the JSON body, "handles" it and
acknowledges it individually. The runner is configured by default but its window (prefetch 100,
4 workers) and its no-op handler. Raw and toolkit alternate within each round, each with a fresh
queue; p50/p99/p99.9 are taken over every message of a run, and the ratio toolkit p99 over raw p99
within each round, then its median.

    .venv/bin/python benchmarks/bench_latency.py [--duration 10] [--loads 0.5,0.8] [--rounds 3]
    .venv/bin/python benchmarks/bench_latency.py --transport amqp [--url amqp://user:pw@host:5672]

The broker is read from BOOST_BROKER_URL (default stomp://127.0.0.1:61613) with
BOOST_BROKER_USER and BOOST_BROKER_PASSWORD, as bench_core.py reads it. Over AMQP 1.0
(latency_amqp.py) the raw client is python-qpid-proton: a paced sender, and a receiver with the
runner's credit that accepts each message; queues are per tenant, as RabbitMQ needs.
"""

from __future__ import annotations

import argparse
import json
import queue as queue_mod
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import bench_amqp
import bench_core
import latency_amqp
from bench_common import BenchmarkError, unique_queue

from boost_tenancy import (
    ProcessorRunner,
    RunnerSettings,
)
from boost_tenancy.observability import configure_logging
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING

TENANT = "tenant-latency"
P99_GOAL = 1.5


@dataclass(frozen=True)
class Run:
    """One side's latencies (seconds) at one load, and the rate its producer achieved."""

    latencies: list[float]
    offered_per_s: float
    through_per_s: float
    """Messages sent and handled per second, from the first send to the last handled."""

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def paced_send(cfg: bench_core.Config, queue: str, rate: float, count: int) -> tuple[int, float]:
    """Send count messages at rate (None: as fast as it can), each body stamped with its send
    time; returns how many and the rate achieved (a producer that cannot keep up falls behind,
    and says so)."""
    listener = bench_core.RawListener()
    destination = "/queue/" + DEFAULT_ROUTING.physical(queue, TENANT)
    with bench_core.raw_connection(cfg, listener) as conn:
        began = time.monotonic()
        for n in range(count):
            body = json.dumps({"n": n, "tenantUUID": TENANT, "sentAt": time.time()})
            conn.send(
                destination,
                body=body,
                headers={"persistent": "true", "tenantUUID": TENANT},
            )
            ahead = began + (n + 1) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        elapsed = time.monotonic() - began
        receipt = f"last-{queue}"
        stored = listener.expect(receipt)
        # A last message without a send time, confirmed: the broker holds every one before it.
        conn.send(destination, body="{}", headers={"receipt": receipt, "tenantUUID": TENANT})
        bench_core.await_receipt(stored, listener, cfg, f"sends to {queue}")
    return count, count / elapsed


def raw_side(
    cfg: bench_core.Config, queue: str, record: Callable[[float], None]
) -> Callable[[], None]:
    """bench_core's raw subscriber on the tenant's queue, recording each latency as its worker
    thread takes the message; returns what stops it."""
    work: queue_mod.Queue[tuple[dict[str, str], bytes] | None] = queue_mod.Queue()
    listener = bench_core.RawListener(lambda h, b: work.put((h, b)))
    context = bench_core.raw_connection(cfg, listener)
    conn = context.__enter__()

    def worker() -> None:
        while (item := work.get()) is not None:
            headers, body = item
            sent_at = json.loads(body).get("sentAt")
            if sent_at is not None:
                record(time.time() - float(sent_at))
            conn.ack(headers["ack"])

    thread = threading.Thread(target=worker, name="raw-worker", daemon=True)
    thread.start()
    conn.subscribe(
        "/queue/" + DEFAULT_ROUTING.physical(queue, TENANT),
        "latency-raw",
        ack="client-individual",
        headers=cfg.prefetch_headers(cfg.prefetch),
    )

    def stop() -> None:
        conn.unsubscribe("latency-raw")
        work.put(None)
        thread.join(5.0)
        context.__exit__(None, None, None)

    return stop


def toolkit_side(
    cfg: bench_core.Config, queue: str, record: Callable[[float], None], tmp: Path
) -> Callable[[], None]:
    """A ProcessorRunner on the queue, recording each latency as its handler starts."""
    store = SQLiteErrorStore(tmp / f"errors-{queue}.sqlite3")
    runner = ProcessorRunner(
        latency_amqp.timed_processor(queue, record),
        bench_core.connected_transport(cfg),
        [TENANT],
        error_store=store,
        settings=RunnerSettings(workers=cfg.workers, prefetch=cfg.prefetch),
    )
    runner.start()

    def stop() -> None:
        runner.stop(grace_s=10.0)
        store.close()

    return stop


def measure(
    cfg: bench_core.Config | bench_amqp.AmqpConfig, side: str, rate: float, count: int, tmp: Path
) -> Run:
    queue = unique_queue(f"latency-{side}")
    latencies: list[float] = []  # list.append is atomic: the consumer's threads share it
    if isinstance(cfg, bench_amqp.AmqpConfig):
        stop = (
            latency_amqp.raw_side(cfg, queue, TENANT, latencies.append)
            if side == "raw"
            else latency_amqp.toolkit_side(cfg, queue, TENANT, cfg.workers, latencies.append)
        )
    else:
        stop = (
            raw_side(cfg, queue, latencies.append)
            if side == "raw"
            else toolkit_side(cfg, queue, latencies.append, tmp)
        )
    try:
        began = time.monotonic()
        if isinstance(cfg, bench_amqp.AmqpConfig):
            sent, offered = count, latency_amqp.paced_send(cfg, queue, TENANT, rate, count)
        else:
            sent, offered = paced_send(cfg, queue, rate, count)
        deadline = time.monotonic() + cfg.timeout_s
        while len(latencies) < sent:
            if time.monotonic() > deadline:
                raise BenchmarkError(
                    f"{side} consumer on {queue}: {len(latencies)} of {sent} messages "
                    f"within {cfg.timeout_s:.0f}s of the last send"
                )
            time.sleep(0.005)
        through = sent / (time.monotonic() - began)
    finally:
        stop()
    return Run(list(latencies), offered, through)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of sending per run")
    parser.add_argument("--loads", default="0.5,0.8", help="fractions of the raw maximum rate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-messages", type=int, default=5000, help="for the raw maximum")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--transport",
        choices=("stomp", "amqp"),
        default="stomp",
        help="stomp (BOOST_BROKER_URL), or amqp: AMQP 1.0 against raw python-qpid-proton",
    )
    parser.add_argument(
        "--url", help="the AMQP broker (--transport amqp): as bench_core.py --url reads it"
    )
    args = parser.parse_args(argv)
    loads = [float(x) for x in args.loads.split(",")]
    common = ["--messages", str(args.max_messages), "--timeout", str(args.timeout)]
    configure_logging("console", "WARNING")
    cfg: bench_core.Config | bench_amqp.AmqpConfig
    if args.transport == "amqp":
        core_parser, core_args = bench_core.parse_args(
            ["--transport", "amqp", *(["--url", args.url] if args.url else []), *common]
        )
        cfg = bench_core.amqp_config(core_parser, core_args)
        transport = bench_amqp.connected_transport(cfg)
        try:
            cfg = replace(cfg, flavour=transport.flavour)
            described = f"{transport.server!r} at {cfg.redacted_url} over AMQP 1.0"
        finally:
            transport.close()
    else:
        cfg = bench_core.stomp_config(bench_core.parse_args(common)[1])
        broker = bench_core.broker_info(cfg)
        cfg = replace(cfg, flavour=broker.flavour)
        described = broker.describe()
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        # The raw client's maximum: sent as fast as one producer can while it consumes.
        measure(cfg, "raw", float("inf"), min(1000, args.max_messages), Path(tmp))  # warm-up
        maxima = [measure(cfg, "raw", float("inf"), args.max_messages, Path(tmp)) for _ in range(2)]
    top = statistics.median(m.through_per_s for m in maxima)
    print(
        f"end-to-end latency, send -> handler start, on {described}\n"
        f"raw maximum rate {top:,.0f} msg/s ({args.max_messages} sent as fast as one producer "
        f"can while the raw client consumes them, prefetch {cfg.prefetch}); "
        f"{args.duration:g} s of sending per run; latencies in ms"
    )
    print(
        f"\n{'load':>5} {'round':>5} {'side':<8} {'offered/s':>10} {'p50':>8} {'p99':>8} "
        f"{'p99.9':>8} {'max':>8}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        for load in loads:
            rate = load * top
            ratios = []
            for round_no in range(1, args.rounds + 1):
                order = ("raw", "toolkit") if round_no % 2 else ("toolkit", "raw")
                count = max(1, round(rate * args.duration))
                runs = {side: measure(cfg, side, rate, count, Path(tmp)) for side in order}
                for side in ("raw", "toolkit"):
                    run = runs[side]
                    print(
                        f"{load:>5.0%} {round_no:>5} {side:<8} {run.offered_per_s:>10,.0f} "
                        f"{ms(run.percentile(50)):>8} {ms(run.percentile(99)):>8} "
                        f"{ms(run.percentile(99.9)):>8} {ms(max(run.latencies)):>8}"
                    )
                ratios.append(runs["toolkit"].percentile(99) / runs["raw"].percentile(99))
            median = statistics.median(ratios)
            verdict = "met" if median <= P99_GOAL else "NOT MET"
            print(
                f"{load:>5.0%} toolkit p99 / raw p99, median of {len(ratios)}: {median:.2f}x "
                f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}; goal <= {P99_GOAL:g}x: "
                f"{verdict})"
            )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)
