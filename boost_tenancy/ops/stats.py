"""Per-tenant queue statistics: for each logical queue of a tenant, what its broker queues hold
(waiting, in flight, scheduled, dead-lettered, quarantined, parked), from the transport's
queue_stats where its capabilities declare queue_statistics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.routing import (
    DEFAULT_ROUTING,
    Routing,
    Topology,
    check_logical_queue,
    parked_queue,
)
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import (
    BrokerCount,
    QueueStats,
    Transport,
    broker_counts_reader,
    queue_stats_reader,
)

COUNTS: Final = ("depth", "in_flight", "scheduled", "dead_lettered", "quarantined", "parked")
"""The counts of a QueueRow, in the order they are shown."""

SHARED_QUEUE: Final = "not available per tenant on a shared queue"
"""Why a shared queue's counts are missing: its messages, dead letters and quarantine are every
tenant's at once, and no broker here counts one tenant's share (a selector count)."""
NOT_REPORTED: Final = "the broker does not count them per queue"
"""Why scheduled is missing: Classic's scheduler holds delayed messages for the whole broker."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRow:
    """One tenant's counts of one logical queue; None where the broker cannot tell, and why in
    unavailable (count name -> reason)."""

    tenant: TenantId
    queue: str
    """The logical queue, as services name it."""
    topology: Topology
    broker_queue: str
    """Where the tenant's messages are stored: tenant.<tenant>.<queue>, or the shared queue."""
    exists: bool
    """Whether the broker has broker_queue (nothing sent to it nor consumed from it yet, else)."""
    depth: int | None
    """Messages waiting: stored and not delivered to a consumer yet."""
    in_flight: int | None
    """Delivered to a consumer and not acknowledged yet."""
    scheduled: int | None
    """Delayed retries the broker holds for the queue."""
    dead_lettered: int | None
    """Messages on the dead-letter queue, DLQ.<broker queue>."""
    quarantined: int | None
    """Messages on the quarantine queue, DLQ.<broker queue>.quarantine."""
    parked: int | None
    """Messages on parked.<tenant>.<queue> (shared queues park tenants without a processor)."""
    unavailable: Mapping[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int | None]:
        """The counts by name, in COUNTS order."""
        return {name: getattr(self, name) for name in COUNTS}

    def as_json(self) -> dict[str, object]:
        return {
            "tenant": self.tenant.value,
            "queue": self.queue,
            "topology": self.topology.value,
            "broker_queue": self.broker_queue,
            "exists": self.exists,
            **self.counts(),
            "unavailable": dict(self.unavailable),
        }


@dataclass(frozen=True, slots=True)
class _Plan:
    """The broker queues one row reads."""

    tenant: TenantId
    queue: str
    topology: Topology
    broker_queue: str
    parked: str

    @classmethod
    def of(cls, routing: Routing, tenant: TenantId, queue: str) -> _Plan:
        return cls(
            tenant,
            queue,
            routing.topology(queue),
            routing.physical(queue, tenant),
            parked_queue(queue, tenant),
        )

    @property
    def shared(self) -> bool:
        return self.topology is Topology.SHARED

    def names(self) -> list[str]:
        if self.shared:
            return [self.broker_queue, self.parked]
        return [
            self.broker_queue,
            dead_letter_queue(self.broker_queue),
            quarantine_queue(self.broker_queue),
            self.parked,
        ]

    def row(self, stats: Mapping[str, QueueStats | None]) -> QueueRow:
        main = stats.get(self.broker_queue)
        shared = self.shared
        scheduled = None if shared or main is None else main.scheduled
        if shared:
            unavailable = {name: SHARED_QUEUE for name in COUNTS if name != "parked"}
        else:
            unavailable = {"scheduled": NOT_REPORTED} if scheduled is None else {}
        return QueueRow(
            tenant=self.tenant,
            queue=self.queue,
            topology=self.topology,
            broker_queue=self.broker_queue,
            exists=main is not None,
            depth=None if shared else (0 if main is None else main.waiting),
            in_flight=None if shared else (0 if main is None else main.in_flight),
            scheduled=scheduled,
            dead_lettered=None if shared else _stored(stats, dead_letter_queue(self.broker_queue)),
            quarantined=None if shared else _stored(stats, quarantine_queue(self.broker_queue)),
            parked=_stored(stats, self.parked),
            unavailable=unavailable,
        )


def _stored(stats: Mapping[str, QueueStats | None], queue: str) -> int:
    """Every message queue holds; a queue the broker does not have holds none."""
    found = stats.get(queue)
    return 0 if found is None else found.stored


