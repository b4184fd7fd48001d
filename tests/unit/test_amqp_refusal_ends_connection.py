"""A broker that ends the whole connection when it refuses one message (RabbitMQ 3.x, modelled by
the peer as 3.10.8 behaves: tests/integration/test_rabbitmq_refusal.py measures the broker).

The transport sends on a connection of its own there, so a refusal never touches the
deliveries of its subscriptions; each send the loss failed is sent again alone, so only the
refused one fails; and a queue that refused a message is sent to on a second connection from
then on, so its stall does not hold up sends to other queues.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator

import pytest

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.testing.amqp_peer.profiles import PeerFlavour
from boost_tenancy.transports.base import Delivery, Outgoing, PartlyForwardedError, Transport
from tests.conftest import wait_until
from tests.raw_refusal import CONNECTION_ENDED, refusal_of_a_full_queue

CLOSE_AFTER_S = 1.0
"""How long after a refusal the peer ends the connection (RabbitMQ 3.10.8: 3 s)."""


@pytest.fixture
def peer() -> Iterator[AmqpPeer]:
    with AmqpPeer(PeerFlavour.RABBITMQ) as made:
        yield made


@pytest.fixture
def transport(peer: AmqpPeer) -> Iterator[Transport]:
    made = open_transport(
        f"amqp://127.0.0.1:{peer.port}",
        {"BOOST_BROKER_RECONNECT_INITIAL_S": "0.05", "BOOST_BROKER_RECONNECT_MAX_S": "0.2"},
    )
    made.connect()
    yield made
    made.close()


def names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"src.{tag}", f"full.{tag}", f"ok.{tag}"


def full_queue(peer: AmqpPeer, transport: Transport, name: str) -> None:
    """name at its length limit of 1, with one message in it."""
    peer.limit_length(name, 1, close_after_s=CLOSE_AFTER_S)
    transport.send(name, WireMessage(body="first", properties={}))


def send_in_background(
    transport: Transport, queue: str, body: str
) -> tuple[threading.Thread, list[BaseException]]:
    """A send to queue on a thread of its own, started; what it raised goes in the list."""
    raised: list[BaseException] = []

    def send() -> None:
        try:
            transport.send(queue, WireMessage(body=body, properties={}))
        except TransportError as exc:
            raised.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    return thread, raised


def delivered(transport: Transport, source: str, count: int) -> list[Delivery]:
    inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
    transport.subscribe(source, selector=None, prefetch=10, on_delivery=inbox.put)
    for n in range(count):
        transport.send(source, WireMessage(body=f"m{n}", properties={"tenantUUID": "org-a"}))
    return [inbox.get(timeout=10) for _ in range(count)]


def test_the_peer_ends_the_connection_as_rabbitmq_does(peer: AmqpPeer) -> None:
    """The check the real RabbitMQ passes (tests/integration/test_rabbitmq_refusal.py)."""
    name = f"full.{uuid.uuid4().hex[:8]}"
    peer.limit_length(name, 1, close_after_s=0.2)
    assert refusal_of_a_full_queue(peer.url, f"/queue/{name}") == CONNECTION_ENDED
    assert peer.depth(name) == 1


def test_a_refused_send_fails_naming_the_likely_cause_and_leaves_every_delivery_live(
    peer: AmqpPeer, transport: Transport
) -> None:
    source, full, _ = names()
    [held] = delivered(transport, source, 1)
    full_queue(peer, transport, full)
    opened = peer.connections_opened
    with pytest.raises(TransportError, match="ends the connection when it refuses a message"):
        transport.send(full, WireMessage(body="second", properties={}))
    assert peer.depth(full) == 1
    # Only the sending connection ended (once: the send was alone on it, so it was the refused
    # one, and it is not sent again) and came back; the delivery is still this consumer's.
    assert wait_until(lambda: peer.connections_opened == opened + 1)
    assert transport.is_live(held)
    transport.ack(held)
    assert wait_until(lambda: peer.depth(source) == 0)


def test_only_the_refused_copy_of_a_forward_fails_the_others_are_sent_again_and_stored(
    peer: AmqpPeer, transport: Transport
) -> None:
    source, full, ok = names()
    originals = delivered(transport, source, 3)
    full_queue(peer, transport, full)
    targets = [ok, full, ok]
    with pytest.raises(PartlyForwardedError, match="1 refused") as raised:
        transport.send_then_ack_many(
            [
                (delivery, [Outgoing(target, WireMessage(body=f"copy {n}", properties={}))])
                for n, (delivery, target) in enumerate(zip(originals, targets, strict=True))
            ]
        )
    assert raised.value.forwarded == [originals[0], originals[2]]
    # The third copy went out after the refused one, was lost with the connection and sent
    # again alone: stored once, as the first.
    assert sorted(str(m.body) for m in peer.messages(ok)) == ["copy 0", "copy 2"]
    assert wait_until(lambda: peer.depth(source) == 1)
    assert transport.is_live(originals[1])


def test_a_queue_that_refused_is_sent_to_on_another_connection_so_others_do_not_wait(
    peer: AmqpPeer, transport: Transport
) -> None:
    _, full, ok = names()
    full_queue(peer, transport, full)
    with pytest.raises(TransportError):
        transport.send(full, WireMessage(body="refused", properties={}))
    opened = peer.connections_opened

    stalled, refused_again = send_in_background(transport, full, "refused again")
    try:
        # The peer takes the refused message and ends its connection CLOSE_AFTER_S later;
        # meanwhile a send to another queue is confirmed on the other connection.
        assert wait_until(lambda: peer.connections_opened > opened)  # the second lane opened
        transport.send(ok, WireMessage(body="not held up", properties={}))
        assert stalled.is_alive(), "the send to the healthy queue waited for the refusal"
    finally:
        stalled.join(timeout=4 * CLOSE_AFTER_S + 10)
    assert len(refused_again) == 1
    assert [str(m.body) for m in peer.messages(ok)] == ["not held up"]


def crashed(peer: AmqpPeer) -> bool:
    """Whether a connection of the peer refused a message and takes nothing more (reached into:
    the peer has no API for it)."""
    return peer._call(lambda: any(c.crashed for c in peer._engine._conns.values()))


def test_a_send_lost_with_the_refusal_goes_through_though_sends_fail_at_once(
    peer: AmqpPeer,
) -> None:
    """With reconnect_wait_s 0 a send fails at once while its connection is away. A send of
    another tenant lost with the refused one's connection is still sent again once the sending
    connection is back, instead of failing (and having its message dead-lettered)."""
    transport = open_transport(
        f"amqp://127.0.0.1:{peer.port}",
        {"BOOST_BROKER_RECONNECT_INITIAL_S": "0.05", "BOOST_BROKER_RECONNECT_WAIT_S": "0"},
    )
    transport.connect()
    try:
        _, full, ok = names()
        full_queue(peer, transport, full)
        first, refused = send_in_background(transport, full, "refused")
        assert wait_until(lambda: crashed(peer))
        transport.send(ok, WireMessage(body="lost with it, then sent", properties={}))
        first.join(timeout=4 * CLOSE_AFTER_S + 10)
        assert [str(m.body) for m in peer.messages(ok)] == ["lost with it, then sent"]
        assert len(refused) == 1
    finally:
        transport.close()


def test_a_send_to_a_refusing_queue_after_close_fails_and_opens_nothing(
    peer: AmqpPeer, transport: Transport
) -> None:
    _, full, _ = names()
    full_queue(peer, transport, full)
    with pytest.raises(TransportError):
        transport.send(full, WireMessage(body="refused", properties={}))
    transport.close()
    with pytest.raises(TransportError, match="closed"):
        transport.send(full, WireMessage(body="after close", properties={}))
    alive = [t.name for t in threading.enumerate() if t.name.startswith("amqp-sender")]
    assert alive == [], f"a sending connection outlived close: {alive}"
