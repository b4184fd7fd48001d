"""One established STOMP connection (a Link) and the one chunked write every frame the toolkit
encodes goes through.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Mapping
from typing import Any, Final

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

WRITE_CHUNK: Final = 64 * 1024
_POLL_S: Final = 0.005
_QUEUED_MAX: Final = 64
"""Writes queued to stomp.py's io thread (TLS) at most: 4 MiB of chunks, far below the few
hundred at which stomp.py's queue blocks."""


class Link:
    """One established connection, as taken for one operation: what is written through it goes
    to that connection or fails; it never reaches a later one.

    Every write is bounded by write_timeout_s of no progress, and any write that fails drops the
    connection (part of a frame may be out), so a broker that stops reading ends in an error and
    a reconnection, never in a writer blocked for good."""

    __slots__ = ("_conn", "_queued", "_write_timeout_s", "flavour", "generation")

    def __init__(
        self, conn: Any, generation: int, flavour: BrokerFlavour, write_timeout_s: float
    ) -> None:
        self._conn = conn
        self.generation = generation
        self.flavour = flavour
        self._write_timeout_s = write_timeout_s
        # TLS: once the handshake is done stomp.py makes the socket non-blocking, and its io
        # thread writes what is queued as the socket takes it. A write of our own would fail as
        # soon as the socket's buffer is full, and race that thread for the TLS connection.
        self._queued = not conn.transport.blocking

    def write(self, data: bytes, what: str) -> None:
        """One write of data; a failure is a TransportError naming what was written, and drops
        the connection."""
        transport = self._conn.transport
        try:
            if self._queued:
                self._enqueue(transport, data)
            else:
                # Bounded by the socket's send timeout (connection._tune_socket).
                transport.send(data)
        except (BlockingIOError, TimeoutError) as exc:
            self.drop()
            raise TransportError(
                f"{what} failed: the broker read nothing for {self._write_timeout_s}s "
                "(confirm_timeout_s; is it frozen, or its host unreachable?); the connection is "
                "dropped"
            ) from exc
        except Exception as exc:
            self.drop()
            if isinstance(exc, TransportError):
                raise
            raise TransportError(f"{what} failed: {exc}") from exc

    def _enqueue(self, transport: Any, data: bytes) -> None:
        """Queue data for stomp.py's io thread once fewer than _QUEUED_MAX writes wait there,
        or raise BlockingIOError when that took write_timeout_s. stomp.py's queue itself blocks
        for good once a few hundred wait (a socket pair's buffer), and its heart-beat thread,
        which queues too, would block with it."""
        deadline: float | None = None
        while transport.running:
            if transport.send_queue.qsize() < _QUEUED_MAX:
                transport.send_queue.put(data)
                return
            now = time.monotonic()
            deadline = deadline or now + self._write_timeout_s
            if now >= deadline:
                raise BlockingIOError("the broker took nothing queued")
            time.sleep(_POLL_S)
        raise TransportError("the connection is closed")

    def subscribe(self, destination: str, sub_id: str, headers: Mapping[str, str]) -> None:
        try:
            self._conn.subscribe(
                destination, sub_id, ack="client-individual", headers=dict(headers)
            )
        except Exception:
            self.drop()  # as for write(): part of the frame may be out
            raise

    def unsubscribe(self, sub_id: str) -> None:
        try:
            self._conn.unsubscribe(sub_id)
        except Exception:
            self.drop()
            raise

    def disconnect(self, wait_s: float) -> None:
        """Send DISCONNECT, then drop the connection unless stomp.py closed it on the broker's
        receipt within wait_s.

        stomp.py alone closes the socket only on that receipt: a broker that never sends it
        would keep the connection open on heart-beats, and with it every unacknowledged delivery
        of the connection, out of reach of any other consumer."""
        transport = self._conn.transport
        try:
            self._conn.disconnect()
            deadline = time.monotonic() + wait_s
            while transport.socket is not None and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        finally:
            self.drop()

    def drop(self) -> None:
        """End the connection now, without DISCONNECT, as a crash would: the broker takes back
        every unacknowledged delivery of the connection. No frame follows a DISCONNECT this way;
        Artemis 2.44 may apply an ACK written after one, or count its message in flight with no
        consumer holding it (docs/interop.md).

        The socket is shut down and stomp.py's io thread told to stop; that thread then wakes
        (its socket has ended), closes the socket and reports the connection lost. stomp.py's
        own disconnect_socket is not used: on TLS it waits, with no timeout, for the broker's
        TLS close, which a frozen broker never sends, and it empties the selector the io thread
        waits on without waking it."""
        transport = self._conn.transport
        sock = transport.socket
        transport.running = False
        if sock is not None:
            with contextlib.suppress(OSError):  # already shut down or closed
                # The plain socket's shutdown, also under TLS: no TLS close to wait for.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class FrameWriter:
    """Frames gathered into socket writes of about 64 KiB: the broker starts on the first chunk
    while the rest follow, and no single write holds the socket for long."""

    __slots__ = ("_chunk", "_link", "_size", "_what")

    def __init__(self, link: Link, what: str) -> None:
        self._link = link
        self._what = what
        self._chunk: list[bytes] = []
        self._size = 0

    def push(self, frame: bytes) -> None:
        self._chunk.append(frame)
        self._size += len(frame)
        if self._size >= WRITE_CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self._chunk:
            return
        data = b"".join(self._chunk)
        self.clear()
        self._link.write(data, self._what)

    def clear(self) -> None:
        """Forget the frames not written yet."""
        self._chunk, self._size = [], 0
