"""A forward that is not one transaction (AMQP on RabbitMQ): each delivery's copies are confirmed
on their own, so a copy the broker refuses leaves its own original alone unaccepted. The others
are stored and their originals accepted, and PartlyForwardedError names them: a caller moving
the rest again stores none of them twice."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Condition
from proton import Delivery as ProtonDelivery

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.messages import WireMessage
from boost_tenancy.testing import amqp_peer
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.testing.amqp_peer.profiles import PeerFlavour
from boost_tenancy.transports.base import Delivery, Outgoing, PartlyForwardedError, Transport
from tests.conftest import wait_until

REFUSED = "refuse me"


@pytest.fixture
def peer(monkeypatch: pytest.MonkeyPatch) -> Iterator[AmqpPeer]:
    """A peer without transactions that settles a message whose body is REFUSED rejected (the
    AMQP outcome for a refusal) and stores the rest. RabbitMQ 3.10 ends the connection instead,
    modelled and tested in test_amqp_refusal_ends_connection.py."""
    with AmqpPeer(PeerFlavour.RABBITMQ) as made:
        refusing: list[bool] = []
        routing = made._engine.routing
        real_route, real_settle = routing.route, amqp_peer._settle

        def route(target: Any, encoded: bytes, message: Any) -> None:
            if message.body == REFUSED:
                refusing.append(True)
                return
            real_route(target, encoded, message)

        def settle(delivery: Any, state: int, condition: Any = None, data: Any = None) -> None:
            if refusing and state == ProtonDelivery.ACCEPTED:
                refusing.clear()
                real_settle(
                    delivery,
                    ProtonDelivery.REJECTED,
                    Condition("amqp:resource-limit-exceeded", "queue full"),
                )
                return
            real_settle(delivery, state, condition, data)

        monkeypatch.setattr(routing, "route", route)
        monkeypatch.setattr(amqp_peer, "_settle", settle)
        yield made


@pytest.fixture
def transport(peer: AmqpPeer) -> Iterator[Transport]:
    made = open_transport(f"amqp://127.0.0.1:{peer.port}", {})
    made.connect()
    yield made
    made.close()


def test_a_refused_copy_leaves_its_own_original_alone_unaccepted(
    peer: AmqpPeer, transport: Transport
) -> None:
    assert not transport.capabilities.atomic_forward
    source, target = f"src.{uuid.uuid4().hex[:8]}", f"dst.{uuid.uuid4().hex[:8]}"
    inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
    transport.subscribe(source, selector=None, prefetch=10, on_delivery=inbox.put)
    for n in range(3):
        transport.send(source, WireMessage(body=f"m{n}", properties={"tenantUUID": "org-a"}))
    delivered = [inbox.get(timeout=10) for _ in range(3)]
    bodies = ["copy 0", REFUSED, "copy 2"]
    with pytest.raises(PartlyForwardedError, match="1 refused") as raised:
        transport.send_then_ack_many(
            [
                (delivery, [Outgoing(target, WireMessage(body=body, properties={}))])
                for delivery, body in zip(delivered, bodies, strict=True)
            ]
        )
    assert raised.value.forwarded == [delivered[0], delivered[2]]
    assert sorted(str(m.body) for m in peer.messages(target)) == ["copy 0", "copy 2"]
    # Only the refused one's original is still the consumer's to settle.
    assert wait_until(lambda: peer.depth(source) == 1)
    assert transport.is_live(delivered[1])
    transport.ack(delivered[1])
    assert wait_until(lambda: peer.depth(source) == 0)


def test_when_every_copy_is_refused_the_broker_error_itself_is_raised(
    peer: AmqpPeer, transport: Transport
) -> None:
    source = f"src.{uuid.uuid4().hex[:8]}"
    inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
    transport.subscribe(source, selector=None, prefetch=10, on_delivery=inbox.put)
    transport.send(source, WireMessage(body="m", properties={"tenantUUID": "org-a"}))
    delivery = inbox.get(timeout=10)
    with pytest.raises(Exception, match="rejected the message") as raised:
        transport.send_then_ack(
            delivery, [Outgoing("dst", WireMessage(body=REFUSED, properties={}))]
        )
    assert not isinstance(raised.value, PartlyForwardedError)
