"""Connecting never hangs: a peer that accepts TCP but never answers CONNECT, or closes before
CONNECTED, makes connect() fail within the receipt timeout (stomp.py's own wait has none)."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from boost_tenancy import StompSettings, StompTransport, TransportError


def serve(behaviour: str) -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            if behaviour == "close":
                conn.recv(1024)
                conn.close()
            else:
                held.append(conn)  # deaf: read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture(params=["deaf", "close"])
def peer_port(request: pytest.FixtureRequest) -> Iterator[int]:
    yield from serve(request.param)


def test_connect_to_a_peer_that_never_completes_fails_within_the_timeout(peer_port: int) -> None:
    transport = StompTransport(StompSettings(port=peer_port, receipt_timeout_s=1.5))
    started = time.monotonic()
    with pytest.raises(TransportError, match=re.escape(f"127.0.0.1:{peer_port}")):
        transport.connect()
    assert time.monotonic() - started < 10
    closed = threading.Thread(target=transport.close, daemon=True)
    closed.start()
    closed.join(5)
    assert not closed.is_alive(), "close() must not block after a failed connect"


def test_connect_to_a_closed_port_fails_with_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = StompTransport(StompSettings(port=port, receipt_timeout_s=1.5))
    with pytest.raises(TransportError, match=re.escape(f"STOMP broker at 127.0.0.1:{port}")):
        transport.connect()
