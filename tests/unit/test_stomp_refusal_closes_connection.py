"""Artemis closes a STOMP connection after the ERROR of a frame it refused, and one tenant's
refused message must cost no other send and no delivery (stomp/sending.py).

Measured on Artemis 2.44.0 (tests/integration/test_artemis_refusal.py): a SEND to a full address
under address-full-policy FAIL is answered by ERROR (with the receipt-id it asked for), and the
connection is closed; a frame that came after it before the close is answered by ERROR
'AMQ339010 Connection is not valid.'; and a durable SEND written before the refused one may have
its RECEIPT cut off by the close although the broker stored it. The peer here answers so.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from stomp.utils import Frame

from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.lost_sends import ConnectionLostError
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.receipts import Receipts
from tests.conftest import Inbox, wait_until
from tests.unit.test_stomp_connect import RecordingSocket, recording_transport

ARTEMIS = b"ActiveMQ-Artemis/2.44.0 ActiveMQ Artemis Messaging Engine"
NOT_VALID = "AMQ339010 Connection is not valid."


class ArtemisPeer:
    """Artemis's answers to SEND frames, over real sockets: a SEND to a queue in `full` is
    refused by ERROR and its connection closed; the RECEIPTs of SENDs to a queue in `held`
    wait on the first connection until it closes (never sent: cut off by the close), while the
    message counts as stored."""

    def __init__(self, *, full: set[str], held: set[str]) -> None:
        self.full = full
        self.held = held
        self.stored: list[tuple[int, str]] = []
        """(connection number, queue) of every SEND taken, in order."""
        self.connections = 0
        self._lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.server.accept()
                with self._lock:
                    self.connections += 1
                    number = self.connections
                self._conns.append(conn)
                threading.Thread(target=self._answer, args=(conn, number), daemon=True).start()

    def _answer(self, conn: socket.socket, number: int) -> None:
        pending = b""
        with contextlib.suppress(OSError), conn:
            conn.recv(4096)
            conn.sendall(b"CONNECTED\nversion:1.2\nsession:1\nserver:" + ARTEMIS + b"\n\n\x00")
            while chunk := conn.recv(65536):
                pending += chunk
                *frames, pending = pending.split(b"\x00")
                for frame in frames:
                    if not self._take(conn, number, frame.strip(b"\r\n")):
                        return  # refused: the broker closes the connection

    def _take(self, conn: socket.socket, number: int, frame: bytes) -> bool:
        receipt = re.search(rb"\nreceipt:([^\n]*)", frame)
        if not frame.startswith(b"SEND"):
            if receipt:
                conn.sendall(b"RECEIPT\nreceipt-id:" + receipt.group(1) + b"\n\n\x00")
            return True
        queue = re.search(rb"\ndestination:/queue/([^\n]*)", frame)
        name = queue.group(1).decode() if queue else ""
        if name in self.full:
            answer = b"ERROR\nmessage:AMQ339011 Error sending message\n"
            if receipt:
                answer += b"receipt-id:" + receipt.group(1) + b"\n"
            conn.sendall(answer + b"\n\x00")
            return False
        self.stored.append((number, name))
        if receipt and not (name in self.held and number == 1):
            conn.sendall(b"RECEIPT\nreceipt-id:" + receipt.group(1) + b"\n\n\x00")
        return True

    def close(self) -> None:
        self.server.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


def peer_and_transport(full: set[str], held: set[str]) -> tuple[ArtemisPeer, StompTransport]:
    peer = ArtemisPeer(full=full, held=held)
    transport = StompTransport(
        StompSettings(
            host="127.0.0.1",
            port=peer.port,
            confirm_timeout_s=5,
            reconnect_wait_s=5,
            reconnect_initial_s=0.01,
            reconnect_max_s=0.05,
        )
    )
    transport.connect()
    return peer, transport


@pytest.fixture
def artemis() -> Iterator[tuple[ArtemisPeer, StompTransport]]:
    peer, transport = peer_and_transport(full={"full"}, held={"slow"})
    yield peer, transport
    transport.close()
    peer.close()


def message(body: str) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": "org-a"})


def test_a_send_under_way_when_another_is_refused_is_sent_again_and_confirmed(
    artemis: tuple[ArtemisPeer, StompTransport],
) -> None:
    peer, transport = artemis
    errors: list[BaseException] = []

    def send_slow() -> None:
        try:
            transport.send("slow", message("under way"))
        except BaseException as exc:
            errors.append(exc)

    under_way = threading.Thread(target=send_slow)
    under_way.start()
    assert wait_until(lambda: (1, "slow") in peer.stored), "the first send never arrived"
    with pytest.raises(TransportError, match="AMQ339011") as refused:
        transport.send("full", message("refused"))
    assert not isinstance(refused.value, ConnectionLostError)
    under_way.join(10)
    assert errors == [], "a send lost with the refusal's connection failed"
    # Stored twice: its RECEIPT was cut off by the close (the same boostMessageId each time).
    assert [n for n, name in peer.stored if name == "slow"] == [1, 2]


def test_a_queue_that_refused_is_sent_to_on_a_second_connection_until_it_takes_messages(
    artemis: tuple[ArtemisPeer, StompTransport],
) -> None:
    peer, transport = artemis
    with pytest.raises(TransportError, match="AMQ339011"):
        transport.send("full", message("first"))  # closes connection 1: the transport's own
    transport.send("other", message("after"))
    assert peer.connections == 2
    with pytest.raises(TransportError, match="AMQ339011"):
        transport.send("full", message("second"))  # on a connection of its own (3)
    assert peer.connections == 3
    transport.send("other", message("still"))
    assert [n for n, name in peer.stored if name == "other"] == [2, 2], (
        "the second refusal closed the transport's own connection"
    )
    peer.full.clear()
    transport.send("full", message("taken"))  # its connection reconnected (4)
    transport.send("full", message("back"))
    assert [n for n, name in peer.stored if name == "full"][-2:] == [4, 2], (
        "a queue that takes messages again goes back to the transport's own connection"
    )


def test_subscriptions_stay_when_a_send_is_refused(
    artemis: tuple[ArtemisPeer, StompTransport],
) -> None:
    peer, transport = artemis
    sub = transport.subscribe("in", selector=None, prefetch=1, on_delivery=Inbox())
    assert peer.connections == 2, "the subscription went on a connection of its own"
    with pytest.raises(TransportError, match="AMQ339011"):
        transport.send("full", message("refused"))
    assert transport.is_open(sub), "the refusal closed the subscription's connection"


def test_an_error_for_a_frame_after_the_refused_one_is_a_loss_not_a_refusal() -> None:
    receipts = Receipts(timeout_s=1)
    pending = receipts.expect(1)
    receipts.refused(1, pending.id, NOT_VALID, for_the_connection=True)
    with pytest.raises(ConnectionLostError, match="Connection is not valid"):
        receipts.wait(pending, "send")
    assert BrokerFlavour.ARTEMIS.refused_with_its_connection(NOT_VALID)
    assert not BrokerFlavour.ARTEMIS.refused_with_its_connection("AMQ339011 Error sending")
    assert not BrokerFlavour.CLASSIC.refused_with_its_connection(NOT_VALID)


class _Silent(RecordingSocket):
    """Takes frames and never answers a receipt."""

    def send(self, data: bytes) -> None:
        self.writes.append(data)


def test_a_forward_whose_copies_go_unconfirmed_gives_up_the_originals_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copies go on the transport's own connection, the originals came on another: when
    whether the broker took the copies is unknown, the originals' connection is given up too,
    so the broker redelivers them rather than holding them unacknowledged for good."""
    settings = StompSettings(confirm_timeout_s=0.3, reconnect_wait_s=0, reconnect_initial_s=5)
    transport, sockets = recording_transport(monkeypatch, ARTEMIS.decode(), settings=settings)
    transport.connect()
    inbox = Inbox()
    try:
        transport.subscribe("in", selector=None, prefetch=1, on_delivery=inbox)
        originals: Any = sockets[1]
        originals.listener.on_message(message_frame("sub-1"))
        [delivery] = inbox.items
        sockets[0].__class__ = _Silent  # the transport's own connection stops answering
        started = time.monotonic()
        with pytest.raises(NotConfirmedError):
            transport.send_then_ack(delivery, [("out", message("copy"), 0)])
        assert time.monotonic() - started < 3
        assert not transport.is_live(delivery), "the original's connection was kept"
    finally:
        transport.close()


def message_frame(sub_id: str) -> Frame:
    headers = {
        "subscription": sub_id,
        "message-id": "m-1",
        "ack": "a-1",
        "destination": "/queue/in",
        "tenantUUID": "org-a",
    }
    return Frame("MESSAGE", headers, b"body")
