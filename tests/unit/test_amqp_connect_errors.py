"""A socket that cannot even start connecting fails that connection attempt, never the transport.

proton connects its sockets on the event loop's thread, and an error other than "in progress"
(network or host unreachable, an address family the machine lacks) raises there, out of its
container. It once ended the loop for good: the transport read as closed from then on and never
reconnected, and the next addresses of a failover list were never tried. Here proton's connect
raises ENETUNREACH for one port, as it did for a real unreachable address.

While the broker is away, a send waits at most reconnect_wait_s + confirm_timeout_s and then
lets go of what it would have sent; with reconnect_wait_s 0, or once the transport is closed, it
fails at once. Before, each kept its encoded message until the connection opened again, and one
after close waited out both timeouts.
"""

from __future__ import annotations

import errno
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proton._io import IO

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.transports.amqp import AmqpTransport
from tests.conftest import wait_until

WAITS = {
    "BOOST_BROKER_RECONNECT_INITIAL_S": "0.05",
    "BOOST_BROKER_RECONNECT_MAX_S": "0.2",
    "BOOST_BROKER_RECONNECT_WAIT_S": "20",
    "BOOST_BROKER_CONNECT_TIMEOUT_S": "10",
}


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A port whose connect raises at once, as an unreachable network's does."""
    port = unused_port()
    real_connect = IO.connect

    def connect(addr: Any) -> socket.socket:
        if addr[4][1] == port:
            raise OSError(errno.ENETUNREACH, "Network is unreachable")
        return real_connect(addr)

    monkeypatch.setattr(IO, "connect", staticmethod(connect))
    yield port


def connected(peer: AmqpPeer, **waits: str) -> AmqpTransport:
    """A transport to peer, connected, with WAITS and the waits given (reconnect_wait_s="0.1"
    sets BOOST_BROKER_RECONNECT_WAIT_S)."""
    env = {**WAITS, **{f"BOOST_BROKER_{name.upper()}": value for name, value in waits.items()}}
    transport = open_transport(f"amqp://127.0.0.1:{peer.port}", env)
    assert isinstance(transport, AmqpTransport)
    transport.connect()
    return transport


def message(text: str) -> WireMessage:
    return WireMessage(body=text, properties={"tenantUUID": "org-A"})


def test_the_first_address_failing_to_connect_moves_to_the_next(unreachable: int) -> None:
    with AmqpPeer() as peer:
        transport = open_transport(f"amqp://127.0.0.1:{unreachable},127.0.0.1:{peer.port}", WAITS)
        assert isinstance(transport, AmqpTransport)
        transport.connect()
        try:
            queue = f"tenant.org-A.cmd.{uuid.uuid4().hex[:8]}"
            transport.send(queue, message("sent"))
            assert peer.depth(queue) == 1
        finally:
            transport.close()


def test_a_reconnect_failing_to_connect_goes_on_to_the_next_broker(unreachable: int) -> None:
    live = AmqpPeer()
    try:
        with AmqpPeer() as backup:
            url = f"amqp://127.0.0.1:{live.port},127.0.0.1:{unreachable},127.0.0.1:{backup.port}"
            transport = open_transport(url, WAITS)
            transport.connect()
            try:
                queue = f"tenant.org-A.cmd.{uuid.uuid4().hex[:8]}"
                transport.send(queue, message("before"))
                live.close()
                # The live broker refuses, the unreachable one raises, the backup answers.
                assert wait_until(lambda: backup.connections_opened >= 1, timeout=20)
                transport.send(queue, message("after"))
                assert backup.depth(queue) == 1
                assert transport.is_connected
            finally:
                transport.close()
    finally:
        live.close()


def test_sends_while_the_broker_is_gone_fail_and_leave_nothing_behind() -> None:
    """Each send waits reconnect_wait_s + confirm_timeout_s, then fails; what it would have sent
    is let go at once, however long the broker stays away."""
    peer = AmqpPeer()
    transport = connected(peer, reconnect_wait_s="0.1", confirm_timeout_s="0.1")
    try:
        queue = f"tenant.org-A.cmd.{uuid.uuid4().hex[:8]}"
        peer.close()
        assert wait_until(lambda: not transport.is_connected)
        for _ in range(5):
            with pytest.raises(TransportError, match="no confirmation from the broker"):
                transport.send(queue, message("x" * 100_000))
        engine = transport._engine
        assert wait_until(lambda: not engine._waiting_for_open), "nothing kept for a later open"
    finally:
        transport.close()


def test_with_no_reconnect_wait_a_send_while_the_broker_is_gone_fails_at_once() -> None:
    peer = AmqpPeer()
    transport = connected(peer, reconnect_wait_s="0", confirm_timeout_s="60")
    try:
        peer.close()
        assert wait_until(lambda: not transport.is_connected)
        with pytest.raises(TransportError, match="the AMQP connection is closed"):
            # Not after the minute of confirm_timeout_s: the connection is not open now.
            run_within(5, lambda: transport.send("tenant.org-A.q", message("now")))
    finally:
        transport.close()


def test_a_send_after_close_fails_at_once() -> None:
    with AmqpPeer() as peer:
        transport = connected(peer, confirm_timeout_s="60")
        transport.close()
        with pytest.raises(TransportError):
            run_within(5, lambda: transport.send("tenant.org-A.q", message("late")))


def run_within(seconds: float, call: Callable[[], object]) -> None:
    """call, on a thread of its own; what it raised is raised here. Fails the test if it has
    not returned within seconds (the waits above are a minute long)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still waiting after {seconds} s"
    if outcome[0] is not None:
        raise outcome[0]


def test_a_transaction_under_way_when_the_connection_is_lost_fails_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No coordinator callback comes for a transaction whose connection is gone: it used to
    wait out reconnect_wait_s + confirm_timeout_s (80 s here) before its caller heard."""
    with AmqpPeer() as peer:
        declared: list[bool] = []
        # The broker takes the declare and never answers it, then the network fails.
        monkeypatch.setattr(
            peer._engine.transfers, "on_control", lambda *_args: declared.append(True)
        )
        transport = connected(peer, confirm_timeout_s="60")
        try:
            batch = [("tenant.org-A.q", message("one")), ("tenant.org-A.q", message("two"))]

            def send_then_lose() -> None:
                network_fails = threading.Thread(
                    target=lambda: (wait_until(lambda: bool(declared)), peer.drop_connections())
                )
                network_fails.start()
                try:
                    transport.send_batch(batch, atomic=True)
                finally:
                    network_fails.join()

            with pytest.raises(TransportError, match="lost"):
                run_within(10, send_then_lose)
            assert peer.depth("tenant.org-A.q") == 0
        finally:
            transport.close()


def test_a_send_the_broker_never_confirms_is_not_confirmed_and_the_connection_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether the broker took it is unknown: NotConfirmedError, which callers leave to
    redelivery (a plain TransportError made them dead-letter a copy the broker may hold), and a
    new connection, so the broker redelivers what the old one held (as over STOMP)."""
    with AmqpPeer() as peer:
        transport = connected(peer, reconnect_wait_s="0.5", confirm_timeout_s="0.5")
        try:
            generation = transport._engine.generation
            monkeypatch.setattr(peer._engine.transfers, "on_transfer", lambda *_args: None)
            with pytest.raises(NotConfirmedError, match="no confirmation from the broker"):
                transport.send("tenant.org-A.q", message("never confirmed"))
            monkeypatch.undo()
            assert wait_until(lambda: transport._engine.generation > generation)
            transport.send("tenant.org-A.q", message("after"))
            assert peer.depth("tenant.org-A.q") == 1
        finally:
            transport.close()
