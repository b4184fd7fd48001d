"""Subscriptions spread over several connections (stomp/subscriptions.py) against the real
brokers: each connection delivers its own subscriptions' messages and takes their
acknowledgements, and one that is lost re-creates its subscriptions and gets back what it held.

On Artemis the last needs the broker's StompLossPlugin, which every Artemis of the project runs:
without it the broker's two cleanups of the lost connection race, and held messages stayed given
to no one in 3 of 19 runs (docs/interop.md, test_stomp_lost_connection_broker.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import SubscribeRequest
from boost_tenancy.transports.stomp import StompSettings, StompSubscription, StompTransport
from tests.conftest import Inbox, unique_queue, wait_until

pytestmark = [pytest.mark.broker]

PER_CONNECTION = 3


@pytest.fixture
def queues() -> list[str]:
    return [unique_queue("lines") for _ in range(2 * PER_CONNECTION + 1)]


@pytest.fixture
def lined(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    """A transport putting at most PER_CONNECTION subscriptions on each connection."""
    transport = StompTransport(
        dataclasses.replace(stomp_settings, subscriptions_per_connection=PER_CONNECTION)
    )
    transport.connect()
    yield transport
    transport.close()


def subscribe(
    transport: StompTransport, queues: list[str], inbox: Inbox
) -> list[StompSubscription]:
    return transport.subscribe_many([SubscribeRequest(q, None, 10, inbox) for q in queues])


def send_each(transport: StompTransport, queues: list[str], body: str) -> None:
    transport.send_batch([(q, WireMessage(body=f"{body}:{q}", properties={})) for q in queues])


def test_each_connection_delivers_and_acknowledges_its_own_subscriptions(
    stomp_settings: StompSettings, lined: StompTransport, queues: list[str]
) -> None:
    inbox = Inbox()
    subs = subscribe(lined, queues, inbox)
    connections = {id(lined._subscriptions.connection_of(sub)) for sub in subs}
    assert len(connections) == 3, "7 subscriptions, at most 3 on each connection"
    send_each(lined, queues, "first")
    assert wait_until(lambda: len(inbox) == len(queues)), inbox.bodies()
    assert sorted(map(str, inbox.bodies())) == sorted(f"first:{q}" for q in queues)
    for delivery in inbox.items:
        lined.ack(delivery)
    lined.close()

    # Each ACK went to the connection that received its message: nothing comes back. An
    # unacknowledged message would be delivered again before the second one of its queue.
    again = StompTransport(stomp_settings)
    again.connect()
    later = Inbox()
    try:
        subscribe(again, queues, later)
        send_each(again, queues, "second")
        assert wait_until(lambda: len(later) >= len(queues)), later.bodies()
        assert sorted(map(str, later.bodies())) == sorted(f"second:{q}" for q in queues)
    finally:
        again.close()


def test_a_lost_connection_re_creates_its_subscriptions_and_gets_back_what_it_held(
    lined: StompTransport, queues: list[str]
) -> None:
    inbox = Inbox()
    subs = subscribe(lined, queues, inbox)
    send_each(lined, queues, "held")
    assert wait_until(lambda: len(inbox) == len(queues)), inbox.bodies()
    # The second connection is lost with its three deliveries unacknowledged; the others ack.
    second = lined._subscriptions.connection_of(subs[PER_CONNECTION])
    on_second = {subs[i].id for i in range(PER_CONNECTION, 2 * PER_CONNECTION)}
    for delivery in inbox.items:
        if delivery.subscription_id not in on_second:
            lined.ack(delivery)
    link = second.live()
    assert link is not None
    second.abandon(link, "lost for the test")
    expected = len(queues) + PER_CONNECTION
    assert wait_until(lambda: len(inbox) >= expected, timeout=60), inbox.bodies()
    assert len(inbox) == expected, inbox.bodies()
    back = inbox.items[len(queues) :]
    assert {d.subscription_id for d in back} == on_second
    assert all(d.redelivered for d in back), "the broker took them back and delivered them again"
    assert all(lined.is_open(sub) for sub in subs)
    for delivery in back:
        lined.ack(delivery)
