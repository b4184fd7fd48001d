"""How the AMQP transport takes deliveries off its links (transports/amqp/receiving.py and
sending.py), on the in-process peer: every delivery of a receiver, and every outcome of a sent
message, is read from proton's C delivery before proton wraps the event (the loop's shortcut),
the wrapped path reads the same, and every reference the transport takes on a delivery is given
back, however it ends: accepted, accepted in a transaction, left at an unsubscribe, left when
the connection is lost, or confirmed by the broker."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Condition, Delivery, Message

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.messages import WireMessage
from boost_tenancy.testing import amqp_peer
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.transports.amqp import AmqpTransport, receiving, sending
from boost_tenancy.transports.base import Outgoing
from tests.conftest import Inbox, wait_until

WAITS = {
    "BOOST_BROKER_RECONNECT_INITIAL_S": "0.05",
    "BOOST_BROKER_RECONNECT_MAX_S": "0.2",
}


class References:
    """Counts the references receiving.py and sending.py take on proton deliveries and give
    back."""

    def __init__(self) -> None:
        self.taken = 0
        self.given = 0
        self._lock = threading.Lock()

    def incref(self, impl: Any) -> Any:
        with self._lock:
            self.taken += 1
        return self._incref(impl)

    def decref(self, impl: Any) -> Any:
        with self._lock:
            self.given += 1
        return self._decref(impl)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._incref, self._decref = receiving.pn_incref, receiving.pn_decref
        for module in (receiving, sending):
            monkeypatch.setattr(module, "pn_incref", self.incref)
            monkeypatch.setattr(module, "pn_decref", self.decref)

    def balanced(self) -> bool:
        with self._lock:
            return self.taken == self.given


@pytest.fixture
def references(monkeypatch: pytest.MonkeyPatch) -> References:
    counted = References()
    counted.install(monkeypatch)
    return counted


@pytest.fixture
def peer() -> Iterator[AmqpPeer]:
    with AmqpPeer() as made:
        yield made


@pytest.fixture
def transport(peer: AmqpPeer) -> Iterator[AmqpTransport]:
    opened = open_transport(f"amqp://127.0.0.1:{peer.port}", WAITS)
    assert isinstance(opened, AmqpTransport)
    opened.connect()
    yield opened
    opened.close()


@pytest.fixture
def queue() -> str:
    return f"tenant.org-A.cmd.{uuid.uuid4().hex[:8]}"


def message(text: str) -> WireMessage:
    return WireMessage(body=text, properties={"tenantUUID": "org-A"})


def fill(transport: AmqpTransport, queue: str, count: int) -> None:
    transport.send_batch([(queue, message(f"m{n}")) for n in range(count)], atomic=False)


def test_deliveries_and_outcomes_are_read_before_proton_wraps_them(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapped: list[str] = []
    engine = transport._engine
    real_incoming, real_update = engine.receiving.incoming, engine.sending.update

    def counted_incoming(link: Any, delivery: Any) -> None:
        wrapped.append(f"received on {link.name}")
        real_incoming(link, delivery)

    def counted_update(delivery: Any) -> None:
        wrapped.append("outcome")
        real_update(delivery)

    monkeypatch.setattr(engine.receiving, "incoming", counted_incoming)
    monkeypatch.setattr(engine.sending, "update", counted_update)
    assert engine.loop.shortcut_installed, "the installed proton keeps its collector as expected"
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    # Sent and confirmed (the sender's outcomes are delivery events the shortcut leaves alone).
    fill(transport, queue, 50)
    assert wait_until(lambda: len(inbox) == 50, timeout=20)
    assert inbox.bodies() == [f"m{n}" for n in range(50)], "in order, every one"
    for delivery in inbox.items:
        transport.ack(delivery)
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=20), "every one accepted"
    assert wrapped == [], "no delivery or outcome took proton's wrapped path"


def test_without_the_shortcut_the_wrapped_path_reads_the_same(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the shortcut does not take (on_delivery's path): read, confirmed and settled the same.
    engine = transport._engine
    monkeypatch.setattr(engine.receiving, "delivered", lambda impl, link: False)
    monkeypatch.setattr(engine.sending, "delivered", lambda impl: False)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    fill(transport, queue, 20)
    assert wait_until(lambda: len(inbox) == 20, timeout=20)
    assert inbox.bodies() == [f"m{n}" for n in range(20)]
    for delivery in inbox.items:
        transport.ack(delivery)
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=20)


def test_references_are_given_back_on_accept_and_in_a_transaction(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, references: References
) -> None:
    fill(transport, queue, 20)
    assert wait_until(references.balanced), "every sent message's reference given back"
    sent = references.taken
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) == 20, timeout=20)
    assert wait_until(lambda: references.taken - sent == 20), "one per delivery held"
    assert transport.capabilities.atomic_forward, "the peer models Artemis: a transaction"
    copies = f"tenant.org-A.copies.{uuid.uuid4().hex[:8]}"
    for n, delivery in enumerate(inbox.items):
        if n % 2:
            transport.ack(delivery)
        else:  # the copy and the accept in one transaction (take() hands proton the delivery)
            transport.send_then_ack(delivery, [Outgoing(copies, message(f"copy{n}"))])
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=20)
    assert peer.depth(copies) == 10
    assert wait_until(references.balanced), (references.taken, references.given)


@pytest.mark.parametrize("ending", ["unsubscribe", "connection lost"])
def test_references_of_deliveries_left_unsettled_are_given_back(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, references: References, ending: str
) -> None:
    inbox = Inbox()
    subscription = transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    fill(transport, queue, 10)
    assert wait_until(lambda: len(inbox) == 10, timeout=20)
    transport.ack(inbox.items[0])
    assert wait_until(lambda: peer.depth(queue) == 9, timeout=20)
    if ending == "unsubscribe":
        transport.unsubscribe(subscription)
    else:
        peer.drop_connections()
    assert wait_until(references.balanced, timeout=20), (references.taken, references.given)
    assert references.taken >= 10
    assert peer.depth(queue) == 9, "nothing left unsettled was lost"


# -- lost connections -----------------------------------------------------------------------------
def test_a_reconnect_leaves_one_receiver_per_subscription(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, references: References
) -> None:
    engine = transport._engine
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    for _ in range(3):
        generation = engine.generation
        peer.drop_connections()
        assert wait_until(
            lambda g=generation: engine.generation > g and len(engine.receiving._attaches) == 1,
            timeout=20,
        )
    assert len(engine.receiving._attaches) == 1, "a lost connection's receivers are forgotten"
    fill(transport, queue, 3)
    assert wait_until(lambda: len(inbox) == 3, timeout=20)
    for delivery in inbox.items:
        transport.ack(delivery)
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=20)
    assert wait_until(references.balanced), (references.taken, references.given)


def test_deliveries_read_after_their_connection_was_lost_are_not_handed_on(
    peer: AmqpPeer, transport: AmqpTransport
) -> None:
    # The broker ends one receiver (the transport gives the connection up and reconnects) and,
    # in the same burst, sends to another: those transfers belong to the lost connection and
    # come again on the next one, so each reaches the handler once, from the new connection.
    engine = transport._engine
    suffix = uuid.uuid4().hex[:8]
    ending, other = f"tenant.org-A.ending.{suffix}", f"tenant.org-A.other.{suffix}"
    inbox = Inbox()
    transport.subscribe(ending, selector=None, prefetch=10, on_delivery=Inbox())
    transport.subscribe(other, selector=None, prefetch=10, on_delivery=inbox)
    # One message through first: the receiver's credit has reached the broker.
    transport.send_batch([(other, message("first"))], atomic=False)
    assert wait_until(lambda: len(inbox) == 1, timeout=20)
    transport.ack(inbox.items[0])
    assert wait_until(lambda: peer.depth(other) == 0, timeout=20)
    generation = engine.generation
    peer_engine = peer._engine

    def end_the_receiver() -> None:
        for link, consumer in list(peer_engine._consumers.items()):
            if consumer.queue.name == ending:
                link.condition = Condition("amqp:resource-deleted", "queue deleted")
                link.close()

    def send_to_the_other() -> None:
        for n in range(3):
            sent = Message(body=f"b{n}", properties={"tenantUUID": "org-A"})
            peer_engine._store(peer_engine._queue(other), sent.encode(), sent)

    busy = threading.Event()
    engine.loop.post(lambda: (busy.set(), time.sleep(0.6)))  # both arrive in one pass
    assert busy.wait(5)
    peer._call(end_the_receiver)
    time.sleep(0.1)  # the detach goes out first, the transfers after it
    peer._call(send_to_the_other)
    assert wait_until(lambda: len(inbox) >= 4 and engine.is_open, timeout=20)
    time.sleep(0.3)  # a late duplicate would come now
    later = inbox.items[1:]
    assert [d.body for d in later] == ["b0", "b1", "b2"], [(d.body, d.token) for d in later]
    assert all(d.token.generation > generation for d in later), "from the new connection"


# -- outcomes and bytes ---------------------------------------------------------------------------
def test_an_outcome_given_before_the_broker_settles_is_counted_once(
    peer: AmqpPeer,
    transport: AmqpTransport,
    queue: str,
    references: References,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The broker may tell the outcome first and settle later: the send is confirmed by the
    # outcome, and the reference is given back once, not again at the settlement.
    unsettled: list[Any] = []

    def outcome_only(delivery: Any, state: int, condition: Any = None, data: Any = None) -> None:
        if condition is not None:
            delivery.local.condition = condition
        if data is not None:
            delivery.local.data = data
        delivery.update(state)
        unsettled.append(delivery)

    monkeypatch.setattr(amqp_peer, "_settle", outcome_only)
    fill(transport, queue, 20)  # returns once every one is confirmed
    assert wait_until(references.balanced), (references.taken, references.given)

    def settle_all() -> None:
        while unsettled:
            unsettled.pop().settle()

    peer._call(settle_all)
    fill(transport, queue, 1)  # the loop has read the settlements by the time this is confirmed
    assert wait_until(references.balanced), (references.taken, references.given)
    assert references.taken == references.given == 21
    assert not transport._engine.loop.is_stopped


NO_MESSAGE = {
    "no-bytes-shortcut": (b"", "the transfer carried no bytes", True),
    "no-bytes-wrapped": (b"", "the transfer carried no bytes", False),
    "no-message-shortcut": (b"hello world", "no AMQP message", True),
    "no-message-wrapped": (b"hello world", "no AMQP message", False),
}


@pytest.mark.parametrize("case", NO_MESSAGE.values(), ids=NO_MESSAGE.keys())
def test_a_transfer_of_no_message_is_rejected_and_the_link_goes_on(
    peer: AmqpPeer,
    transport: AmqpTransport,
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[bytes, str, bool],
) -> None:
    # Rejected (Artemis moves it to its dead-letter address with the bytes), never handed on:
    # proton would read the second one as an empty message.
    payload, named, shortcut = case
    engine = transport._engine
    if not shortcut:
        monkeypatch.setattr(engine.receiving, "delivered", lambda impl, link: False)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    assert wait_until(lambda: engine.receiving.is_attached(next(iter(engine.receiving._attach_of))))
    peer_engine = peer._engine
    sent: list[Any] = []

    def send_empty() -> None:
        for link, consumer in peer_engine._consumers.items():
            if consumer.queue.name == queue:
                sent.append(link.delivery("no-message"))
                if payload:
                    link.send(payload)
                link.advance()

    def answered() -> list[tuple[int, Any]]:
        return peer._call(lambda: [(d.remote_state, d.remote.condition) for d in sent])

    peer._call(send_empty)
    assert wait_until(lambda: bool(answered()) and answered()[0][0] != 0, timeout=10), answered()
    [(state, condition)] = answered()
    assert state == Delivery.REJECTED
    assert condition is not None and condition.name == "amqp:decode-error"
    assert "undecodable message" in condition.description and named in condition.description
    fill(transport, queue, 1)
    assert wait_until(lambda: inbox.bodies() == ["m0"], timeout=10), "the link still delivers"
    assert not engine.loop.is_stopped
