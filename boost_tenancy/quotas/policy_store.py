"""Tenants' policies and the audit of every change, in SQLite (one host) or PostgreSQL (shared).

Two tables: boost_tenant_policies (one row per tenant with an override; NULL leaves a field
to the default) and boost_tenant_policy_audit (who changed which field when, old and new value).
A change writes the row, then one audit row per field that changed. The statements commit one by
one: two operators changing one tenant at once both succeed, the last write wins, and the audit
records each change as its writer saw it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.quotas.policy import POLICY_FIELDS, PolicyChange, PolicyValue, TenantPolicy
from boost_tenancy.sqlstore import PostgresBackend, SqlBackend, SQLiteBackend
from boost_tenancy.storage import parse_store_url
from boost_tenancy.tenancy import TenantId

POLICY_TABLE: Final = "boost_tenant_policies"
AUDIT_TABLE: Final = "boost_tenant_policy_audit"
MAX_ACTOR_CHARS: Final = 200

_SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {POLICY_TABLE} ("
    "tenant TEXT PRIMARY KEY, messages_per_s DOUBLE PRECISION, bytes_per_s DOUBLE PRECISION, "
    "burst_s DOUBLE PRECISION, max_message_bytes BIGINT, max_queued_messages BIGINT, "
    "ttl_s DOUBLE PRECISION, updated_at TEXT NOT NULL, updated_by TEXT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} ("
    "tenant TEXT NOT NULL, at_us BIGINT NOT NULL, actor TEXT NOT NULL, field TEXT NOT NULL, "
    "old_value TEXT, new_value TEXT)",
    f"CREATE INDEX IF NOT EXISTS {AUDIT_TABLE}_tenant ON {AUDIT_TABLE} (tenant, at_us)",
)
_ADDED_COLUMNS: Final = (("max_queued_messages", "BIGINT"), ("ttl_s", "DOUBLE PRECISION"))
"""Columns a policy table created by an earlier version lacks, added when a store opens it."""


class PolicyStoreError(BoostTenancyError):
    """The policy store could not read or write a tenant's policy."""


def check_actor(actor: object) -> str:
    """Who makes a change, as the audit records it: printable text of 1 to 200 characters."""
    if not isinstance(actor, str) or not actor.strip():
        raise ConfigError("a policy change needs an actor (who makes it), got none")
    if len(actor) > MAX_ACTOR_CHARS or not actor.isprintable():
        raise ConfigError(
            f"actor {actor[:40]!r} must be printable text of at most {MAX_ACTOR_CHARS} characters"
        )
    return actor.strip()


def _text(value: PolicyValue) -> str | None:
    return None if value is None else f"{value:g}" if isinstance(value, float) else str(value)


