"""How the AMQP transport takes deliveries off its receivers (transports/amqp/receiving.py), on
the in-process peer: every delivery of a receiver is read from proton's C delivery before proton
wraps the event (the loop's shortcut), a sender's outcomes still reach on_delivery, and every
reference the transport takes on a held delivery is given back, however the delivery ends:
accepted, accepted in a transaction, left at an unsubscribe, or left when the connection is
lost."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.transports.amqp import AmqpTransport, receiving
from boost_tenancy.transports.base import Delivery, Outgoing
from boost_tenancy.transports.registry import open_transport
from tests.conftest import wait_until

WAITS = {
    "BOOST_BROKER_RECONNECT_INITIAL_S": "0.05",
    "BOOST_BROKER_RECONNECT_MAX_S": "0.2",
}


class References:
    """Counts the references receiving.py takes on proton deliveries and gives back."""

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
        monkeypatch.setattr(receiving, "pn_incref", self.incref)
        monkeypatch.setattr(receiving, "pn_decref", self.decref)

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


class Inbox:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()

    def __call__(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def count(self) -> int:
        with self._lock:
            return len(self.deliveries)

    def bodies(self) -> list[str]:
        with self._lock:
            return [str(d.body) for d in self.deliveries]


def message(text: str) -> WireMessage:
    return WireMessage(body=text, properties={"tenantUUID": "org-A"})


def fill(transport: AmqpTransport, queue: str, count: int) -> None:
    transport.send_batch([(queue, message(f"m{n}")) for n in range(count)], atomic=False)


def test_receivers_deliveries_are_read_before_proton_wraps_them(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapped: list[str] = []
    engine = transport._engine
    real_incoming = engine.receiving.incoming

    def counted_incoming(link: Any, delivery: Any) -> None:
        wrapped.append(link.name)
        real_incoming(link, delivery)

    monkeypatch.setattr(engine.receiving, "incoming", counted_incoming)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    # Sent and confirmed (the sender's outcomes are delivery events the shortcut leaves alone).
    fill(transport, queue, 50)
    assert wait_until(lambda: inbox.count() == 50, timeout=20)
    assert inbox.bodies() == [f"m{n}" for n in range(50)], "in order, every one"
    for delivery in inbox.deliveries:
        transport.ack(delivery)
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=20), "every one accepted"
    assert wrapped == [], "no receiver's delivery took proton's wrapped path"


def test_without_the_shortcut_the_wrapped_path_reads_the_same(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A delivery the shortcut does not take (on_delivery's path): read and settled the same.
    monkeypatch.setattr(transport._engine.receiving, "delivered", lambda impl: False)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    fill(transport, queue, 20)
    assert wait_until(lambda: inbox.count() == 20, timeout=20)
    assert inbox.bodies() == [f"m{n}" for n in range(20)]
    for delivery in inbox.deliveries:
        transport.ack(delivery)
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=20)


def test_references_are_given_back_on_accept_and_in_a_transaction(
    peer: AmqpPeer, transport: AmqpTransport, queue: str, references: References
) -> None:
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    fill(transport, queue, 20)
    assert wait_until(lambda: inbox.count() == 20, timeout=20)
    assert references.taken == 20, "one reference per delivery held"
    assert transport.capabilities.atomic_forward, "the peer models Artemis: a transaction"
    copies = f"tenant.org-A.copies.{uuid.uuid4().hex[:8]}"
    for n, delivery in enumerate(inbox.deliveries):
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
    assert wait_until(lambda: inbox.count() == 10, timeout=20)
    transport.ack(inbox.deliveries[0])
    assert wait_until(lambda: peer.depth(queue) == 9, timeout=20)
    if ending == "unsubscribe":
        transport.unsubscribe(subscription)
    else:
        peer.drop_connections()
    assert wait_until(references.balanced, timeout=20), (references.taken, references.given)
    assert references.taken >= 10
    assert peer.depth(queue) == 9, "nothing left unsettled was lost"
