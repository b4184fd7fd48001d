"""Subscriptions spread over connections ("lines", stomp/subscriptions.py), without a broker: how
many each carries on Artemis and on Classic, that a delivery is acknowledged on the connection
that made it and nowhere else, and that a line that reconnects re-creates its own subscriptions.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from stomp.utils import Frame

from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.errors import ConfigError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import SubscribeRequest
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from boost_tenancy.transports.stomp.flavour import ARTEMIS_SUBSCRIPTIONS_PER_CONNECTION
from tests.conftest import Inbox, wait_until
from tests.unit.test_stomp_artemis import delivery
from tests.unit.test_stomp_connect import RecordingSocket, recording_transport

ARTEMIS = "ActiveMQ-Artemis/2.44.0 ActiveMQ Artemis Messaging Engine"
CLASSIC = "ActiveMQ/5.17.2"
_ids = itertools.count(1)


def requests(count: int, inbox: Inbox | None = None) -> list[SubscribeRequest]:
    handler = inbox if inbox is not None else Inbox()
    return [SubscribeRequest(f"tenant.t{n}.in", None, 1, handler) for n in range(count)]


def subscribed(sock: RecordingSocket) -> list[str]:
    """The subscription ids of the SUBSCRIBE frames written on sock."""
    return [f.headers["id"] for f in sock.frames() if f.cmd == "SUBSCRIBE"]


def frames(sock: RecordingSocket, command: str) -> list[Any]:
    return [f for f in sock.frames() if f.cmd == command]


def deliver(sock: RecordingSocket, sub_id: str) -> None:
    """A MESSAGE for sub_id arrives on sock, as a broker would send it."""
    n = next(_ids)
    headers = {
        "subscription": sub_id,
        "message-id": f"m-{n}",
        "ack": f"ack-{n}",
        "destination": "/queue/in",
        "tenantUUID": "t0",
    }
    sock.listener.on_message(Frame("MESSAGE", headers, b"body"))


def lines_transport(
    monkeypatch: pytest.MonkeyPatch, server: str, per_connection: int | None
) -> tuple[StompTransport, list[RecordingSocket]]:
    settings = StompSettings(
        confirm_timeout_s=2,
        reconnect_wait_s=0,
        reconnect_initial_s=0.01,
        reconnect_max_s=0.01,
        subscriptions_per_connection=per_connection,
    )
    transport, sockets = recording_transport(monkeypatch, server, settings=settings)
    transport.connect()
    return transport, sockets


@pytest.fixture
def lined(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[StompTransport, list[RecordingSocket]]]:
    """A transport to Artemis with at most 2 subscriptions on each connection."""
    transport, sockets = lines_transport(monkeypatch, ARTEMIS, 2)
    yield transport, sockets
    transport.close()


def test_artemis_gets_at_most_its_figure_of_subscriptions_on_each_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, sockets = lines_transport(monkeypatch, ARTEMIS, None)
    try:
        per = ARTEMIS_SUBSCRIPTIONS_PER_CONNECTION
        subs = transport.subscribe_many(requests(2 * per + 7))
        # The transport's own connection carries sends only: Artemis closes a connection that
        # sent a message it refused (stomp/sending.py).
        assert [len(subscribed(sock)) for sock in sockets] == [0, per, per, 7]
        assert sorted(s for sock in sockets for s in subscribed(sock)) == sorted(s.id for s in subs)
        assert all(transport.is_open(sub) for sub in subs)
        assert transport.is_connected
    finally:
        transport.close()
    assert not any(sock.running for sock in sockets), "close() ends every connection"


def test_classic_keeps_every_subscription_on_one_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, sockets = lines_transport(monkeypatch, CLASSIC, None)
    try:
        transport.subscribe_many(requests(ARTEMIS_SUBSCRIPTIONS_PER_CONNECTION + 50))
        assert [len(subscribed(sock)) for sock in sockets] == [
            ARTEMIS_SUBSCRIPTIONS_PER_CONNECTION + 50
        ]
    finally:
        transport.close()


def test_a_delivery_is_acknowledged_on_the_connection_that_made_it(
    lined: tuple[StompTransport, list[RecordingSocket]],
) -> None:
    transport, sockets = lined
    inbox = Inbox()
    subs = transport.subscribe_many(requests(5, inbox))
    assert [len(subscribed(sock)) for sock in sockets] == [0, 2, 2, 1]
    deliver(sockets[2], subs[3].id)
    [delivery] = inbox.items  # handed on on the receiving thread, here the caller's
    assert delivery.token[0] == 2, "the token names the line"
    transport.ack(delivery)
    assert wait_until(lambda: len(frames(sockets[2], "ACK")) == 1), "the ACK on line 2"
    assert frames(sockets[2], "ACK")[0].headers["id"] == delivery.token[2]
    assert not any(frames(sockets[i], "ACK") for i in (0, 1, 3))


def test_a_line_that_reconnects_re_creates_its_own_subscriptions_only(
    lined: tuple[StompTransport, list[RecordingSocket]],
) -> None:
    transport, sockets = lined
    inbox = Inbox()
    subs = transport.subscribe_many(requests(5, inbox))
    deliver(sockets[2], subs[2].id)
    [stale] = inbox.items
    sockets[2].running = False
    sockets[2].listener.on_disconnected()  # line 2's broker connection is lost
    # The line is connected before its on_open writes the SUBSCRIBE frames: wait for those.
    assert wait_until(
        lambda: len(sockets) == 5 and transport.is_connected and len(subscribed(sockets[4])) >= 2
    ), "reconnected and subscribed again"
    assert not transport.is_live(stale), "a delivery of the lost connection"
    assert subscribed(sockets[4]) == [subs[2].id, subs[3].id]
    assert all(transport.is_open(sub) for sub in subs)
    transport.ack(stale)  # of the lost connection: the broker has taken it back
    transport.close()
    assert not any(frames(sock, "ACK") for sock in sockets), "nothing acked elsewhere"


def test_an_unsubscribed_place_is_taken_by_the_next_subscription(
    lined: tuple[StompTransport, list[RecordingSocket]],
) -> None:
    transport, sockets = lined
    subs = transport.subscribe_many(requests(4))
    transport.unsubscribe(subs[1])
    assert frames(sockets[1], "UNSUBSCRIBE")[0].headers["id"] == subs[1].id
    [again] = transport.subscribe_many(requests(1))
    assert subscribed(sockets[1])[-1] == again.id
    assert len(sockets) == 3, "no new connection while one has room"


def test_forwards_of_deliveries_of_two_connections_commit_each_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Classic acks inside the transaction (atomic_forward): one per connection, since an ACK
    commits only on the connection that received its message."""
    transport, sockets = lines_transport(monkeypatch, CLASSIC, 1)
    inbox = Inbox()
    try:
        subs = transport.subscribe_many(requests(2, inbox))
        deliver(sockets[0], subs[0].id)
        deliver(sockets[1], subs[1].id)
        first, second = sorted(inbox.items, key=lambda d: d.token[0])
        copy = WireMessage(body="copy", properties={})
        done = transport.send_then_ack_many([(first, [("out", copy, 0)]), (second, [])])
        assert done == [first, second]
        for sock, delivery in zip(sockets, (first, second), strict=True):
            [ack] = frames(sock, "ACK")
            assert ack.headers["id"] == delivery.token[2]
            assert ack.headers["transaction"] == frames(sock, "COMMIT")[0].headers["transaction"]
    finally:
        transport.close()


