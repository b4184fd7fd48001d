"""The PostgreSQL document store: tables shared by every host, through psycopg 3.

A connection dropped before COMMIT is reopened and the transaction tried once more.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from boost_tenancy import ConfigError
from services.common.documents.backend import Run, SqlDocumentStore
from services.common.documents.sql import DEFAULT_PREFIX

if TYPE_CHECKING:
    import psycopg

_T = TypeVar("_T")


class _NotSent(Exception):  # noqa: N818  # an internal signal, never raised to callers
    """A driver error before COMMIT was sent on a connection that is now closed."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PostgresDocumentStore(SqlDocumentStore):
    """A document store in PostgreSQL tables, shared by every host; needs psycopg 3."""

    def __init__(self, dsn: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(
            prefix, placeholder="%s", row_lock=" FOR UPDATE", timestamp_type="TIMESTAMPTZ"
        )
        try:
            # Imported here so the services import without the `postgres` extra.
            import psycopg  # noqa: PLC0415
        except ImportError as exc:
            raise ConfigError(
                "PostgresDocumentStore needs psycopg 3; install the `postgres` extra "
                "(pip install 'boost-tenancy[postgres]')"
            ) from exc
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(f"PostgreSQL DSN {dsn!r} is empty")
        self._dsn = dsn
        self._driver_error = psycopg.Error
        self._connection_class: type[psycopg.Connection[tuple[Any, ...]]] = psycopg.Connection
        try:
            self._connection = self._connect()
        except self._driver_error as exc:
            raise self._failure("connect", exc) from exc
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalogue when
        # the manager and the IntegrationsServer start together; a lock per prefix orders them.
        lock_key = int.from_bytes(hashlib.sha256(self._prefix.encode()).digest()[:8], "big") >> 1
        try:
            self._run("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
            for statement in self._sql.schema:
                self._run(statement, ())
            self._connection.commit()
        except self._driver_error as exc:
            self._connection.close()
            raise self._failure("create schema", exc) from exc

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        # Not autocommit: every operation is one explicit transaction, committed by _transaction.
        return self._connection_class.connect(self._dsn, autocommit=False)

    def _encode_time(self, when: datetime) -> object:
        return when

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise TypeError(f"timestamp is not a datetime: {value!r}")
        # Returned in the connection's TimeZone setting; documents carry UTC.
        return value.astimezone(UTC)

    def _run(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        with self._connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall() if cursor.description else []
            return rows

    def _rollback_quietly(self) -> None:
        if not self._connection.closed:
            with contextlib.suppress(self._driver_error):
                self._connection.rollback()

    def _attempt(self, work: Callable[[Run], _T]) -> _T:
        if self._connection.closed:
            self._connection = self._connect()
        try:
            result = work(self._run)
        except self._driver_error as exc:
            self._rollback_quietly()
            if self._connection.closed:
                raise _NotSent(exc) from exc
            raise
        except BaseException:
            self._rollback_quietly()
            raise
        self._connection.commit()
        return result

    def _transaction(self, operation: str, work: Callable[[Run], _T], *, write: bool) -> _T:
        with self._lock:
            self._check_open(operation)
            try:
                try:
                    return self._attempt(work)
                except _NotSent:
                    # A dropped connection (server restart, failover, idle timeout) is common
                    # enough to try once more on a fresh one; nothing was committed, so that is
                    # safe even for writes. A failed COMMIT is not retried here: it may have
                    # happened, and the caller's retry then finds the event already processed.
                    return self._attempt(work)
            except _NotSent as exc:
                raise self._failure(f"{operation} (after reconnecting)", exc.cause) from exc.cause
            except self._driver_error as exc:
                self._rollback_quietly()
                raise self._failure(operation, exc) from exc


__all__ = ["PostgresDocumentStore"]
