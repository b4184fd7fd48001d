"""Failover over AMQP 1.0: a transport given a list of brokers (BOOST_BROKER_URL=amqp://a,b)
moves to the next one when the one it uses goes away: the next send is confirmed there and its
subscriptions are attached there again, without the caller doing anything. Two in-process peers
stand for a live broker and its backup (each with its own store: what the live one held stays
there, as it would until a shared store or replication hands it over)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.transports.base import Delivery, Transport
from tests.conftest import wait_until

WAITS = {
    "BOOST_BROKER_RECONNECT_INITIAL_S": "0.05",
    "BOOST_BROKER_RECONNECT_MAX_S": "0.2",
    "BOOST_BROKER_RECONNECT_WAIT_S": "20",
    "BOOST_BROKER_CONNECT_TIMEOUT_S": "10",
}


def message(text: str) -> WireMessage:
    return WireMessage(body=text, properties={"tenantUUID": "org-A"})


@pytest.fixture
def backup() -> Iterator[AmqpPeer]:
    with AmqpPeer() as made:
        yield made


@pytest.fixture
def live() -> Iterator[AmqpPeer]:
    made = AmqpPeer()
    yield made
    made.close()  # closing twice is a no-op: the test closes it first


@pytest.fixture
def transport(live: AmqpPeer, backup: AmqpPeer) -> Iterator[Transport]:
    url = f"amqp://127.0.0.1:{live.port},127.0.0.1:{backup.port}"
    opened = open_transport(url, WAITS)
    opened.connect()
    yield opened
    opened.close()


def test_sends_and_subscriptions_move_to_the_next_broker_of_the_list(
    live: AmqpPeer, backup: AmqpPeer, transport: Transport
) -> None:
    queue = f"tenant.org-A.cmd.{uuid.uuid4().hex[:8]}"
    received: list[str] = []
    lock = threading.Lock()

    def on_delivery(delivery: Delivery) -> None:
        with lock:
            received.append(str(delivery.body))
        transport.ack(delivery)

    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=on_delivery)
    transport.send(queue, message("before"))
    assert wait_until(lambda: received == ["before"], timeout=20)
    assert backup.connections_opened == 0, "the first broker of the list is used first"

    live.close()  # the live broker goes away: its sockets close with it
    # A send racing the loss may go out on the dying connection and raise, unconfirmed (the
    # caller's to retry); once the transport has moved on, sends are confirmed by the backup.
    assert wait_until(lambda: backup.connections_opened >= 1, timeout=20)
    transport.send(queue, message("after"))
    assert wait_until(lambda: received == ["before", "after"], timeout=20)
    assert wait_until(lambda: backup.depth(queue) == 0), "acknowledged on the backup"