class TenantStats:
    """Counts of tenants' logical queues, read from the broker in one request per call.

    The transport must be connected (its capabilities come from the broker); one without
    queue_statistics raises QueueStatsUnavailableError, as does a broker not configured to
    answer. Use the same routing as the queues' producers and runners.
    """

    def __init__(self, transport: Transport, *, routing: Routing = DEFAULT_ROUTING) -> None:
        self._transport = transport
        self._routing = routing

    def rows(self, tenant: TenantId | str, queues: Sequence[str]) -> list[QueueRow]:
        """One row per queue of one tenant, in the order given."""
        return self.rows_for([tenant], queues)

    def rows_for(self, tenants: Sequence[TenantId | str], queues: Sequence[str]) -> list[QueueRow]:
        """One row per (tenant, queue), tenants first, for Prometheus or a report of many."""
        plans = [
            _Plan.of(self._routing, TenantId.parse(tenant), check_logical_queue(queue))
            for tenant in tenants
            for queue in queues
        ]
        if not plans:
            return []
        reader = queue_stats_reader(self._transport)
        stats = reader.queue_stats(sorted({name for plan in plans for name in plan.names()}))
        return [plan.row(stats) for plan in plans]


_LABELS: Final = {
    "depth": "depth",
    "in_flight": "in flight",
    "scheduled": "scheduled",
    "dead_lettered": "dead-lettered",
    "quarantined": "quarantined",
    "parked": "parked",
}


def text_table(header: Sequence[str], lines: Sequence[Sequence[str]], *, texts: int) -> list[str]:
    """Aligned lines: the first texts columns left-aligned (names), the others right (counts)."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines, strict=True)]

    def render(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i < texts else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [render(header), *(render(line) for line in lines)]


def stats_table(rows: Sequence[QueueRow]) -> str:
    """The rows as a text table, with a note under it for every count shown as n/a and every
    broker queue that does not exist."""
    header = ("tenant", "queue", "topology", "broker queue", *(_LABELS[n] for n in COUNTS))
    lines = [
        (
            row.tenant.value,
            row.queue,
            row.topology.value,
            row.broker_queue,
            *("n/a" if v is None else str(v) for v in row.counts().values()),
        )
        for row in rows
    ]
    out = text_table(header, lines, texts=4)
    notes = _notes(rows)
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out) + "\n"


def broker_counts_of(transport: Transport, tenant: TenantId) -> list[BrokerCount] | None:
    """What the broker's own tenant layer (the project's Artemis plugin) counted for tenant:
    routed and refused at send time, per queue and reason; None where none runs."""
    reader = broker_counts_reader(transport)
    counts = None if reader is None else reader.broker_counts()
    if counts is None:
        return None
    return [count for count in counts if count.tenant == tenant.value]


def broker_counts_table(counts: Sequence[BrokerCount]) -> str:
    """The broker's counts of one tenant as a text table under the queue counts."""
    lines = [
        (count.queue, count.event, count.reason or "-", str(count.count))
        for count in sorted(counts, key=lambda c: (c.queue, c.event, c.reason))
    ]
    if not lines:
        return "at the broker (tenant plugin): nothing routed or refused for this tenant yet\n"
    table = text_table(("queue", "at the broker", "reason", "messages"), lines, texts=3)
    return "\n".join(["at the broker (tenant plugin), since it started:", *table]) + "\n"


def _notes(rows: Sequence[QueueRow]) -> list[str]:
    """One line per reason a count is n/a, naming the queues it applies to, then one per broker
    queue that does not exist."""
    one_tenant = len({row.tenant for row in rows}) == 1
    unavailable: dict[tuple[str, str], list[str]] = {}
    missing: list[str] = []
    for row in rows:
        where = row.queue if one_tenant else f"{row.tenant.value} {row.queue}"
        by_reason: dict[str, list[str]] = {}
        for name, reason in row.unavailable.items():
            by_reason.setdefault(reason, []).append(_LABELS[name])
        for reason, names in by_reason.items():
            unavailable.setdefault((", ".join(names), reason), []).append(where)
        if not row.exists:
            missing.append(f"{where}: the broker has no queue {row.broker_queue} yet")
    return [
        f"n/a {names}: {reason} ({', '.join(wheres)})"
        for (names, reason), wheres in unavailable.items()
    ] + missing


__all__ = [
    "COUNTS",
    "NOT_REPORTED",
    "SHARED_QUEUE",
    "QueueRow",
    "TenantStats",
    "broker_counts_of",
    "broker_counts_table",
    "stats_table",
    "text_table",
]
