"""What the queue admin reports: a tenant's queue as listed, what a drain wait saw, what a
delete removed, and the listed queues as a text table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from boost_tenancy.ops.queue_states import QueueState
from boost_tenancy.ops.stats import text_table
from boost_tenancy.tenancy import TenantId


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantQueueRow:
    """One of a tenant's queues: its broker counts, dead letters, quarantine and state."""

    tenant: TenantId
    queue: str
    """The logical queue, as services name it."""
    broker_queue: str
    exists: bool
    """Whether the broker has broker_queue (a deleted one may be gone)."""
    depth: int
    in_flight: int
    consumers: int
    dead_lettered: int
    """Messages on DLQ.<broker queue>."""
    quarantined: int
    """Messages on DLQ.<broker queue>.quarantine."""
    state: QueueState | None
    """None where no queue state store is configured."""

    def as_json(self) -> dict[str, object]:
        return {
            "tenant": self.tenant.value,
            "queue": self.queue,
            "broker_queue": self.broker_queue,
            "exists": self.exists,
            "depth": self.depth,
            "in_flight": self.in_flight,
            "consumers": self.consumers,
            "dead_lettered": self.dead_lettered,
            "quarantined": self.quarantined,
            "state": None if self.state is None else self.state.value,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainReport:
    """What the broker showed of a draining queue when the wait ended."""

    tenant: TenantId
    queue: str
    broker_queue: str
    drained: bool
    """No consumer and nothing in flight."""
    consumers: int
    in_flight: int
    depth: int
    """Messages left waiting on the queue (kept for a resume, or purged by delete)."""
    waited_s: float

    def as_json(self) -> dict[str, object]:
        return {
            "tenant": self.tenant.value,
            "queue": self.queue,
            "broker_queue": self.broker_queue,
            "drained": self.drained,
            "consumers": self.consumers,
            "in_flight": self.in_flight,
            "depth": self.depth,
            "waited_s": round(self.waited_s, 3),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteReport:
    """How many messages a delete removed, and what became of the dead letters."""

    tenant: TenantId
    queue: str
    broker_queue: str
    removed: int
    dead_letters_removed: int | None
    """None when the dead-letter and quarantine queues were kept."""
    quarantine_removed: int | None
    dead_letters_kept: int
    """Messages left on DLQ.<broker queue> and its quarantine queue."""

    def as_json(self) -> dict[str, object]:
        return {
            "tenant": self.tenant.value,
            "queue": self.queue,
            "broker_queue": self.broker_queue,
            "state": QueueState.DELETED.value,
            "removed": self.removed,
            "dead_letters_removed": self.dead_letters_removed,
            "quarantine_removed": self.quarantine_removed,
            "dead_letters_kept": self.dead_letters_kept,
        }


def rows_table(rows: Sequence[TenantQueueRow]) -> str:
    """The rows as a text table."""
    header = ("queue", "broker queue", "state", *(_LABELS[n] for n in _COUNTS))
    lines = [
        (
            row.queue,
            row.broker_queue if row.exists else f"{row.broker_queue} (absent)",
            "n/a" if row.state is None else row.state.value,
            *(str(getattr(row, n)) for n in _COUNTS),
        )
        for row in rows
    ]
    return "\n".join(text_table(header, lines, texts=3)) + "\n"


_COUNTS: Final = ("depth", "in_flight", "consumers", "dead_lettered", "quarantined")
_LABELS: Final = {
    "depth": "depth",
    "in_flight": "in flight",
    "consumers": "consumers",
    "dead_lettered": "dead-lettered",
    "quarantined": "quarantined",
}


__all__ = ["DeleteReport", "DrainReport", "TenantQueueRow", "rows_table"]
