"""The in-memory broker's queue counts: what Classic's statistics plugin reports of its queues,
and what Artemis's listQueues counts of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from boost_tenancy.testing.broker_records import Consumer, Stored
from boost_tenancy.testing.diverts import QueueCount
from boost_tenancy.transports.base import QueueStats


def classic_queue_stats(
    held: Mapping[str, Sequence[Stored]],
    consumers: Sequence[Consumer],
    queues: Sequence[str],
    now: float,
) -> dict[str, QueueStats | None]:
    """What Classic's statistics plugin reports of each of queues: None for a queue never sent
    to nor subscribed to; scheduled messages are in no count, and their number is not told."""
    stats: dict[str, QueueStats | None] = {}
    for queue in queues:
        stored = held.get(queue)
        if stored is None:
            stats[queue] = None
            continue
        in_flight = sum(1 for c in consumers for s in c.in_flight.values() if s.queue == queue)
        waiting = sum(1 for s in stored if s.available_at <= now)
        stats[queue] = QueueStats(waiting=waiting, in_flight=in_flight, scheduled=None)
    return stats


def artemis_queue_counts(
    held: Mapping[str, Sequence[Stored]], consumers: Sequence[Consumer], now: float
) -> list[QueueCount]:
    """Every queue as Artemis's listQueues counts it."""
    counts = []
    for name, stored in held.items():
        holding = [c for c in consumers if c.queue == name]
        counts.append(
            QueueCount(
                name=name,
                waiting=sum(1 for s in stored if s.available_at <= now),
                in_flight=sum(
                    1 for c in consumers for s in c.in_flight.values() if s.queue == name
                ),
                scheduled=sum(1 for s in stored if s.available_at > now),
                consumers=len(holding),
            )
        )
    return counts
