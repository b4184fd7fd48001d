"""The error store: a durable record of every handling failure, made before a retry or dead letter.

SQLite serves a single host and PostgreSQL a fleet; both share one schema and one set of queries.
record_failure is how the message path writes to it: bounded in time whatever the store does.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import hashlib
import os
import queue
import re
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import structlog

from boost_tenancy.errors import ConfigError, ErrorStoreError
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
    "trace",
)
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
    trace: str | None = None
    """The formatted traceback of the handler's exception, if there was one.

    Stored cut to its last 8,000 characters (the innermost frames and the exception itself).
    """

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
        for name in ("correlation_id", "raw_tenant", "trace"):
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


_WRITE_QUEUE_SIZE: Final = 100
_WRITER_IDLE_S: Final = 30.0
_BACKOFF_S: Final = 0.05
DOWN_COOLDOWN_S: Final = 10.0
"""After a write fails or times out, callers do not wait for the store for this long: they log
the record and go on at once, so a store that is down slows each worker once per cool-down, not
once per message. The first write after the cool-down tries the store again."""


class _Write:
    """One record_failure call: the record, its caller's deadline and, once written, the outcome."""

    __slots__ = ("_done", "attempts", "context", "deadline", "error", "record", "stored")

    def __init__(self, record: FailureRecord, *, attempts: int, deadline: float) -> None:
        self.record = record
        self.attempts = attempts
        self.deadline = deadline
        # The store's own logs during the write keep the caller's bound tenant, queue and message.
        self.context = contextvars.copy_context()
        self.stored = False
        self.error: str | None = None
        """The last failed try's error; None while no try has failed."""
        self._done = threading.Event()

    def finish(self, *, stored: bool, error: str | None = None) -> None:
        self.stored = stored
        if error is not None:
            self.error = error
        self._done.set()

    def wait(self) -> bool:
        """Wait until the write finished or the deadline passed; True if it finished."""
        return self._done.wait(max(0.0, self.deadline - time.monotonic()))


class _Writer:
    """The one thread that writes one store's failures, so a hung store stalls only this thread."""

    def __init__(self, store: ErrorStore) -> None:
        self.key = id(store)
        self.store: Callable[[], ErrorStore | None]
        try:
            # Weak, so that the writer does not keep a store alive that its owner dropped.
            self.store = weakref.ref(store)
        except TypeError:
            # A store without weak reference support lives until its writer goes idle.
            self.store = lambda: store
        self.queue: queue.Queue[_Write] = queue.Queue(maxsize=_WRITE_QUEUE_SIZE)
        self.busy_since: float | None = None
        self.down_since: float | None = None
        """When a caller last gave up on this store; None while writes succeed."""
        self.thread = threading.Thread(
            target=self._run, name="boost-error-store-writer", daemon=True
        )

    def stuck_for(self) -> float:
        """How long the store.record() call now running has been running; 0 when idle."""
        since = self.busy_since
        return 0.0 if since is None else time.monotonic() - since

    def _run(self) -> None:
        try:
            while self._next():
                pass
        finally:
            with _writers_lock:
                if _writers.get(self.key) is self:
                    del _writers[self.key]

    def _next(self) -> bool:
        """Make the next queued write; False once idle for _WRITER_IDLE_S with nothing queued."""
        try:
            job = self.queue.get(timeout=_WRITER_IDLE_S)
        except queue.Empty:
            with _writers_lock:
                # Jobs are queued under this lock, so none can arrive between the look and the exit.
                return not self.queue.empty()
        store = self.store()
        if store is None:
            job.finish(stored=False, error="the error store was garbage-collected")
        else:
            self._write(store, job)
        return True

    def _write(self, store: ErrorStore, job: _Write) -> None:
        for attempt in range(1, job.attempts + 1):
            if time.monotonic() >= job.deadline:
                # The caller has stopped waiting and logged the record; another try adds nothing.
                break
            self.busy_since = time.monotonic()
            try:
                job.context.run(store.record, job.record)
            except ErrorStoreError as exc:
                job.error = str(exc)
            except Exception as exc:  # the writer must outlive a broken store
                # Not the store's own failure but a bug in it: retrying will not help.
                job.finish(stored=False, error=f"{type(exc).__name__}: {exc}")
                return
            else:
                # A write that lands, late or not, shows the store is back.
                self.down_since = None
                job.finish(stored=True)
                return
            finally:
                self.busy_since = None
            if attempt < job.attempts:
                time.sleep(max(0.0, min(_BACKOFF_S * attempt, job.deadline - time.monotonic())))
        job.finish(stored=False)


