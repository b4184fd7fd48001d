"""Cost per message of the runner's fair work queue with 1,000 tenants, against queue.SimpleQueue.

Each round times put + get of the same items through both queues, single-threaded and with two
producer and two consumer threads; figures are medians over rounds, ratios taken within a round.

    .venv/bin/python benchmarks/bench_scheduler.py [--messages N] [--tenants T] [--rounds R]
"""

from __future__ import annotations

import argparse
import platform
import queue as queue_mod
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from boost_tenancy import TenantId
from boost_tenancy.processing.scheduling import FairWorkQueue

GET_TIMEOUT_S = 0.2
"""The runner's worker timeout, so both queues take the same get path as in production."""


class WorkQueue(Protocol):
    """The two operations the runner uses, over either queue."""

    def put(self, tenant: TenantId, item: int) -> None: ...

    def get(self) -> tuple[TenantId, int] | None: ...


class SimpleBaseline:
    """queue.SimpleQueue as the runner used it: FIFO of (tenant, item) tuples."""

    def __init__(self) -> None:
        self._queue: queue_mod.SimpleQueue[tuple[TenantId, int]] = queue_mod.SimpleQueue()

    def put(self, tenant: TenantId, item: int) -> None:
        self._queue.put((tenant, item))

    def get(self) -> tuple[TenantId, int] | None:
        try:
            return self._queue.get(timeout=GET_TIMEOUT_S)
        except queue_mod.Empty:
            return None


class Fair:
    """FairWorkQueue with every tenant at the default weight."""

    def __init__(self) -> None:
        self._queue: FairWorkQueue[int] = FairWorkQueue()

    def put(self, tenant: TenantId, item: int) -> None:
        self._queue.put(tenant, item)

    def get(self) -> tuple[TenantId, int] | None:
        return self._queue.get(GET_TIMEOUT_S)


def single_threaded(work: WorkQueue, picks: Sequence[TenantId]) -> float:
    """Put every item, then take every item (a local backlog); seconds."""
    started = time.perf_counter()
    for index, tenant in enumerate(picks):
        work.put(tenant, index)
    for _ in range(len(picks)):
        if work.get() is None:
            raise RuntimeError("queue ran dry before every item was taken")
    return time.perf_counter() - started


def threaded(
    work: WorkQueue, picks: Sequence[TenantId], producers: int = 2, consumers: int = 2
) -> float:
    """producers put their share while consumers take theirs concurrently; seconds."""
    shares = [picks[p::producers] for p in range(producers)]
    takes = [len(picks) // consumers + (c < len(picks) % consumers) for c in range(consumers)]
    go = threading.Event()

    def produce(share: Sequence[TenantId]) -> None:
        go.wait()
        for index, tenant in enumerate(share):
            work.put(tenant, index)

    def consume(count: int) -> None:
        go.wait()
        taken = 0
        while taken < count:
            if work.get() is not None:
                taken += 1

    threads = [threading.Thread(target=produce, args=(share,)) for share in shares]
    threads += [threading.Thread(target=consume, args=(count,)) for count in takes]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def run(
    mode: Callable[[WorkQueue, Sequence[TenantId]], float],
    picks: Sequence[TenantId],
    rounds: int,
) -> tuple[float, float, float]:
    """Median ns per message of the fair queue, of the baseline, and of their per-round ratio."""
    fair_ns: list[float] = []
    base_ns: list[float] = []
    ratios: list[float] = []
    for round_no in range(rounds):
        # Alternate which goes first, so warm-up and drift fall on both alike.
        order: list[type[Fair] | type[SimpleBaseline]] = [Fair, SimpleBaseline]
        if round_no % 2:
            order.reverse()
        timings: dict[type[Fair] | type[SimpleBaseline], float] = {}
        for kind in order:
            timings[kind] = mode(kind(), picks) / len(picks) * 1e9
        fair_ns.append(timings[Fair])
        base_ns.append(timings[SimpleBaseline])
        ratios.append(timings[Fair] / timings[SimpleBaseline])
    return statistics.median(fair_ns), statistics.median(base_ns), statistics.median(ratios)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    tenants = [TenantId(f"tenant-{index:04d}") for index in range(args.tenants)]
    # Drawn once with a fixed seed: every round and both queues see the same sequence.
    rng = random.Random(20240601)
    picks = [rng.choice(tenants) for _ in range(args.messages)]
    print(
        f"python {platform.python_version()} ({sys.implementation.name}), "
        f"{args.messages:,} messages over {args.tenants:,} tenants, {args.rounds} rounds, medians"
    )
    print(f"{'mode':<28}{'FairWorkQueue':>16}{'SimpleQueue':>16}{'ratio':>9}")
    modes: list[tuple[str, Callable[[WorkQueue, Sequence[TenantId]], float]]] = [
        ("single thread (put+get)", single_threaded),
        ("2 producers / 2 consumers", threaded),
    ]
    for name, mode in modes:
        fair, base, ratio = run(mode, picks, args.rounds)
        print(f"{name:<28}{fair:>12.0f} ns{base:>13.0f} ns{ratio:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
