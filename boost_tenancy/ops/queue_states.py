"""The state operators give a tenant's queue (active, draining, deleted), where it is kept, and the
watcher through which running runners follow it.

The states live in boost_tenant_queue_states, next to the policy tables in the policy store
(BOOST_POLICY_STORE, SQLite or PostgreSQL); every change is audited in the policy audit table,
as the field queue:<queue>, so `policy history` shows it beside the tenant's limits. A runner
reads them through a QueueStateWatcher: one query for every tenant's held queues, every poll_s
seconds on a thread of its own; a failed read keeps the last states known.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.draining import ApplyHeld, QueueKey
from boost_tenancy.quotas.policy import PolicyChange
from boost_tenancy.quotas.policy_store import SqlPolicyStore, check_actor, open_policy_backend
from boost_tenancy.routing import check_logical_queue
from boost_tenancy.sqlstore import SqlBackend
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.ops.queue_states")

STATE_TABLE: Final = "boost_tenant_queue_states"
AUDIT_FIELD_PREFIX: Final = "queue:"
"""A state change is audited as the field queue:<queue> of the tenant."""
DEFAULT_POLL_S: Final = 5.0

_SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} ("
    "tenant TEXT NOT NULL, queue TEXT NOT NULL, state TEXT NOT NULL, "
    "updated_at TEXT NOT NULL, updated_by TEXT NOT NULL, PRIMARY KEY (tenant, queue))",
)


class QueueState(enum.StrEnum):
    """What runners do with a tenant's queue."""

    ACTIVE = "active"
    """Consumed (a queue with no state recorded is active)."""
    DRAINING = "draining"
    """Runners take nothing new from it and end their subscription once what they took is
    settled; `queues resume` makes it active again, `queues delete` purges it."""
    DELETED = "deleted"
    """Purged; runners never subscribe to it (until resumed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStateRecord:
    """A tenant's queue's state, and who set it when."""

    tenant: TenantId
    queue: str
    state: QueueState
    updated_at: datetime
    updated_by: str

    def as_json(self) -> dict[str, str]:
        return {
            "tenant": self.tenant.value,
            "queue": self.queue,
            "state": self.state.value,
            "updated_at": self.updated_at.isoformat(),
            "updated_by": self.updated_by,
        }


class HeldQueues(Protocol):
    """What a QueueStateWatcher reads: every (tenant, queue) that is not active."""

    def held(self) -> list[QueueStateRecord]: ...


class SqlQueueStateStore:
    """The queue state table over the policy store's connection, audited in its audit table."""

    def __init__(self, backend: SqlBackend) -> None:
        self._backend = backend
        self._audit = SqlPolicyStore(backend)
        p = backend.placeholder
        columns = "tenant, queue, state, updated_at, updated_by"
        self._select = f"SELECT {columns} FROM {STATE_TABLE} WHERE tenant = {p} AND queue = {p}"  # noqa: S608  # constant names
        self._select_tenant = f"SELECT {columns} FROM {STATE_TABLE} WHERE tenant = {p}"  # noqa: S608  # constant names
        self._select_held = f"SELECT {columns} FROM {STATE_TABLE} WHERE state <> {p}"  # noqa: S608  # constant names
        self._upsert = (
            f"INSERT INTO {STATE_TABLE} ({columns}) VALUES ({p}, {p}, {p}, {p}, {p}) "  # noqa: S608  # constant names
            "ON CONFLICT (tenant, queue) DO UPDATE SET state = excluded.state, "
            "updated_at = excluded.updated_at, updated_by = excluded.updated_by"
        )

    def get(self, tenant: TenantId | str, queue: str) -> QueueStateRecord | None:
        """The queue's recorded state; None when none was ever recorded (it is active)."""
        params = (TenantId.parse(tenant).value, check_logical_queue(queue))
        rows = self._backend.execute("get queue state", self._select, params, fetch=True)
        return _record(rows[0]) if rows else None

    def state(self, tenant: TenantId | str, queue: str) -> QueueState:
        record = self.get(tenant, queue)
        return QueueState.ACTIVE if record is None else record.state

    def of_tenant(self, tenant: TenantId | str) -> list[QueueStateRecord]:
        """Every recorded state of the tenant's queues, by queue."""
        params = (TenantId.parse(tenant).value,)
        rows = self._backend.execute("list queue states", self._select_tenant, params, fetch=True)
        return sorted((_record(row) for row in rows), key=lambda r: r.queue)

    def held(self) -> list[QueueStateRecord]:
        """Every tenant's queues that are draining or deleted."""
        rows = self._backend.execute(
            "read held queues", self._select_held, (QueueState.ACTIVE.value,), fetch=True
        )
        return [_record(row) for row in rows]

    def set(
        self, tenant: TenantId | str, queue: str, state: QueueState, *, actor: str
    ) -> PolicyChange | None:
        """Record the queue's state and audit the change; None when it already had that state."""
        tenant_id = TenantId.parse(tenant)
        name = check_logical_queue(queue)
        new = QueueState(state)
        who = check_actor(actor)
        old = self.state(tenant_id, name)
        if old is new:
            return None
        now = datetime.now(UTC)
        row = (tenant_id.value, name, new.value, now.isoformat(), who)
        self._backend.execute("set queue state", self._upsert, row, fetch=False)
        return self._audit.record(
            tenant_id, AUDIT_FIELD_PREFIX + name, old.value, new.value, actor=who, at=now
        )

    def history(self, tenant: TenantId | str, queue: str, *, limit: int = 50) -> list[PolicyChange]:
        """The queue's audited state changes, newest first."""
        field = AUDIT_FIELD_PREFIX + check_logical_queue(queue)
        # The audit table is read per tenant; a tenant's other changes are filtered out here.
        changes = self._audit.history(TenantId.parse(tenant), limit=max(limit * 10, 500))
        return [c for c in changes if c.field == field][:limit]

    def close(self) -> None:
        self._backend.close()


