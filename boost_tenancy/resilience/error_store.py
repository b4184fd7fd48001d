"""The error store: a durable record of every handling failure, made before a retry or dead letter.

SQLite serves a single host and PostgreSQL a fleet; both share one schema and one set of queries.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import structlog

from boost_tenancy.errors import ConfigError, ErrorStoreError
from boost_tenancy.sqlstore import PostgresBackend, SqlBackend, SQLiteBackend
from boost_tenancy.storage import parse_store_url
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.error_store")

_DEFAULT_TABLE: Final = "boost_failures"
_TABLE_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_MAX_ERROR_TEXT: Final = 8000
_TRUNCATION_MARKER: Final = "\u2026[truncated]"
# PostgreSQL text cannot hold NUL, and a quarantined message may carry anything in its tenantUUID;
# replacing NUL in both backends keeps the record storable and the two backends alike.
_NUL_REPLACEMENT: Final = "\ufffd"
_COLUMNS: Final = (
    "tenant",
    "raw_tenant",
    "queue",
    "message_id",
    "correlation_id",
    "attempt",
    "outcome",
    "error_type",
    "error_text",
    "occurred_at",
)


class FailureOutcome(enum.StrEnum):
    """What the toolkit did with a message after a handling failure."""

    RETRY = "retry"
    """The message will be redelivered after a backoff."""
    DEAD_LETTER = "dead_letter"
    """The message was moved to the dead-letter queue."""
    QUARANTINE = "quarantine"
    """Tenancy violation (missing or mismatched tenantUUID); the message was moved to the DLQ."""
    REDRIVE = "redrive"
    """An operator re-drove the message from the DLQ to its queue."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRecord:
    """One failed handling attempt of one message, as the error store keeps it."""

    tenant: TenantId | None
    """The message's tenant; None only for quarantined messages that carry no valid tenant."""
    queue: str
    """The source queue, e.g. "cmd.document.process"."""
    message_id: str
    """The toolkit's stable message id."""
    correlation_id: str | None
    attempt: int
    """The 1-based attempt number that failed."""
    outcome: FailureOutcome
    error_type: str
    """The error's type, e.g. "TransientError" or "builtins.ValueError"."""
    error_text: str
    occurred_at: datetime
    """When the attempt failed; timezone-aware, normalised to UTC."""
    raw_tenant: str | None = None
    """For quarantine: the offending tenantUUID value as received (may be invalid); else None."""

    def __post_init__(self) -> None:
        when: object = self.occurred_at
        if not isinstance(when, datetime):
            raise ErrorStoreError(f"occurred_at must be a datetime, got {type(when).__name__}")
        if when.utcoffset() is None:
            raise ErrorStoreError(
                f"occurred_at {when.isoformat()} is naive; it must be timezone-aware (UTC)"
            )
        # Normalising here makes a record equal to its stored round trip whatever zone it came in.
        object.__setattr__(self, "occurred_at", when.astimezone(UTC))

        tenant: object = self.tenant
        outcome: object = self.outcome
        if not isinstance(outcome, FailureOutcome):
            raise ErrorStoreError(f"outcome must be a FailureOutcome, got {outcome!r}")
        if tenant is None and outcome is not FailureOutcome.QUARANTINE:
            raise ErrorStoreError(
                f"a {outcome.value} record needs a tenant; only quarantine records may have none"
            )
        if tenant is not None and not isinstance(tenant, TenantId):
            raise ErrorStoreError(f"tenant must be a TenantId or None, got {type(tenant).__name__}")
        attempt: object = self.attempt
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ErrorStoreError(f"attempt must be an integer of at least 1, got {attempt!r}")
        for name in ("queue", "message_id"):
            value: object = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ErrorStoreError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("error_type", "error_text"):
            if not isinstance(getattr(self, name), str):
                raise ErrorStoreError(f"{name} must be a string")
        for name in ("correlation_id", "raw_tenant"):
            optional: object = getattr(self, name)
            if optional is not None and not isinstance(optional, str):
                raise ErrorStoreError(f"{name} must be a string or None, got {optional!r}")


class ErrorStore(Protocol):
    """Where handling failures are recorded before the message is retried or dead-lettered."""

    def record(self, record: FailureRecord) -> None:
        """Store one failure; it is durable (committed) when this returns."""
        ...

    def failures(
        self,
        *,
        tenant: TenantId | None,
        queue: str | None = None,
        message_id: str | None = None,
        outcome: FailureOutcome | None = None,
        limit: int = 1000,
    ) -> list[FailureRecord]:
        """One tenant's failures, oldest first; tenant=None gives the tenantless quarantine ones."""
        ...

    def close(self) -> None:
        """Release the connection; the store cannot be used afterwards."""
        ...


def _checked_table(table: object) -> str:
    """Refuse any table name that is not a plain identifier: it is the only thing put into SQL."""
    if not isinstance(table, str) or _TABLE_RE.fullmatch(table) is None:
        raise ConfigError(
            f"error store table {table!r} is not a plain identifier: expected 1 to 63 characters "
            "from A-Z, a-z, 0-9 and '_', not starting with a digit"
        )
    return table


