"""pytest fixtures for testing TenantProcessors on the in-memory broker.

Enable it in your conftest.py with ``pytest_plugins = ["boost_tenancy.testing.pytest_plugin"]``;
docs/getting-started.md shows a whole test. Fresh per test: boost_broker (an InMemoryBroker,
ActiveMQ Classic), boost_transport (a connection to it), boost_producer (a TenantProducer on
that connection), boost_error_store (SQLite in tmp_path) and boost_run, which starts a
processor (stopped after the test) and gives a RunningProcessor to wait on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.producer import TenantProducer
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing.harness import TEST_SETTINGS, RunningProcessor, error_store_in
from boost_tenancy.testing.memory import InMemoryBroker
from boost_tenancy.testing.transport import InMemoryTransport

RunProcessor = Callable[..., RunningProcessor]
"""boost_run(processor, tenants, *, settings=TEST_SETTINGS, routing=DEFAULT_ROUTING)."""


@pytest.fixture
def boost_broker() -> Iterator[InMemoryBroker]:
    """An in-memory ActiveMQ Classic, empty, closed after the test."""
    broker = InMemoryBroker()
    yield broker
    broker.close()


@pytest.fixture
def boost_transport(boost_broker: InMemoryBroker) -> Iterator[InMemoryTransport]:
    """A connected transport to boost_broker, for sending and reading in the test itself."""
    transport = InMemoryTransport(boost_broker)
    transport.connect()
    yield transport
    transport.close()


@pytest.fixture
def boost_producer(boost_transport: InMemoryTransport) -> TenantProducer:
    """A TenantProducer on boost_transport (default routing: tenant.<tenant>.<queue>)."""
    return TenantProducer(boost_transport)


@pytest.fixture
def boost_error_store(tmp_path: Path) -> Iterator[ErrorStore]:
    """A SQLite error store in the test's tmp_path, where failures are recorded."""
    store = error_store_in(tmp_path)
    yield store
    store.close()


@pytest.fixture
def boost_run(
    boost_broker: InMemoryBroker, boost_error_store: ErrorStore
) -> Iterator[RunProcessor]:
    """Start a processor for tenants on boost_broker; every one started is stopped after the
    test. Returns the RunningProcessor: wait_handled(n), settled, messages, dead_letters."""
    started: list[RunningProcessor] = []

    def run(
        processor: TenantProcessor,
        tenants: Sequence[TenantId | str],
        *,
        settings: RunnerSettings = TEST_SETTINGS,
        routing: Routing = DEFAULT_ROUTING,
    ) -> RunningProcessor:
        running = RunningProcessor(
            processor,
            tenants,
            broker=boost_broker,
            error_store=boost_error_store,
            settings=settings,
            routing=routing,
        )
        started.append(running.start())
        return running

    yield run
    for running in reversed(started):
        running.stop()
