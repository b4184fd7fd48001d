"""Fixtures of the unit tests: an in-memory broker and a transport connected to it, fresh per
test (a module may override broker, e.g. with a flavour parameter); the SQLite error store,
store, is tests/conftest.py's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from boost_tenancy.testing import InMemoryBroker, InMemoryTransport


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    made = InMemoryBroker()
    yield made
    made.close()


@pytest.fixture
def transport(broker: InMemoryBroker) -> Iterator[InMemoryTransport]:
    connected = InMemoryTransport(broker)
    connected.connect()
    yield connected
    connected.close()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """main() configures structlog onto the captured stderr; later tests must not write there."""
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)