def _index_name(table: str) -> str:
    # PostgreSQL cuts identifiers at 63 bytes: "<table>_idx" could then collide with the table's
    # own name or a sibling table's index, so long names keep a prefix plus a digest of the whole.
    digest = hashlib.sha256(table.encode("ascii")).hexdigest()[:8]
    return f"{table[:48]}_{digest}_tqm"


def _schema_sql(table: str, *, id_column: str, timestamp_type: str) -> tuple[str, str]:
    """CREATE TABLE and CREATE INDEX statements; only the id and timestamp types differ."""
    create = (
        f'CREATE TABLE IF NOT EXISTS "{table}" ('
        f"id {id_column}, "
        "tenant TEXT, "
        "raw_tenant TEXT, "
        "queue TEXT NOT NULL, "
        "message_id TEXT NOT NULL, "
        "correlation_id TEXT, "
        "attempt INTEGER NOT NULL, "
        "outcome TEXT NOT NULL, "
        "error_type TEXT NOT NULL, "
        "error_text TEXT NOT NULL, "
        f"occurred_at {timestamp_type} NOT NULL)"
    )
    index = (
        f'CREATE INDEX IF NOT EXISTS "{_index_name(table)}" '
        f'ON "{table}" (tenant, queue, message_id)'
    )
    return create, index


def _insert_sql(table: str, placeholder: str) -> str:
    values = ", ".join([placeholder] * len(_COLUMNS))
    return f'INSERT INTO "{table}" ({", ".join(_COLUMNS)}) VALUES ({values})'  # noqa: S608  # table is a checked identifier


def _select_sql(
    table: str,
    placeholder: str,
    *,
    tenant: TenantId | None,
    queue: str | None,
    message_id: str | None,
    outcome: FailureOutcome | None,
    limit: int,
) -> tuple[str, list[object]]:
    """The filtered, oldest-first SELECT and its parameters, in either driver's placeholder."""
    conditions: list[str] = []
    params: list[object] = []
    if tenant is None:
        conditions.append("tenant IS NULL")
    else:
        conditions.append(f"tenant = {placeholder}")
        params.append(tenant.value)
    filters = (
        ("queue", queue),
        ("message_id", message_id),
        ("outcome", None if outcome is None else outcome.value),
    )
    for column, value in filters:
        if value is not None:
            conditions.append(f"{column} = {placeholder}")
            params.append(value)
    params.append(limit)
    sql = (
        f'SELECT {", ".join(_COLUMNS)} FROM "{table}" '  # noqa: S608  # table is a checked identifier
        f"WHERE {' AND '.join(conditions)} "
        f"ORDER BY occurred_at, id LIMIT {placeholder}"
    )
    return sql, params


def _storable(text: str) -> str:
    return text.replace("\x00", _NUL_REPLACEMENT)


def _storable_error_text(text: str) -> str:
    if len(text) > _MAX_ERROR_TEXT:
        # The start of an error (type, message, outermost frames) says the most; the marker keeps
        # the cut visible to whoever reads the record.
        text = text[: _MAX_ERROR_TEXT - len(_TRUNCATION_MARKER)] + _TRUNCATION_MARKER
    return _storable(text)


def _stored_values(record: FailureRecord, occurred_at: object) -> tuple[object, ...]:
    """The INSERT parameters for a record, in _COLUMNS order."""
    return (
        None if record.tenant is None else record.tenant.value,
        None if record.raw_tenant is None else _storable(record.raw_tenant),
        _storable(record.queue),
        _storable(record.message_id),
        None if record.correlation_id is None else _storable(record.correlation_id),
        record.attempt,
        record.outcome.value,
        _storable(record.error_type),
        _storable_error_text(record.error_text),
        occurred_at,
    )


