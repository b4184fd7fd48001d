"""Fixtures of the unit tests: an in-memory broker and a SQLite error store, fresh per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy.resilience.error_store import ErrorStore, SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    made = InMemoryBroker()
    yield made
    made.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ErrorStore]:
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()
