"""Shared fixtures: the broker and database a test needs, and the transports of the contract suite.

A missing broker or database skips a test locally and fails it under CI=true, so CI can never
pass by skipping the real-broker tests.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from boost_tenancy.resilience.error_store import ErrorStore, FailureRecord
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, Transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.broker_probes import stomp_handshake
from tests.jms.peer import JmsPeer, compile_peer, jms_available

STOMP_HOST = os.environ.get("BOOST_BROKER_HOST", "127.0.0.1")
STOMP_PORT = int(os.environ.get("BOOST_BROKER_STOMP_PORT", "61613"))
OPENWIRE_PORT = int(os.environ.get("BOOST_BROKER_OPENWIRE_PORT", "61616"))


def unavailable(reason: str) -> None:
    """Skip locally; under CI a missing prerequisite is a failure, not a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02
) -> bool:
    """Poll predicate until it holds or timeout passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class Inbox:
    """Collects deliveries from the transport's receiving thread."""

    def __init__(self) -> None:
        self.items: list[Delivery] = []
        self._lock = threading.Lock()

    def __call__(self, delivery: Delivery) -> None:
        with self._lock:
            self.items.append(delivery)

    def __len__(self) -> int:
        with self._lock:
            return len(self.items)

    def bodies(self) -> list[object]:
        with self._lock:
            return [d.body for d in self.items]


def recorded(store: ErrorStore, count: int, **filters: Any) -> list[FailureRecord]:
    """The store's failures matching filters once at least count are there.

    A failure is recorded just after the broker took the message's retry copy or dead letter,
    so a test that has seen the copy waits a moment for the row.
    """
    wait_until(lambda: len(store.failures(**filters)) >= count)
    return store.failures(**filters)


def unique_queue(prefix: str = "test") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def stomp_settings() -> StompSettings:
    """Settings of the local broker; the test is skipped (or failed under CI) when it is down."""
    # A handshake, not just an open port: a broker out of memory still accepts TCP.
    if not stomp_handshake(STOMP_HOST, STOMP_PORT):
        unavailable(
            f"no ActiveMQ broker answering STOMP at {STOMP_HOST}:{STOMP_PORT} "
            "(start one with `scripts/broker start`)"
        )
    return StompSettings(host=STOMP_HOST, port=STOMP_PORT, receipt_timeout_s=15.0)


@pytest.fixture(scope="session")
def jms_peer(tmp_path_factory: pytest.TempPathFactory) -> JmsPeer:
    """The real ActiveMQ JMS client, compiled once: the BOOST Java services' side of the wire."""
    reason = jms_available()
    if reason is not None:
        unavailable(f"JMS peer unavailable: {reason}")
    for port, protocol in ((STOMP_PORT, "STOMP"), (OPENWIRE_PORT, "OpenWire")):
        if not port_open(STOMP_HOST, port):
            unavailable(f"no ActiveMQ broker: {protocol} port {STOMP_HOST}:{port} is not open")
    return compile_peer(tmp_path_factory.mktemp("jms-peer-classes"))


OPENWIRE_URL = f"tcp://{STOMP_HOST}:{OPENWIRE_PORT}"

TransportFactory = Callable[[], Transport]


@pytest.fixture(params=["memory", pytest.param("stomp", marks=pytest.mark.broker)])
def transport_factory(request: pytest.FixtureRequest) -> Iterator[TransportFactory]:
    """Connected transports of one kind, closed after the test: the contract suite's axis."""
    made: list[Transport] = []
    broker: InMemoryBroker | None = None
    if request.param == "memory":
        broker = InMemoryBroker()

        def make() -> Transport:
            assert broker is not None
            transport = InMemoryTransport(broker)
            transport.connect()
            made.append(transport)
            return transport
    else:
        settings: StompSettings = request.getfixturevalue("stomp_settings")

        def make() -> Transport:
            transport = StompTransport(settings)
            transport.connect()
            made.append(transport)
            return transport

    yield make
    for transport in made:
        transport.close()
    if broker is not None:
        broker.close()
