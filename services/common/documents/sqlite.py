"""The SQLite document store: one database file in WAL mode, for a single host.

Writes take SQLite's write lock before reading, so concurrent applies take turns.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from services.common.documents.backend import Run, SqlDocumentStore
from services.common.documents.sql import DEFAULT_PREFIX

_T = TypeVar("_T")


class SQLiteDocumentStore(SqlDocumentStore):
    """A document store in one SQLite file (WAL journal), for a single host."""

    def __init__(self, path: str | os.PathLike[str], *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(prefix, placeholder="?", row_lock="", timestamp_type="TEXT")
        self._driver_error = sqlite3.Error
        location = Path(path)
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are begun explicitly, so BEGIN IMMEDIATE can
            # take the write lock before the read that a transition depends on. The timeout
            # lets other processes (the IntegrationsServer) wait out each other's write lock.
            connection = sqlite3.connect(
                location, check_same_thread=False, timeout=30.0, isolation_level=None
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._failure(f"open {str(location)!r}", exc) from exc
        try:
            self._create_schema(connection)
        except sqlite3.Error as exc:
            connection.close()
            raise self._failure("create schema", exc) from exc
        self._connection = connection

    def _create_schema(self, connection: sqlite3.Connection) -> None:
        # Switching a new file to WAL can answer "database is locked" at once while another
        # process does the same (SQLite does not wait on the busy timeout for it): a few
        # short retries let stores opened together on a new file all start.
        for attempt in range(1, 21):
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                # A NORMAL sync in WAL mode can lose the last commits on power loss, and a lost
                # processed event would let a redelivered event apply twice.
                connection.execute("PRAGMA synchronous=FULL")
                connection.execute("BEGIN IMMEDIATE")
                for statement in self._sql.schema:
                    connection.execute(statement)
                connection.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if "locked" not in str(exc) or attempt == 20:
                    raise
                time.sleep(0.05 * attempt)

    def _encode_time(self, when: datetime) -> object:
        # Fixed-width UTC text sorts in time order, which ORDER BY created_at relies on.
        return when.astimezone(UTC).isoformat(timespec="microseconds")

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, str):
            raise ValueError(f"timestamp is not ISO-8601 text: {value!r}")
        return datetime.fromisoformat(value).astimezone(UTC)

    def _run(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._connection.execute(sql, params).fetchall()
        return rows

    def _transaction(self, operation: str, work: Callable[[Run], _T], *, write: bool) -> _T:
        with self._lock:
            self._check_open(operation)
            connection: sqlite3.Connection = self._connection
            try:
                connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = work(self._run)
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                # The original error is the one worth reporting; a failed rollback adds nothing.
                if connection.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        connection.execute("ROLLBACK")
                raise self._failure(operation, exc) from exc


__all__ = ["SQLiteDocumentStore"]