_writers: dict[int, _Writer] = {}
"""The live writer of each store, by id(store); a writer removes itself when it ends."""
_writers_lock = threading.Lock()


def _hand_over(store: ErrorStore, job: _Write, timeout_s: float) -> str | None:
    """Queue job for the store's writer, starting one if needed; why it was refused, or None."""
    with _writers_lock:
        writer = _writers.get(id(store))
        # A dead store's id can be reused by a new one, which then needs its own writer.
        if writer is None or writer.store() is not store:
            writer = _Writer(store)
            _writers[id(store)] = writer
            writer.thread.start()
        stuck = writer.stuck_for()
        if stuck > timeout_s:
            # Queueing behind a write that has already outlasted a caller's patience would only
            # make this caller wait out its whole timeout too.
            return f"the error store has not answered a write for {stuck:.1f} s"
        down = writer.down_since
        if down is not None and time.monotonic() - down < DOWN_COOLDOWN_S:
            return (
                f"the error store failed {time.monotonic() - down:.1f} s ago; not waiting for "
                f"it again within {DOWN_COOLDOWN_S:g} s"
            )
        try:
            writer.queue.put_nowait(job)
        except queue.Full:
            return f"the error store's write queue is full ({_WRITE_QUEUE_SIZE} waiting)"
    return None


def _mark(store: ErrorStore, *, down: bool) -> None:
    with _writers_lock:
        writer = _writers.get(id(store))
        if writer is not None:
            writer.down_since = time.monotonic() if down else None


def record_failure(
    store: ErrorStore,
    record: FailureRecord,
    *,
    attempts: int = 3,
    timeout_s: float = 5.0,
) -> bool:
    """Record a failure within timeout_s whatever the store does; if it cannot, log the record.

    The write is handed to the store's writer thread (one per store, started on first use,
    ended when idle) and the caller waits at most timeout_s for it, never for the store itself:
    a store that hangs stalls its writer, not the caller's thread. The writer tries up to
    `attempts` times, with a short backoff, while the store raises ErrorStoreError, and starts
    no try after the caller stopped waiting. Returns True once the record is stored. Otherwise
    (the store kept failing, it did not answer within timeout_s, its write queue is full, its
    writer is stuck in a write older than timeout_s, or a write failed less than
    DOWN_COOLDOWN_S ago) the whole record is logged at critical level as error_store_write_failed
    and False is returned.

    A write already running when the caller stops waiting is not abandoned: it may still commit
    later, late but durable, so a record logged as unrecorded can also be in the store.

    Never raises: a message must not get stuck because the store is down (it carries its error
    on its retry or dead-letter copy), and the log keeps what the store could not.
    """
    error: str
    try:
        # Event.wait refuses timeouts beyond TIMEOUT_MAX; that long is "no limit" anyway.
        timeout_s = min(timeout_s, threading.TIMEOUT_MAX)
        job = _Write(record, attempts=max(1, attempts), deadline=time.monotonic() + timeout_s)
        refused = _hand_over(store, job, timeout_s)
        if refused is not None:
            error = refused
        else:
            if not job.wait():
                last = job.error
                error = (
                    f"the error store did not answer within {timeout_s:g} s; a write still "
                    "running may commit later" + ("" if last is None else f" (last error: {last})")
                )
            elif job.stored:
                _mark(store, down=False)
                return True
            else:
                error = job.error or "no write was tried before the caller stopped waiting"
            _mark(store, down=True)
    except Exception as exc:  # documented never to raise
        error = f"{type(exc).__name__}: {exc}"
    log.critical(
        "error_store_write_failed",
        error=error,
        record_tenant=None if record.tenant is None else record.tenant.value,
        record_raw_tenant=record.raw_tenant,
        record_queue=record.queue,
        record_message_id=record.message_id,
        record_correlation_id=record.correlation_id,
        record_attempt=record.attempt,
        record_outcome=record.outcome.value,
        record_error_type=record.error_type,
        record_error=record.error_text,
        record_trace=record.trace,
        record_occurred_at=record.occurred_at.isoformat(),
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
