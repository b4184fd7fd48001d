"""The noisy-neighbour benchmark (seed 004): a heavy tenant at 50x a modest tenant's volume.

For each routing topology, the modest tenant's end-to-end latency (send to handler) alone and
beside the heavy tenant, with the heavy tenant's processor running and stopped; prints p50/p99.
Each tenant's runner is its own process, as tenants' processors are in production.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantProcessor,
    TenantProducer,
    open_error_store,
)
from boost_tenancy.observability import configure_logging
from boost_tenancy.ops.parking import ParkingSweeper
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.transports.stomp import StompSettings, StompTransport

MODEST, HEAVY = "modest", "heavy"


def settings() -> StompSettings:
    return StompSettings(
        host=os.environ.get("BOOST_BROKER_HOST", "127.0.0.1"),
        port=int(os.environ.get("BOOST_BROKER_STOMP_PORT", "61613")),
        receipt_timeout_s=60.0,
    )


class Timed(TenantProcessor):
    """Records send-to-handler latency; the heavy tenant's handler also does some work."""

    def __init__(self, queue: str, out: Any, work_s: float) -> None:
        self.queues = (queue,)
        self._out = out
        self._work_s = work_s

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self._out.put(time.time() - float(message.data["sentAt"]))
        if self._work_s:
            time.sleep(self._work_s)


def run_tenant(  # noqa: PLR0917  # a multiprocessing target takes its arguments positionally
    tenant: str, queue: str, topology: str, work_s: float, out: Any, ready: MpEvent, stop: MpEvent
) -> None:
    configure_logging("console", "WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        runner = ProcessorRunner(
            Timed(queue, out, work_s),
            StompTransport(settings()),
            [tenant],
            error_store=open_error_store(str(Path(tmp) / "errors.sqlite3")),
            settings=RunnerSettings(workers=2, prefetch=50),
            routing=Routing(default=Topology(topology)),
        )
        runner.start()
        ready.set()
        stop.wait()
        runner.stop(grace_s=2)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    topology: Topology
    heavy: str  # "none", "running", "stopped"
    parking: bool = False


