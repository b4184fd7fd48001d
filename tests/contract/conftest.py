"""The contract suite's axis: every contract test runs on the in-memory model of ActiveMQ Classic,
on the in-memory model of Artemis, and on the real STOMP broker (marked broker).

A test whose expectation differs by broker reads it from the transport's capabilities, never
from the name of the transport or the broker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest

from boost_tenancy.testing import BrokerFlavour, InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, Transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import TransportFactory

MEMORY_FLAVOURS = {
    "memory-classic": BrokerFlavour.CLASSIC,
    "memory-artemis": BrokerFlavour.ARTEMIS,
}


@pytest.fixture(params=[*MEMORY_FLAVOURS, pytest.param("stomp", marks=pytest.mark.broker)])
def transport_factory(request: pytest.FixtureRequest) -> Iterator[TransportFactory]:
    """Connected transports of one kind, closed after the test."""
    made: list[Transport] = []
    broker: InMemoryBroker | None = None
    connect: Callable[[], Transport]
    if request.param in MEMORY_FLAVOURS:
        broker = InMemoryBroker(flavour=MEMORY_FLAVOURS[request.param])
        connect = functools.partial(InMemoryTransport, broker)
    else:
        settings: StompSettings = request.getfixturevalue("stomp_settings")
        connect = functools.partial(StompTransport, settings)

    def make() -> Transport:
        transport = connect()
        transport.connect()
        made.append(transport)
        return transport

    yield make
    for transport in made:
        transport.close()
    if broker is not None:
        broker.close()


LoseConnection = Callable[[Transport], None]


@pytest.fixture
def lose_connection_before_next_ack(monkeypatch: pytest.MonkeyPatch) -> LoseConnection:
    """Arrange for transport to lose its connection right before it next writes an ack on its
    own, as a crash between a confirmed copy and the ack would. The transport reconnects and
    resubscribes by itself. A transaction that carries the ack (atomic_forward) never gets
    there."""

    def arrange(transport: Transport) -> None:
        if isinstance(transport, InMemoryTransport):
            transport.drop_connection_before_next_ack()
            return
        assert isinstance(transport, StompTransport)
        real_ack = transport.ack

        def ack_after_losing_the_connection(delivery: Delivery) -> None:
            monkeypatch.setattr(transport, "ack", real_ack)
            link = transport._connection.live()  # the test reaches in: no API drops a socket
            if link is not None:
                link.disconnect()
            real_ack(delivery)  # dropped as stale: its connection is gone

        monkeypatch.setattr(transport, "ack", ack_after_losing_the_connection)

    return arrange
