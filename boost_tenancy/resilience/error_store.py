"""The error store: a durable record of every handling failure, in SQLite or PostgreSQL.

Both share one schema and one set of queries; the message path writes through recorder.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from boost_tenancy.errors import ConfigError, ErrorStoreError
from boost_tenancy.resilience.records import ErrorStore, FailureOutcome, FailureRecord
from boost_tenancy.sqlstore import PostgresBackend, SqlBackend, SQLiteBackend, SqlTimeouts
from boost_tenancy.storage import parse_store_url
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.error_store")

_DEFAULT_TABLE: Final = "boost_failures"
_TABLE_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_MAX_ERROR_TEXT: Final = 8000
_MAX_TRACE: Final = 8000
_TRUNCATION_MARKER: Final = "\u2026[truncated]"
# PostgreSQL text cannot hold NUL, and a quarantined message may carry anything in its tenantUUID;
# replacing NUL in both backends keeps the record storable and the two backends alike.
_NUL_REPLACEMENT: Final = "\ufffd"
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")
# fmt: off
_COLUMNS: Final = (
    "tenant", "raw_tenant", "queue", "message_id", "correlation_id", "attempt", "outcome",
    "error_type", "error_text", "occurred_at", "trace",
)
# fmt: on
# Added after the first schema: a table created before it gets the column when a store opens it.
_TRACE_COLUMN: Final = "trace"

# No call may wait on the database without limit: a PostgreSQL server that accepts TCP and never
# answers, or a SQLite file another process holds write-locked, would otherwise stop every worker.
# A statement holds the connection for at most about statement_s + connect_s + statement_s (one
# reconnect) while the server answers, so lock_wait_s above that only fails a caller when
# something is stuck. SQLite cannot interrupt a statement waiting for a write lock, so close_wait_s
# exceeds busy_s: such a statement has given up before close() stops waiting for it.
_TIMEOUTS: Final = SqlTimeouts(
    connect_s=5.0,
    statement_s=5.0,
    dead_peer_s=15.0,
    busy_s=2.0,
    lock_wait_s=20.0,
    close_wait_s=3.0,
)


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
        f"occurred_at {timestamp_type} NOT NULL, "
        f"{_TRACE_COLUMN} TEXT)"
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
    # A lone surrogate (an exception text quoting a JSON "\\ud83d" escape, a body decoded from
    # invalid UTF-8) has no UTF-8 form: neither driver can store it, so it is replaced too.
    if not text.isascii():
        text = _SURROGATE_RE.sub(_NUL_REPLACEMENT, text)
    return text.replace("\x00", _NUL_REPLACEMENT)


def _storable_error_text(text: str) -> str:
    if len(text) > _MAX_ERROR_TEXT:
        # The start of an error (type, message, outermost frames) says the most; the marker keeps
        # the cut visible to whoever reads the record.
        text = text[: _MAX_ERROR_TEXT - len(_TRUNCATION_MARKER)] + _TRUNCATION_MARKER
    return _storable(text)


def _storable_trace(trace: str) -> str:
    if len(trace) > _MAX_TRACE:
        # A traceback ends with the innermost frames and the exception: the part worth keeping.
        trace = _TRUNCATION_MARKER + trace[len(trace) - (_MAX_TRACE - len(_TRUNCATION_MARKER)) :]
    return _storable(trace)


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
        None if record.trace is None else _storable_trace(record.trace),
    )


class _SqlErrorStore:
    """What both backends share: validation, the SQL text, row decoding and the tenant check."""

    def __init__(self, table: str, backend: SqlBackend, *, columns: tuple[str, object]) -> None:
        """columns: the query (and its one parameter) listing the table's column names."""
        self._table = table
        self._backend = backend
        self._placeholder = backend.placeholder
        self._insert = _insert_sql(table, backend.placeholder)
        try:
            self._add_trace_column(*columns)
        except ErrorStoreError:
            # The migration's error is the one to report; the store is unusable either way.
            with contextlib.suppress(ErrorStoreError):
                backend.close()
            raise

    def _add_trace_column(self, sql: str, param: object) -> None:
        """Give a table made by the first schema its trace column (nullable: old rows lack it)."""

        def present() -> bool:
            rows = self._backend.execute("read schema", sql, (param,), fetch=True)
            return any(row[0] == _TRACE_COLUMN for row in rows)

        if present():
            return
        try:
            self._backend.execute(
                f"add column {_TRACE_COLUMN}",
                f'ALTER TABLE "{self._table}" ADD COLUMN {_TRACE_COLUMN} TEXT',
                (),
                fetch=False,
            )
        except ErrorStoreError:
            # Another process opening the same table may have added it first.
            if not present():
                raise

    def close(self) -> None:
        """Close the connection; later calls fail with ErrorStoreError.

        Returns within a few seconds even while a statement hangs: that statement's connection
        is broken under it, and its caller gets ErrorStoreError.
        """
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
        """One tenant's failures, oldest first; tenant=None gives the tenantless quarantine ones.

        Records stored before the trace column existed come back with trace None.
        """
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
            trace,
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
                trace=trace,
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
    """An error store in one SQLite file (WAL journal), for a single host.

    A statement waits at most 2 s for a write lock another process holds, then fails with
    ErrorStoreError; close() returns within about 6 s.
    """

    def __init__(self, path: str | os.PathLike[str], *, table: str = _DEFAULT_TABLE) -> None:
        table = _checked_table(table)
        schema = _schema_sql(
            table, id_column="INTEGER PRIMARY KEY AUTOINCREMENT", timestamp_type="TEXT"
        )
        # synchronous=FULL (the default): record() promises durability on return.
        backend = SQLiteBackend(
            path, error=ErrorStoreError, what=_what(table), schema=schema, timeouts=_TIMEOUTS
        )
        super().__init__(table, backend, columns=("SELECT name FROM pragma_table_info(?)", table))

    def _encode_time(self, when: datetime) -> object:
        # Fixed-width UTC text sorts in time order, which ORDER BY occurred_at relies on.
        return when.astimezone(UTC).isoformat(timespec="microseconds")

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, str):
            raise ErrorStoreError(f"occurred_at is not ISO-8601 text: {value!r}")
        return datetime.fromisoformat(value)


class PostgresErrorStore(_SqlErrorStore):
    """An error store in a PostgreSQL table, shared by every worker host; needs psycopg 3.

    Connecting gives up after 5 s (a server that accepts TCP but never answers included) with
    ErrorStoreError; the server cancels any statement after 5 s (statement_timeout); a connection
    whose sent data stays unacknowledged for 15 s is dropped (tcp_user_timeout, Linux); close()
    returns within about 6 s. These override the DSN's connect_timeout and tcp_user_timeout.
    """

    def __init__(self, dsn: str, *, table: str = _DEFAULT_TABLE) -> None:
        table = _checked_table(table)
        schema = _schema_sql(table, id_column="BIGSERIAL PRIMARY KEY", timestamp_type="TIMESTAMPTZ")
        backend = PostgresBackend(
            dsn,
            error=ErrorStoreError,
            what=_what(table),
            needed_by="PostgresErrorStore",
            schema=schema,
            timeouts=_TIMEOUTS,
        )
        # The table the unqualified name resolves to, as every other statement of the store sees it.
        columns = (
            "SELECT attname FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped"
        )
        super().__init__(table, backend, columns=(columns, f'"{table}"'))

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


__all__ = [
    "ErrorStore",
    "FailureOutcome",
    "FailureRecord",
    "PostgresErrorStore",
    "SQLiteErrorStore",
    "open_error_store",
]
