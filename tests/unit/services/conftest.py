"""Fixtures of the pipeline service tests: document stores on SQLite and on PostgreSQL.

PostgreSQL comes from BOOST_TEST_POSTGRES_DSN; if unreachable, its tests skip (fail under CI=true).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from services.common.documents import (
    DocumentStore,
    PostgresDocumentStore,
    SQLiteDocumentStore,
)

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    dsn = os.environ.get("BOOST_TEST_POSTGRES_DSN", DEFAULT_DSN)
    try:
        with psycopg.connect(dsn, connect_timeout=5):
            pass
    except psycopg.Error as exc:
        reason = f"PostgreSQL unreachable at BOOST_TEST_POSTGRES_DSN: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return dsn


def new_prefix() -> str:
    return "t_" + uuid.uuid4().hex[:12] + "_"


@dataclass
class StoreBackend:
    """Opens document stores of one backend under the test's own table prefix, then drops them."""

    kind: str
    location: str
    prefix: str = field(default_factory=new_prefix)
    opened: list[DocumentStore] = field(default_factory=list)

    def open(self) -> DocumentStore:
        store: DocumentStore
        if self.kind == "sqlite":
            store = SQLiteDocumentStore(self.location, prefix=self.prefix)
        else:
            store = PostgresDocumentStore(self.location, prefix=self.prefix)
        self.opened.append(store)
        return store

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Run SQL on a separate connection, to see what the store really committed."""
        if self.kind == "sqlite":
            connection = sqlite3.connect(self.location)
            try:
                return connection.execute(sql, params).fetchall()
            finally:
                connection.close()
        with psycopg.connect(self.location, autocommit=True) as admin:
            return admin.execute(sql.replace("?", "%s"), params).fetchall()

    def cleanup(self) -> None:
        for store in self.opened:
            store.close()
        tables = [f"{self.prefix}documents", f"{self.prefix}processed_events"]
        if self.kind == "sqlite":
            if not Path(self.location).exists():
                return
            connection = sqlite3.connect(self.location)
            try:
                for name in tables:
                    connection.execute(f'DROP TABLE IF EXISTS "{name}"')
                connection.commit()
            finally:
                connection.close()
        else:
            with psycopg.connect(self.location, autocommit=True) as admin:
                for name in tables:
                    admin.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    kind: str = request.param
    if kind == "sqlite":
        chosen = StoreBackend(kind, str(tmp_path / "documents.sqlite3"))
    else:
        chosen = StoreBackend(kind, request.getfixturevalue("postgres_dsn"))
    try:
        yield chosen
    finally:
        chosen.cleanup()


@pytest.fixture
def documents(backend: StoreBackend) -> DocumentStore:
    return backend.open()