class _SqlErrorStore:
    """What both backends share: validation, the SQL text, row decoding and the tenant check."""

    def __init__(self, table: str, backend: SqlBackend) -> None:
        self._table = table
        self._backend = backend
        self._placeholder = backend.placeholder
        self._insert = _insert_sql(table, backend.placeholder)

    def close(self) -> None:
        """Close the connection; later calls fail with ErrorStoreError."""
        self._backend.close()

    def record(self, record: FailureRecord) -> None:
        """Store one failure; it is durable (committed) when this returns."""
        if not isinstance(record, FailureRecord):
            raise ErrorStoreError(f"expected a FailureRecord, got {type(record).__name__}")
        values = _stored_values(record, self._encode_time(record.occurred_at))
        self._backend.execute("record", self._insert, values, fetch=False)

    def failures(
        self,
        *,
        tenant: TenantId | None,
        queue: str | None = None,
        message_id: str | None = None,
        outcome: FailureOutcome | None = None,
        limit: int = 1000,
    ) -> list[FailureRecord]:
        """One tenant's failures, oldest first; tenant=None gives the tenantless quarantine ones."""
        if tenant is not None and not isinstance(tenant, TenantId):
            raise ErrorStoreError(f"tenant must be a TenantId or None, got {type(tenant).__name__}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ErrorStoreError(f"limit must be a positive integer, got {limit!r}")
        sql, params = _select_sql(
            self._table,
            self._placeholder,
            tenant=tenant,
            queue=queue,
            message_id=message_id,
            outcome=outcome,
            limit=limit,
        )
        rows = self._backend.execute("failures", sql, params, fetch=True)
        records = [self._decode(row) for row in rows]
        # The WHERE clause already isolates tenants; this check turns a query bug into an error
        # instead of a cross-tenant leak.
        if any(found.tenant != tenant for found in records):
            raise ErrorStoreError(
                f"error store table {self._table!r} returned another tenant's failures"
            )
        return records

    def _decode(self, row: Sequence[Any]) -> FailureRecord:
        (
            tenant,
            raw_tenant,
            queue,
            message_id,
            correlation_id,
            attempt,
            outcome,
            error_type,
            error_text,
            occurred_at,
        ) = row
        try:
            return FailureRecord(
                tenant=None if tenant is None else TenantId.parse(tenant),
                queue=queue,
                message_id=message_id,
                correlation_id=correlation_id,
                attempt=attempt,
                outcome=FailureOutcome(outcome),
                error_type=error_type,
                error_text=error_text,
                occurred_at=self._decode_time(occurred_at),
                raw_tenant=raw_tenant,
            )
        except (ValueError, ErrorStoreError) as exc:
            raise ErrorStoreError(
                f"error store table {self._table!r} holds an unreadable row: {exc}"
            ) from exc

    def _encode_time(self, when: datetime) -> object:
        raise NotImplementedError

    def _decode_time(self, value: Any) -> datetime:
        raise NotImplementedError


def _what(table: str) -> str:
    return f"error store table {table!r}"


class SQLiteErrorStore(_SqlErrorStore):
    """An error store in one SQLite file (WAL journal), for a single host."""

    def __init__(self, path: str | os.PathLike[str], *, table: str = _DEFAULT_TABLE) -> None:
        table = _checked_table(table)
        schema = _schema_sql(
            table, id_column="INTEGER PRIMARY KEY AUTOINCREMENT", timestamp_type="TEXT"
        )
        # synchronous=FULL (the default): record() promises durability on return.
        backend = SQLiteBackend(path, error=ErrorStoreError, what=_what(table), schema=schema)
        super().__init__(table, backend)

    def _encode_time(self, when: datetime) -> object:
        # Fixed-width UTC text sorts in time order, which ORDER BY occurred_at relies on.
        return when.astimezone(UTC).isoformat(timespec="microseconds")

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, str):
            raise ErrorStoreError(f"occurred_at is not ISO-8601 text: {value!r}")
        return datetime.fromisoformat(value)


class PostgresErrorStore(_SqlErrorStore):
    """An error store in a PostgreSQL table, shared by every worker host; needs psycopg 3."""

    def __init__(self, dsn: str, *, table: str = _DEFAULT_TABLE) -> None:
        table = _checked_table(table)
        schema = _schema_sql(table, id_column="BIGSERIAL PRIMARY KEY", timestamp_type="TIMESTAMPTZ")
        backend = PostgresBackend(
            dsn,
            error=ErrorStoreError,
            what=_what(table),
            needed_by="PostgresErrorStore",
            schema=schema,
        )
        super().__init__(table, backend)

    def _encode_time(self, when: datetime) -> object:
        return when

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise ErrorStoreError(f"occurred_at is not a timestamp: {value!r}")
        # Returned in the connection's TimeZone setting; FailureRecord converts it back to UTC.
        return value


def open_error_store(url: str, *, table: str = _DEFAULT_TABLE) -> ErrorStore:
    """Open the error store a URL names: postgresql://, postgres://, sqlite:///path or a path."""
    parsed = parse_store_url(url, what="error store")
    if parsed.backend == "postgresql":
        return PostgresErrorStore(parsed.target, table=table)
    return SQLiteErrorStore(parsed.target, table=table)


def record_failure(store: ErrorStore, record: FailureRecord, *, attempts: int = 3) -> bool:
    """Record a failure, trying a few times; if the store stays down, log the whole record.

    Never raises: a message must not get stuck because the store is down (it carries its error
    on its retry or dead-letter copy), and the log keeps what the store could not.
    """
    last: ErrorStoreError | None = None
    for attempt in range(1, attempts + 1):
        try:
            store.record(record)
            return True
        except ErrorStoreError as exc:
            last = exc
            time.sleep(0.05 * attempt)
    log.critical(
        "error_store_write_failed",
        error=str(last),
        record_outcome=record.outcome.value,
        record_error_type=record.error_type,
        record_error=record.error_text,
    )
    return False


__all__ = [
    "ErrorStore",
    "FailureOutcome",
    "FailureRecord",
    "PostgresErrorStore",
    "SQLiteErrorStore",
    "open_error_store",
    "record_failure",
]
