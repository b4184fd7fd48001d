"""A message the broker gives no credit for never leaves the client: Artemis drains a sender's
credit while its address is full under address-full-policy FAIL or BLOCK (ARTEMIS-5645,
measured on 2.44.0 in tests/integration/test_artemis_refusal.py; the peer models it). Such a
send used to wait out the transport's whole confirm timeout as unconfirmed, and the transport
then gave its connection up, with every tenant's deliveries on it. Now a message is written
only once its sender has credit; one that waited half the confirm timeout fails as refused,
never written, and nothing else is touched."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import pytest

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.testing.amqp_peer.profiles import PeerFlavour
from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.base import Delivery, Outgoing

CONFIRM_TIMEOUT_S = 2.0


@pytest.fixture
def peer() -> Iterator[AmqpPeer]:
    with AmqpPeer(PeerFlavour.ARTEMIS) as made:
        yield made


@pytest.fixture
def transport(peer: AmqpPeer) -> Iterator[AmqpTransport]:
    made = open_transport(
        f"amqp://127.0.0.1:{peer.port}",
        {
            "BOOST_BROKER_CONFIRM_TIMEOUT_S": str(CONFIRM_TIMEOUT_S),
            "BOOST_BROKER_RECONNECT_WAIT_S": "1",
        },
    )
    assert isinstance(made, AmqpTransport)
    made.connect()
    yield made
    made.close()


def held_delivery(transport: AmqpTransport) -> Delivery:
    inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
    transport.subscribe("src", selector=None, prefetch=5, on_delivery=inbox.put)
    transport.send("src", WireMessage(body="held", properties={"tenantUUID": "org-a"}))
    return inbox.get(timeout=10)


def test_a_send_given_no_credit_fails_unsent_and_the_connection_stays(
    peer: AmqpPeer, transport: AmqpTransport
) -> None:
    held = held_delivery(transport)
    peer.fill_address("full")
    started = time.monotonic()
    with pytest.raises(TransportError, match=r"no credit to send within 1\.0 s") as refused:
        transport.send("full", WireMessage(body="refused", properties={}))
    assert not isinstance(refused.value, NotConfirmedError)
    assert time.monotonic() - started < CONFIRM_TIMEOUT_S
    assert transport.is_live(held), "the connection was given up with the delivery on it"
    transport.send("other", WireMessage(body="goes", properties={}))
    transport.ack(held)
    assert transport._engine.generation == 1  # reached into: no API counts connections


def test_a_forward_given_no_credit_leaves_its_original_to_be_settled(
    peer: AmqpPeer, transport: AmqpTransport
) -> None:
    held = held_delivery(transport)
    peer.fill_address("full")
    with pytest.raises(TransportError, match="no credit"):
        transport.send_then_ack(held, [Outgoing("full", WireMessage(body="copy", properties={}))])
    assert transport.is_live(held), "its original went back to the broker with the connection"
    transport.send_then_ack(held, [Outgoing("dlq", WireMessage(body="dead", properties={}))])


def test_a_sender_given_credit_again_sends_again(peer: AmqpPeer, transport: AmqpTransport) -> None:
    """The same sender goes on once the address takes messages again: nothing of the refused
    message was written, so nothing of it is left in the way, and what waits goes in order."""
    peer.fill_address("full")
    with pytest.raises(TransportError, match="no credit"):
        transport.send("full", WireMessage(body="refused", properties={}))
    peer.free_address("full")
    transport.send("full", WireMessage(body="after", properties={}))
    transport.send_batch([("full", WireMessage(body=f"m{n}", properties={})) for n in range(3)])
    inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
    transport.subscribe("full", selector=None, prefetch=10, on_delivery=inbox.put)
    bodies = [inbox.get(timeout=10).body for _ in range(4)]
    assert bodies == ["after", "m0", "m1", "m2"]
    assert inbox.empty(), "the refused message was stored"
