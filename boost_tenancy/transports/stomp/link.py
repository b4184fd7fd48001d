"""One established STOMP connection (a Link): the socket's options (tune_socket), the one
chunked, bounded write every frame the toolkit encodes goes through, and the end of the
connection without waiting on the broker.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
import time
from typing import Any, Final

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.lost_sends import ConnectionLostError
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

WRITE_CHUNK: Final = 64 * 1024
_POLL_S: Final = 0.005
_QUEUED_MAX: Final = 64
"""Writes queued to stomp.py's io thread (TLS) at most: 4 MiB of chunks, far below the few
hundred at which stomp.py's queue blocks."""


def tune_socket(conn: Any, send_timeout_s: float) -> None:
    """Turn Nagle's algorithm off on the connection's socket, and bound each write on it.

    Nagle: stomp.py leaves it on, and a frame written while an earlier one is not yet
    acknowledged by TCP (an ACK after a SEND, a subscription after another) waits for the
    broker's delayed acknowledgement, about 40 ms on Linux. The broker's side of the same problem
    is its own setting (docs/operations.md, "Nagle's algorithm").

    Writes: stomp.py writes with no timeout, so a broker that stops reading (frozen, or its host
    gone without a reset) once the socket's buffers are full would block the writer for good,
    and stomp.py's heart-beat thread with it, which waits for the same socket lock before it
    checks for the broker's heart-beats. A write that moves nothing for send_timeout_s fails
    instead (and Link drops the connection).
    """
    sock = getattr(conn.transport, "socket", None)
    if sock is not None:
        with contextlib.suppress(OSError):  # not a TCP socket, or already closed
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for value in _send_timeout_values(send_timeout_s):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
            except OSError:
                continue
            break


def _send_timeout_values(seconds: float) -> list[bytes | int]:
    """SO_SNDTIMEO's value for seconds, in each form the platform may take, to try in turn: a
    DWORD of milliseconds on Windows, else a struct timeval of C longs, or of 64-bit fields
    (32-bit Linux with a 64-bit time_t). Kept within 1 ms and a day: zero would mean no bound,
    and a huge one does not pack."""
    seconds = min(max(seconds, 0.001), 86_400.0)
    if sys.platform == "win32":
        return [round(seconds * 1000)]
    whole = int(seconds)
    micros = int((seconds - whole) * 1_000_000)
    return [struct.pack("@ll", whole, micros), struct.pack("@qq", whole, micros)]


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
        """One write of data; a failure is a TransportError naming what was written (a
        ConnectionLostError unless the broker stopped reading), and drops the connection."""
        transport = self._conn.transport
        try:
            if self._queued:
                self._enqueue(transport, data)
            else:
                # Bounded by the socket's send timeout (tune_socket).
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
            raise ConnectionLostError(f"{what} failed: {exc}") from exc

    def _enqueue(self, transport: Any, data: bytes) -> None:
        """Queue data for stomp.py's io thread once fewer than _QUEUED_MAX writes wait there,
        or raise BlockingIOError when that took write_timeout_s. stomp.py's queue itself blocks
        for good once a few hundred wait (a socket pair's buffer), and its heart-beat thread,
        which queues too, would block with it."""
        deadline: float | None = None
        while transport.running and transport.send_queue is not None:
            if transport.send_queue.qsize() < _QUEUED_MAX:
                transport.send_queue.put(data)
                return
            now = time.monotonic()
            deadline = deadline or now + self._write_timeout_s
            if now >= deadline:
                raise BlockingIOError("the broker took nothing queued")
            time.sleep(_POLL_S)
        raise ConnectionLostError("the connection is closed")

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
        consumer holding it (docs/interop.md)."""
        end_socket(self._conn.transport)


def end_socket(transport: Any) -> None:
    """End a stomp.py transport's socket without waiting on the broker: shut it down and stop
    the io thread, which then wakes (its socket has ended), closes the socket and reports the
    connection lost.

    Installed as the transport's disconnect_socket (ends_sockets_without_waiting), which stomp.py
    calls itself on a heart-beat timeout and on the receipt for DISCONNECT. Its own waits on TLS,
    with no timeout, for the broker's TLS close, which a frozen broker never sends, and empties
    the selector its io thread waits on without waking it: the connection was never reported
    lost, and a consumer that only receives never reconnected."""
    sock = transport.socket
    transport.running = False
    if sock is not None:
        with contextlib.suppress(OSError):  # already shut down or closed
            # The plain socket's shutdown, also under TLS: no TLS close to wait for.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def ends_sockets_without_waiting(transport: Any) -> None:
    """Have stomp.py's transport end its socket as Link.drop does, whoever ends it."""
    transport.disconnect_socket = lambda: end_socket(transport)


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
