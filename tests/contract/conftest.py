"""The contract suite's axis: every contract test runs on the in-memory models of ActiveMQ
Classic and Artemis over STOMP, on the in-process AMQP 1.0 models of Artemis and RabbitMQ
(boost_tenancy.testing.amqp_peer), on the real STOMP broker (marked broker), and on the AMQP
transport against the real AMQP 1.0 broker (marked amqp_broker: the local RabbitMQ, or Artemis's
acceptor named by BOOST_BROKER_AMQP_URL).

A test whose expectation differs by broker reads it from the transport's capabilities, never
from the name of the transport or the broker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from boost_tenancy.resilience.error_store import ErrorStore, SQLiteErrorStore
from boost_tenancy.testing import BrokerFlavour, InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.amqp_peer import AmqpPeer, PeerFlavour
from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.amqp.receiving import DeliveryToken
from boost_tenancy.transports.base import Delivery, Transport
from boost_tenancy.transports.registry import open_transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import TransportFactory
from tests.queue_flags import KEPT, QueueFlags, artemis_queue_flags, rabbitmq_queue_flags

MEMORY_FLAVOURS = {
    "memory-classic": BrokerFlavour.CLASSIC,
    "memory-artemis": BrokerFlavour.ARTEMIS,
}
AMQP_PEERS = {
    "amqp-peer-artemis": PeerFlavour.ARTEMIS,
    "amqp-peer-rabbitmq": PeerFlavour.RABBITMQ,
}


@pytest.fixture(
    params=[
        *MEMORY_FLAVOURS,
        *AMQP_PEERS,
        pytest.param("stomp", marks=pytest.mark.broker),
        pytest.param("amqp", marks=pytest.mark.amqp_broker),
    ]
)
def transport_factory(request: pytest.FixtureRequest) -> Iterator[TransportFactory]:
    """Connected transports of one kind, closed after the test."""
    made: list[Transport] = []
    broker: InMemoryBroker | AmqpPeer | None = None
    connect: Callable[[], Transport]
    if request.param in MEMORY_FLAVOURS:
        broker = InMemoryBroker(flavour=MEMORY_FLAVOURS[request.param])
        connect = functools.partial(InMemoryTransport, broker)
    elif request.param in AMQP_PEERS:
        broker = AmqpPeer(AMQP_PEERS[request.param])
        connect = functools.partial(open_transport, broker.url)
    elif request.param == "amqp":
        connect = functools.partial(open_transport, request.getfixturevalue("amqp_url"))
    else:
        settings: StompSettings = request.getfixturevalue("stomp_settings")
        connect = functools.partial(StompTransport, settings)

    def make() -> Transport:
        transport = connect()
        transport.connect()
        made.append(transport)
        return transport

    request.node.stash[MODEL_KEY] = broker
    yield make
    for transport in made:
        transport.close()
    if broker is not None:
        broker.close()


MODEL_KEY = pytest.StashKey[InMemoryBroker | AmqpPeer | None]()
"""The model a contract test runs on (transport_factory), or None for a real broker."""

QueueFlagsOf = Callable[[Transport, str], QueueFlags | None]


@pytest.fixture
def queue_flags(
    request: pytest.FixtureRequest, transport_factory: TransportFactory
) -> QueueFlagsOf:
    """The flags of a queue as the broker (or model) behind transport_factory reports them; None:
    no such queue. Each broker is asked in its own terms: RabbitMQ by rabbitmqctl, Artemis by its
    listQueues. The in-memory models keep every queue they have durable and shared, as Classic
    and Artemis do, so for them only the queue's existence is asked; the AMQP peer models the
    durability a link declares (RabbitMQ's rule) and keeps queues shared. ActiveMQ Classic 5.17
    has no way to tell over STOMP; every queue it has is durable and shared by nature (KahaDB, no
    auto-deletion by default)."""
    model = request.node.stash[MODEL_KEY]

    def of(transport: Transport, name: str) -> QueueFlags | None:
        if isinstance(model, InMemoryBroker):
            return KEPT if model.queue_stats([name])[name] is not None else None
        if isinstance(model, AmqpPeer):
            durable = model.durable(name)
            return None if durable is None else KEPT._replace(durable=durable)
        if isinstance(transport, AmqpTransport) and transport.flavour is AmqpFlavour.RABBITMQ:
            try:
                return rabbitmq_queue_flags(name)
            except LookupError as exc:
                pytest.skip(str(exc))
        if transport.capabilities.send_time_routes:  # Artemis: its management address
            return artemis_queue_flags(transport, name)
        if isinstance(transport, AmqpTransport):
            pytest.skip(f"no way to read the queues of {transport.server} over AMQP 1.0")
        pytest.skip("ActiveMQ Classic tells no queue's flags over STOMP; its queues are durable")

    return of


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ErrorStore]:
    """A SQLite error store of the test's own."""
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()


def needs_selectors(factory: TransportFactory) -> None:
    """Shared queues (the Java services' topology) are kept apart by the broker's selectors: on
    a broker without them the runner refuses to subscribe (tested in the transport contract),
    and the per-tenant topology's contract (test_routing_contract) is what holds there."""
    if not factory().capabilities.server_side_selectors:
        pytest.skip("shared queues need a broker that applies selectors")


LoseConnection = Callable[[Transport], None]


def lose_connection_now(transport: Transport) -> None:
    """Drop transport's connection as a crash would (no orderly close): the broker takes back
    what was unsettled, and the transport reconnects and resubscribes by itself. The test
    reaches in: no API drops a socket."""
    if isinstance(transport, InMemoryTransport):
        transport.drop_connection()
    elif isinstance(transport, AmqpTransport):
        transport._engine.loop.post(lambda: transport._engine.abandon("lost for the test"))
    else:
        assert isinstance(transport, StompTransport)
        # Every connection of it (on Artemis the subscriptions are not on the transport's own).
        for line in transport._subscriptions._lines:
            link = line.connection.live()
            if link is not None:  # the socket closes now, as the broker would see a crash
                line.connection.abandon(link, "lost for the test")


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
        if isinstance(transport, AmqpTransport):
            real_accept = transport._engine.accept  # the test reaches in: no API drops a link

            def accept_after_losing_the_connection(tokens: Sequence[DeliveryToken]) -> None:
                monkeypatch.setattr(transport._engine, "accept", real_accept)
                transport._engine.abandon("lost for the test")
                real_accept(tokens)  # dropped as stale: its connection is gone

            monkeypatch.setattr(transport._engine, "accept", accept_after_losing_the_connection)
            return
        assert isinstance(transport, StompTransport)
        real_ack = transport.ack

        def ack_after_losing_the_connection(delivery: Delivery) -> None:
            monkeypatch.setattr(transport, "ack", real_ack)
            lose_connection_now(transport)
            real_ack(delivery)  # dropped as stale: its connection is gone

        monkeypatch.setattr(transport, "ack", ack_after_losing_the_connection)

    return arrange