class SqlPolicyStore:
    """The policy tables over one backend connection (SQLite or PostgreSQL)."""

    def __init__(self, backend: SqlBackend) -> None:
        self._backend = backend
        p = backend.placeholder
        columns = ", ".join(POLICY_FIELDS)
        self._select = f"SELECT {columns} FROM {POLICY_TABLE} WHERE tenant = {p}"  # noqa: S608  # constant names
        marks = ", ".join([p] * (len(POLICY_FIELDS) + 3))
        updates = ", ".join(
            f"{n} = excluded.{n}" for n in (*POLICY_FIELDS, "updated_at", "updated_by")
        )
        # ON CONFLICT ... DO UPDATE is understood by SQLite (3.24+) and PostgreSQL alike.
        self._upsert = (
            f"INSERT INTO {POLICY_TABLE} (tenant, {columns}, updated_at, updated_by) "  # noqa: S608  # constant names
            f"VALUES ({marks}) ON CONFLICT (tenant) DO UPDATE SET {updates}"
        )
        self._audit = (
            f"INSERT INTO {AUDIT_TABLE} (tenant, at_us, actor, field, old_value, new_value) "  # noqa: S608  # constant names
            f"VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
        )
        self._history = (
            f"SELECT tenant, at_us, actor, field, old_value, new_value FROM {AUDIT_TABLE} "  # noqa: S608  # constant names
            f"WHERE tenant = {p} ORDER BY at_us DESC LIMIT {p}"
        )

    def get(self, tenant: TenantId) -> TenantPolicy:
        """The tenant's stored overrides (none set: an empty policy)."""
        key = TenantId.parse(tenant).value
        rows = self._backend.execute("get", self._select, (key,), fetch=True)
        if not rows:
            return TenantPolicy()
        values = dict(zip(POLICY_FIELDS, rows[0], strict=True))
        for name in ("max_message_bytes", "max_queued_messages"):
            if values[name] is not None:
                values[name] = int(values[name])
        try:
            return TenantPolicy(**values)
        except ConfigError as exc:
            # Written by hand around the CLI: named, and the resolver keeps the last good one.
            raise PolicyStoreError(
                f"{POLICY_TABLE} holds an invalid policy for {key!r}: {exc}"
            ) from exc

    def set(
        self, tenant: TenantId, changes: Mapping[str, PolicyValue], *, actor: str
    ) -> list[PolicyChange]:
        """Apply changes (None clears a field) and audit each field that changed; returns the
        audited changes (none when nothing changed)."""
        tenant_id = TenantId.parse(tenant)
        who = check_actor(actor)
        old = self.get(tenant_id)
        new = old.changed({n: _normalised(n, v) for n, v in changes.items()})
        fields = [n for n in POLICY_FIELDS if getattr(old, n) != getattr(new, n)]
        if not fields:
            return []
        now = datetime.now(UTC)
        row = (tenant_id.value, *(getattr(new, n) for n in POLICY_FIELDS), now.isoformat(), who)
        self._backend.execute("set", self._upsert, row, fetch=False)
        return [
            self.record(
                tenant_id, n, _text(getattr(old, n)), _text(getattr(new, n)), actor=who, at=now
            )
            for n in fields
        ]

    def record(
        self,
        tenant: TenantId,
        field: str,
        old: str | None,
        new: str | None,
        *,
        actor: str,
        at: datetime | None = None,
    ) -> PolicyChange:
        """Audit one change (the tier, changed in the tier store, is recorded here too)."""
        tenant_id = TenantId.parse(tenant)
        who = check_actor(actor)
        when = at or datetime.now(UTC)
        at_us = int(when.timestamp() * 1_000_000)
        params = (tenant_id.value, at_us, who, field, old, new)
        self._backend.execute("audit", self._audit, params, fetch=False)
        return PolicyChange(
            tenant=tenant_id.value, at=when, actor=who, field=field, old=old, new=new
        )

    def history(self, tenant: TenantId, *, limit: int = 50) -> list[PolicyChange]:
        """The tenant's latest audited changes, newest first."""
        params = (TenantId.parse(tenant).value, int(limit))
        rows = self._backend.execute("history", self._history, params, fetch=True)
        return [
            PolicyChange(
                tenant=t,
                at=datetime.fromtimestamp(at_us / 1_000_000, UTC),
                actor=actor,
                field=field,
                old=old,
                new=new,
            )
            for t, at_us, actor, field, old, new in rows
        ]

    def close(self) -> None:
        self._backend.close()


def _normalised(name: str, value: PolicyValue) -> PolicyValue:
    """Numbers as the fields hold them: floats for rates, an int for the size cap."""
    if value is None or isinstance(value, bool):
        return value
    if name in ("max_message_bytes", "max_queued_messages"):
        return value
    return float(value) if isinstance(value, int) else value


def open_policy_store(url: str) -> SqlPolicyStore:
    """The policy store a URL names: postgresql://, postgres://, sqlite:///path or a path."""
    return SqlPolicyStore(open_policy_backend(url))


def open_policy_backend(url: str, *, schema: Sequence[str] = ()) -> SqlBackend:
    """The connection of the policy store a URL names, with the policy tables and schema (the
    tables of another store kept next to them, ops/queue_states.py)."""
    parsed = parse_store_url(url, what="policy store")
    what = "policy store"
    if parsed.backend == "postgresql":
        return PostgresBackend(
            parsed.target,
            error=PolicyStoreError,
            what=what,
            needed_by="the policy store",
            # A table from before the backlog quota or the TTL gains its columns.
            schema=(
                *_SCHEMA,
                *(
                    f"ALTER TABLE {POLICY_TABLE} ADD COLUMN IF NOT EXISTS {name} {kind}"
                    for name, kind in _ADDED_COLUMNS
                ),
                *schema,
            ),
        )
    backend = SQLiteBackend(
        os.fspath(parsed.target), error=PolicyStoreError, what=what, schema=(*_SCHEMA, *schema)
    )
    try:
        _add_sqlite_columns(backend)
    except PolicyStoreError:
        backend.close()
        raise
    return backend


def _add_sqlite_columns(backend: SqlBackend) -> None:
    """The columns an older SQLite policy table lacks (SQLite has no ADD COLUMN IF NOT EXISTS).
    Two processes may both try: the loser's duplicate column is no failure."""
    table_info = f"PRAGMA table_info({POLICY_TABLE})"
    have = {row[1] for row in backend.execute("read columns", table_info, (), fetch=True)}
    for name, kind in _ADDED_COLUMNS:
        if name in have:
            continue
        add = f"ALTER TABLE {POLICY_TABLE} ADD COLUMN {name} {kind}"
        try:
            backend.execute("add column", add, (), fetch=False)
        except PolicyStoreError:
            now = {row[1] for row in backend.execute("read columns", table_info, (), fetch=True)}
            if name not in now:
                raise


__all__ = [
    "AUDIT_TABLE",
    "POLICY_TABLE",
    "PolicyStoreError",
    "SqlPolicyStore",
    "check_actor",
    "open_policy_backend",
    "open_policy_store",
]
