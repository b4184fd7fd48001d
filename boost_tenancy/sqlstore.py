"""One connection to SQLite or PostgreSQL for the toolkit's small stores (error store, tier store).

A backend owns the connection and everything around it: opening it (SQLite in WAL mode,
PostgreSQL in autocommit), creating the schema, one lock around every statement, rollback on
error, one reconnect after a dropped PostgreSQL connection, the time limits a store asks for
(SqlTimeouts) and turning driver errors into the store's own error class. The stores keep only
their SQL text and row decoding.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import socket
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.sql_timeouts import SqlTimeouts

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

    def __init__(
        self,
        *,
        error: type[BoostTenancyError],
        what: str,
        strict: bool,
        timeouts: SqlTimeouts,
    ) -> None:
        self._error = error
        self._what = what
        self._strict = strict
        self._timeouts = timeouts
        # One connection serves every worker thread; the lock serialises its use.
        self._lock = threading.Lock()
        self._closed = False
        self._connection: Any = None
        self._driver_error: type[Exception] = Exception

    def execute(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        """Run one statement under the lock; driver errors become the store's error class.

        With timeouts.lock_wait_s set, a caller that cannot get the connection within it (another
        statement holds it) fails with the store's error instead of queueing behind that one.
        """
        wait = self._timeouts.lock_wait_s
        if not _acquire(self._lock, wait):
            raise self._error(
                f"{self._what}: {operation} failed: the connection has been busy with another "
                f"statement for more than {wait:g} s"
            )
        try:
            if self._closed:
                raise self._error(f"{self._what}: {operation} after close")
            return self._execute_locked(operation, sql, params, fetch=fetch)
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the connection; a second call does nothing.

        A strict backend reports a failed close and refuses every later call; a lenient one
        swallows driver errors on close and leaves later calls to the driver.

        With timeouts.close_wait_s set, close() never waits long for a statement that does not
        return: after close_wait_s it breaks the connection under that statement (PostgreSQL: its
        socket is shut down; SQLite: the statement is interrupted, though not while it waits for
        another connection's write lock, which busy_s bounds), whose caller then gets the store's
        error, and waits close_wait_s more for the connection. Every later call is then refused,
        lenient or not. A statement that still holds the connection after that keeps it (a
        strict backend reports so); the call returns either way within twice close_wait_s.
        """
        wait = self._timeouts.close_wait_s
        cut = False
        if not _acquire(self._lock, wait):
            cut = True
            # Set before the cut, so the statement's thread sees it and does not reconnect.
            self._closed = True
            self._interrupt()
            if not _acquire(self._lock, wait):
                if self._strict:
                    raise self._error(
                        f"{self._what}: close failed: a statement still holds the connection "
                        f"after {2 * (wait or 0):g} s; it is left to that statement"
                    )
                return
        try:
            if self._closed and not cut:
                return
            self._closed = self._strict or cut
            try:
                self._connection.close()
            except self._driver_error as exc:
                # After a cut the connection is known broken; only an orderly close can fail.
                if self._strict and not cut:
                    raise self._failure("close", exc) from exc
        finally:
            self._lock.release()

    def _failure(self, operation: str, exc: BaseException) -> BoostTenancyError:
        return self._error(f"{self._what}: {operation} failed: {exc}")

    def _execute_locked(
        self, operation: str, sql: str, params: Sequence[object], *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _interrupt(self) -> None:
        """Make a statement running on another thread return with an error, without the lock."""
        raise NotImplementedError


def _acquire(lock: threading.Lock, wait: float | None) -> bool:
    return lock.acquire() if wait is None else lock.acquire(timeout=wait)


class SQLiteBackend(_Backend):
    """One SQLite file in WAL mode, shared by the threads of one host.

    error and what shape every failure: error(f"{what}: {operation} failed: {cause}"). schema
    is run once on opening; a failure there is reported as schema_step, or (None) as the
    failure to open the file. synchronous_full makes every commit durable on return. Of
    timeouts, busy_s, lock_wait_s and close_wait_s apply.
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
        timeouts: SqlTimeouts = SqlTimeouts(),
    ) -> None:
        super().__init__(error=error, what=what, strict=strict, timeouts=timeouts)
        self._driver_error = sqlite3.Error
        location = Path(path)
        opening = f"open {str(location)!r}"
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            # The busy timeout lets workers in other processes wait out each other's write lock;
            # it is also the longest a statement can stall on a lock held by another process.
            connection = sqlite3.connect(location, check_same_thread=False, timeout=timeouts.busy_s)
        except (OSError, sqlite3.Error) as exc:
            raise self._failure(opening, exc) from exc
        # Processes that open one file at once (a pipeline's services starting together) take
        # turns: SQLite answers "database is locked" without waiting while another switches the
        # file to WAL or creates the schema, so this step is tried again within the busy timeout.
        deadline = time.monotonic() + timeouts.busy_s
        while True:
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                if synchronous_full:
                    # In WAL mode a NORMAL sync can lose the last commits on power loss.
                    connection.execute("PRAGMA synchronous=FULL")
                for statement in schema:
                    connection.execute(statement)
                connection.commit()
                break
            except sqlite3.OperationalError as exc:
                with contextlib.suppress(sqlite3.Error):
                    connection.rollback()
                if _locked(exc) and time.monotonic() < deadline:
                    time.sleep(random.uniform(0.01, 0.1))
                    continue
                connection.close()
                raise self._failure(schema_step or opening, exc) from exc
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

    def _interrupt(self) -> None:
        # sqlite3_interrupt is the one call SQLite allows from another thread mid-statement.
        with contextlib.suppress(sqlite3.Error):
            self._connection.interrupt()


def _locked(exc: sqlite3.OperationalError) -> bool:
    """SQLite's answer while another connection holds the lock it needs."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class PostgresBackend(_Backend):
    """One autocommit PostgreSQL connection, reopened once when it drops; needs psycopg 3.

    needed_by names the store in the ConfigError raised when psycopg is missing; the other
    arguments are SQLiteBackend's, with "connect" in place of the failure to open a file. Of
    timeouts, connect_s, statement_s, dead_peer_s, lock_wait_s and close_wait_s apply.
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
        timeouts: SqlTimeouts = SqlTimeouts(),
    ) -> None:
        super().__init__(error=error, what=what, strict=strict, timeouts=timeouts)
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
        self._driver_error = psycopg.Error
        self._connection_class: type[psycopg.Connection[tuple[Any, ...]]] = psycopg.Connection
        try:
            # The limits override the DSN's own values of the same parameters.
            self._conninfo = psycopg.conninfo.make_conninfo(dsn, **_connect_params(timeouts))
            self._connection = self._connect()
        except psycopg.errors.ConnectionTimeout as exc:
            # The bare "connection timeout expired" names neither the server nor the limit.
            params = psycopg.conninfo.conninfo_to_dict(self._conninfo)
            server = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}"
            limit = params.get("connect_timeout")
            within = f" within {limit} s" if limit else ""
            raise self._error(
                f"{what}: connect failed: PostgreSQL at {server} did not complete the "
                f"connection{within} ({exc})"
            ) from exc
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
        connection = self._connection_class.connect(self._conninfo, autocommit=True)
        statement_s = self._timeouts.statement_s
        if statement_s is not None:
            # Set by a statement, not by the `options` start-up parameter, which connection
            # poolers such as PgBouncer refuse by default.
            try:
                connection.execute(
                    "SELECT set_config('statement_timeout', %s, false)",
                    (str(math.ceil(statement_s * 1000)),),
                )
            except self._driver_error:
                connection.close()
                raise
        return connection

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
            # A connection close() cut under this statement stays closed.
            if not self._connection.closed or self._closed:
                raise self._failure(operation, exc) from exc
        # A dropped connection (server restart, failover, idle timeout) is common enough that one
        # fresh connection is worth trying. If a lost INSERT had in fact committed, the retry
        # duplicates it: for a failure record, a duplicate beats a gap.
        try:
            self._connection = self._connect()
            return self._run(sql, params, fetch=fetch)
        except self._driver_error as exc:
            raise self._failure(f"{operation} (after reconnecting)", exc) from exc

    def _interrupt(self) -> None:
        # Shutting the socket down (not closing it: libpq still owns the descriptor) wakes the
        # thread waiting on it with "server closed the connection". psycopg's own cancel() opens
        # a second connection to the same server, which would hang just the same, and close()
        # would free libpq's state under the running statement.
        with contextlib.suppress(OSError, self._driver_error):
            descriptor = os.dup(self._connection.fileno())
            try:
                stuck = socket.socket(fileno=descriptor)
            except OSError:
                os.close(descriptor)
                raise
            with stuck:
                stuck.shutdown(socket.SHUT_RDWR)


def _connect_params(timeouts: SqlTimeouts) -> dict[str, int]:
    """libpq connection parameters for the time limits."""
    params: dict[str, int] = {}
    if timeouts.connect_s is not None:
        # libpq counts whole seconds, with 2 as its minimum.
        params["connect_timeout"] = max(2, math.ceil(timeouts.connect_s))
    if timeouts.dead_peer_s is not None:
        params["tcp_user_timeout"] = math.ceil(timeouts.dead_peer_s * 1000)
    return params


__all__ = ["PostgresBackend", "SQLiteBackend", "SqlBackend", "SqlTimeouts"]