def test_a_token_of_another_transport_is_refused(
    lined: tuple[StompTransport, list[RecordingSocket]],
) -> None:
    transport, _ = lined
    foreign = dataclasses.replace(delivery("ack"), token=(7, 1, "ack"))
    with pytest.raises(TransportError, match="not made by this STOMP transport"):
        transport.ack(foreign)


def test_subscriptions_per_connection_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="subscriptions_per_connection must be at least 1"):
        StompSettings(subscriptions_per_connection=0)


def test_the_figure_is_read_from_the_environment() -> None:
    assert stomp_settings_from_env({}).subscriptions_per_connection is None
    env = {"BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION": "25"}
    assert stomp_settings_from_env(env).subscriptions_per_connection == 25
    unset = {"BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION": "0"}
    assert stomp_settings_from_env(unset).subscriptions_per_connection is None
    for raw in ("-1", "many"):
        with pytest.raises(ConfigError, match="BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION"):
            stomp_settings_from_env({"BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION": raw})


def test_artemis_keeps_subscriptions_off_the_sending_connection_while_it_reconnects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker of the transport's own connection is remembered while it is down: a
    subscription made then goes on a connection of its own, not on the one every send uses."""
    settings = StompSettings(
        confirm_timeout_s=2, reconnect_wait_s=0, reconnect_initial_s=30, reconnect_max_s=30
    )
    transport, sockets = recording_transport(monkeypatch, ARTEMIS, settings=settings)
    transport.connect()
    try:
        sockets[0].running = False
        sockets[0].listener.on_disconnected()  # the transport's own connection is lost
        [sub] = transport.subscribe_many(requests(1))
        assert transport._subscriptions.connection_of(sub) is not transport._connection
        assert sum(len(subscribed(sock)) for sock in sockets) == 1
        assert transport.is_open(sub)
    finally:
        transport.close()