def _record(row: Sequence[object]) -> QueueStateRecord:
    tenant, queue, state, updated_at, updated_by = row
    try:
        return QueueStateRecord(
            tenant=TenantId.parse(str(tenant)),
            queue=str(queue),
            state=QueueState(str(state)),
            updated_at=datetime.fromisoformat(str(updated_at)),
            updated_by=str(updated_by),
        )
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"{STATE_TABLE} holds an invalid row {tuple(row)!r}: {exc}") from exc


def open_queue_state_store(url: str) -> SqlQueueStateStore:
    """The queue state store in the policy store a URL names (postgresql://, sqlite:///path)."""
    return SqlQueueStateStore(open_policy_backend(url, schema=_SCHEMA))


class QueueStateWatcher:
    """A runner's QueueStateSource (processing/draining.py): the held (tenant, queue) pairs,
    read from the store every poll_s seconds on a thread of its own. A read that fails keeps the
    last pairs known (logged as queue_state_lookup_failed); the runner never waits for one."""

    def __init__(self, store: HeldQueues, *, poll_s: float = DEFAULT_POLL_S) -> None:
        if not poll_s > 0:
            raise ConfigError(f"QueueStateWatcher poll_s must be positive, got {poll_s!r}")
        self._store = store
        self._poll_s = poll_s
        self._held: frozenset[QueueKey] = frozenset()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> frozenset[QueueKey]:
        """The pairs known held now."""
        return self._held

    def read(self) -> frozenset[QueueKey]:
        """Read the store now; the last pairs known when it fails."""
        try:
            records = self._store.held()
        except Exception as exc:  # any store failure keeps the last states, whatever its type
            log.warning(
                "queue_state_lookup_failed",
                kept=len(self._held),
                error_type=type(exc).__name__,
                error=str(exc),
            )
            return self._held
        self._held = frozenset((r.tenant, r.queue) for r in records)
        return self._held

    def first_read(self) -> Collection[QueueKey]:
        return self.read()

    def start(self, apply: ApplyHeld) -> None:
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self._poll_s):
                held = self.read()
                try:
                    apply(held)
                except Exception:  # the watcher must outlive a failing apply; it runs again
                    log.exception("queue_state_apply_failed")

        self._thread = threading.Thread(target=loop, name="boost-queue-states", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)


__all__ = [
    "AUDIT_FIELD_PREFIX",
    "DEFAULT_POLL_S",
    "STATE_TABLE",
    "HeldQueues",
    "QueueState",
    "QueueStateRecord",
    "QueueStateWatcher",
    "SqlQueueStateStore",
    "open_queue_state_store",
]
