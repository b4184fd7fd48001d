"""One connection to SQLite or PostgreSQL for the toolkit's small stores (error store, tier store).

A backend owns the connection and everything around it: opening it (SQLite in WAL mode,
PostgreSQL in autocommit), creating the schema, one lock around every statement, rollback on
error, one reconnect after a dropped PostgreSQL connection, and turning driver errors into the
store's own error class. The stores keep only their SQL text and row decoding.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from boost_tenancy.errors import BoostTenancyError, ConfigError

if TYPE_CHECKING:
    import psycopg


class SqlBackend(Protocol):
    """One locked connection that runs a store's statements and reports failures in its terms."""

    @property
    def placeholder(self) -> str:
        """The driver's parameter marker: "?" for SQLite, "%s" for PostgreSQL."""
        ...

    def execute(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        """Run one statement; committed on return unless fetch, which returns the rows."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class _Backend:
    """The lock, the close rules and the error wrapping both drivers share."""

    placeholder: ClassVar[str]

    def __init__(self, *, error: type[BoostTenancyError], what: str, strict: bool) -> None:
        self._error = error
        self._what = what
        self._strict = strict
        # One connection serves every worker thread; the lock serialises its use.
        self._lock = threading.Lock()
        self._closed = False
        self._connection: Any = None
        self._driver_error: type[Exception] = Exception

    def execute(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        """Run one statement under the lock; driver errors become the store's error class."""
        with self._lock:
            if self._closed:
                raise self._error(f"{self._what}: {operation} after close")
            return self._execute_locked(operation, sql, params, fetch=fetch)

    def close(self) -> None:
        """Close the connection; a second call does nothing.

        A strict backend reports a failed close and refuses every later call; a lenient one
        swallows driver errors on close and leaves later calls to the driver.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = self._strict
            try:
                self._connection.close()
            except self._driver_error as exc:
                if self._strict:
                    raise self._failure("close", exc) from exc

    def _failure(self, operation: str, exc: BaseException) -> BoostTenancyError:
        return self._error(f"{self._what}: {operation} failed: {exc}")

    def _execute_locked(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError


class SQLiteBackend(_Backend):
    """One SQLite file in WAL mode, shared by the threads of one host.

    error and what shape every failure: error(f"{what}: {operation} failed: {cause}"). schema
    is run once on opening; a failure there is reported as schema_step, or (None) as the
    failure to open the file. synchronous_full makes every commit durable on return.
    """

    placeholder: ClassVar[str] = "?"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        error: type[BoostTenancyError],
        what: str,
        schema: Sequence[str] = (),
        schema_step: str | None = "create schema",
        synchronous_full: bool = True,
        strict: bool = True,
    ) -> None:
        super().__init__(error=error, what=what, strict=strict)
        self._driver_error = sqlite3.Error
        location = Path(path)
        opening = f"open {str(location)!r}"
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            # The timeout lets workers in other processes wait out each other's write lock.
            connection = sqlite3.connect(location, check_same_thread=False, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise self._failure(opening, exc) from exc
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            if synchronous_full:
                # In WAL mode a NORMAL sync can lose the last commits on power loss.
                connection.execute("PRAGMA synchronous=FULL")
            for statement in schema:
                connection.execute(statement)
            connection.commit()
        except sqlite3.Error as exc:
            connection.close()
            raise self._failure(schema_step or opening, exc) from exc
        self._connection = connection

    def _execute_locked(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        try:
            cursor = self._connection.execute(sql, params)
            if fetch:
                rows: list[tuple[Any, ...]] = cursor.fetchall()
                return rows
            self._connection.commit()
            return []
        except sqlite3.Error as exc:
            # The original error is the one worth reporting; a failed rollback adds nothing.
            with contextlib.suppress(sqlite3.Error):
                self._connection.rollback()
            raise self._failure(operation, exc) from exc


class PostgresBackend(_Backend):
    """One autocommit PostgreSQL connection, reopened once when it drops; needs psycopg 3.

    needed_by names the store in the ConfigError raised when psycopg is missing; the other
    arguments are SQLiteBackend's, with "connect" in place of the failure to open a file.
    """

    placeholder: ClassVar[str] = "%s"

    def __init__(
        self,
        dsn: str,
        *,
        error: type[BoostTenancyError],
        what: str,
        needed_by: str,
        schema: Sequence[str] = (),
        schema_step: str | None = "create schema",
        strict: bool = True,
    ) -> None:
        super().__init__(error=error, what=what, strict=strict)
        try:
            # Imported here so the toolkit installs and imports without the `postgres` extra.
            import psycopg  # noqa: PLC0415
        except ImportError as exc:
            raise ConfigError(
                f"{needed_by} needs psycopg 3; install the `postgres` extra "
                "(pip install 'boost-tenancy[postgres]')"
            ) from exc
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(f"PostgreSQL DSN {dsn!r} is empty")
        self._dsn = dsn
        self._driver_error = psycopg.Error
        self._connection_class: type[psycopg.Connection[tuple[Any, ...]]] = psycopg.Connection
        try:
            self._connection = self._connect()
        except psycopg.Error as exc:
            raise self._failure("connect", exc) from exc
        try:
            for statement in schema:
                self._run(statement, (), fetch=False)
        except psycopg.Error as exc:
            self._connection.close()
            raise self._failure(schema_step or "connect", exc) from exc

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        # Autocommit: each statement is its own committed transaction, durable when it returns.
        return self._connection_class.connect(self._dsn, autocommit=True)

    def _run(self, sql: str, params: Sequence[object], *, fetch: bool) -> list[tuple[Any, ...]]:
        with self._connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall() if fetch else []
            return rows

    def _execute_locked(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        try:
            return self._run(sql, params, fetch=fetch)
        except self._driver_error as exc:
            if not self._connection.closed:
                raise self._failure(operation, exc) from exc
        # A dropped connection (server restart, failover, idle timeout) is common enough that one
        # fresh connection is worth trying. If a lost INSERT had in fact committed, the retry
        # duplicates it: for a failure record, a duplicate beats a gap.
        try:
            self._connection = self._connect()
            return self._run(sql, params, fetch=fetch)
        except self._driver_error as exc:
            raise self._failure(f"{operation} (after reconnecting)", exc) from exc


__all__ = ["PostgresBackend", "SQLiteBackend", "SqlBackend"]