@dataclass(frozen=True, slots=True)
class Result:
    scenario: Scenario
    latencies: list[float]
    sent: int

    def percentile(self, p: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_scenario(s: Scenario, modest_n: int, ratio: int, rate: float, wait_s: float) -> Result:
    ctx = mp.get_context("spawn")
    queue = f"nn.{uuid.uuid4().hex[:8]}"
    routing = Routing(default=s.topology)
    stop = ctx.Event()
    modest_out, heavy_out = ctx.Queue(), ctx.Queue()
    procs = []
    for tenant, out, work_s, wanted in (
        (MODEST, modest_out, 0.0, True),
        (HEAVY, heavy_out, 0.005, s.heavy == "running"),
    ):
        if not wanted:
            continue
        ready = ctx.Event()
        proc = ctx.Process(
            target=run_tenant,
            args=(tenant, queue, s.topology.value, work_s, out, ready, stop),
            daemon=True,
        )
        proc.start()
        if not ready.wait(60):
            raise RuntimeError(f"{tenant} runner did not start")
        procs.append(proc)
    transport = StompTransport(settings())
    transport.connect()
    sweeper = None
    with tempfile.TemporaryDirectory() as tmp:
        if s.parking:
            active = [MODEST] + ([HEAVY] if s.heavy == "running" else [])
            sweeper = ParkingSweeper(
                StompTransport(settings()),
                [queue],
                active,
                error_store=open_error_store(str(Path(tmp) / "parking.sqlite3")),
            )
            sweeper.start()
        producer = TenantProducer(transport, routing=routing)
        if s.heavy != "none":
            # The heavy tenant's backlog is on the broker before the modest tenant sends.
            with producer.batch() as batch:
                for n in range(modest_n * ratio):
                    batch.send(queue, HEAVY, {"n": n, "sentAt": time.time()})
        latencies: list[float] = []
        collector_done = threading.Event()

        def collect() -> None:
            while len(latencies) < modest_n and not collector_done.is_set():
                try:
                    latencies.append(modest_out.get(timeout=0.2))
                except Exception:  # noqa: S112  # queue.Empty from a multiprocessing queue
                    continue

        collector = threading.Thread(target=collect, daemon=True)
        collector.start()
        for n in range(modest_n):
            producer.send(queue, MODEST, {"n": n, "sentAt": time.time()})
            time.sleep(1.0 / rate)
        collector.join(wait_s)
        collector_done.set()
        collector.join(1)
        stop.set()
        for proc in procs:
            proc.join(15)
        if sweeper is not None:
            sweeper.stop()
    transport.close()
    return Result(s, list(latencies), modest_n)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modest", type=int, default=100, help="modest tenant's messages")
    parser.add_argument("--ratio", type=int, default=50, help="heavy volume / modest volume")
    parser.add_argument("--rate", type=float, default=50.0, help="modest messages per second")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait after sending")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scenarios = [
        Scenario("alone", Topology.SHARED, "none"),
        Scenario("beside heavy", Topology.SHARED, "running"),
        Scenario("beside heavy", Topology.SHARED, "stopped"),
        Scenario("beside heavy + parking", Topology.SHARED, "stopped", parking=True),
        Scenario("alone", Topology.PER_TENANT, "none"),
        Scenario("beside heavy", Topology.PER_TENANT, "running"),
        Scenario("beside heavy", Topology.PER_TENANT, "stopped"),
    ]
    print(
        f"noisy neighbour: modest {args.modest} messages at {args.rate:g}/s, heavy "
        f"{args.modest * args.ratio} ({args.ratio}x) queued ahead; heavy handler 5 ms, 2 workers; "
        f"latency send->handler in ms; waited {args.wait:g} s after the last send"
    )
    header = (
        f"{'topology':<11} {'scenario':<24} {'heavy proc':<10} {'p50':>8} {'p99':>8} "
        f"{'max':>8} {'delivered':>10} {'stuck':>6}"
    )
    print(header)
    rows = []
    for scenario in scenarios:
        result = run_scenario(scenario, args.modest, args.ratio, args.rate, args.wait)
        stuck = result.sent - len(result.latencies)
        heavy = scenario.heavy if scenario.heavy != "none" else "-"
        print(
            f"{scenario.topology.value:<11} {scenario.name:<24} {heavy:<10} "
            f"{fmt(result.percentile(50)):>8} {fmt(result.percentile(99)):>8} "
            f"{fmt(max(result.latencies) if result.latencies else None):>8} "
            f"{len(result.latencies):>6}/{result.sent:<3} {stuck:>6}",
            flush=True,
        )
        rows.append(
            {
                "topology": scenario.topology.value,
                "scenario": scenario.name,
                "heavy": scenario.heavy,
                "p50_ms": None if not result.latencies else result.percentile(50) * 1000,
                "p99_ms": None if not result.latencies else result.percentile(99) * 1000,
                "delivered": len(result.latencies),
                "sent": result.sent,
                "median_ms": statistics.median(result.latencies) * 1000
                if result.latencies
                else None,
            }
        )
    for topology in (Topology.SHARED, Topology.PER_TENANT):
        alone = next(r for r in rows if r["topology"] == topology and r["heavy"] == "none")
        for row in rows:
            if row["topology"] != topology or row["heavy"] == "none":
                continue
            if row["p99_ms"] and alone["p99_ms"]:
                ratio = row["p99_ms"] / alone["p99_ms"]
                verdict = "within 2x" if ratio <= 2 and row["delivered"] == row["sent"] else "NOT"
                print(
                    f"{topology.value:<11} {row['scenario']:<24} heavy {row['heavy']:<8} "
                    f"p99 / alone = {ratio:,.2f}  ({verdict})"
                )
            else:
                print(
                    f"{topology.value:<11} {row['scenario']:<24} heavy {row['heavy']:<8} "
                    f"p99 / alone = n/a ({row['delivered']}/{row['sent']} delivered)"
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
