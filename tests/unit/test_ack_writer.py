"""The acknowledgement writer survives a close whose flush timed out: a connect right after gets
a writer of its own, so no acknowledgement is queued where nothing reads."""

from __future__ import annotations

import threading

from boost_tenancy.transports.stomp.acks import AckWriter
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.link import Link
from tests.conftest import wait_until


class _BlockingSocket:
    """Stands in for stomp.py's transport on a plain socket: each write waits for the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.written: list[bytes] = []
        self.blocking = True

    def send(self, data: bytes) -> None:
        self.gate.wait(10)
        self.written.append(data)


class _Conn:
    def __init__(self, socket: _BlockingSocket) -> None:
        self.transport = socket


class _Connection:
    def __init__(self, link: Link) -> None:
        self.link = link

    def live(self) -> Link:
        return self.link


def test_a_start_after_a_timed_out_stop_gets_a_writer_that_writes() -> None:
    socket = _BlockingSocket()
    connection = _Connection(Link(_Conn(socket), 1, BrokerFlavour.CLASSIC, 30.0))
    writer = AckWriter(lambda index: connection)  # type: ignore[arg-type,return-value]
    writer.start()
    writer.put((0, 1, "a"))  # its write blocks: the broker is not reading
    writer.flush(0.2, stop=True)  # close(): the flush times out
    writer.start()  # connect() at once
    socket.gate.set()  # the blocked write completes; the old writer reaches its stop marker
    writer.put((0, 1, "b"))
    assert wait_until(lambda: len(socket.written) == 2, timeout=5), socket.written
    # The two writers write concurrently: acknowledgements are individual, order is free.
    assert sorted(frame.split(b"\n")[1] for frame in socket.written) == [b"id:a", b"id:b"]
