"""One established STOMP connection (a Link) and the one chunked write every frame the toolkit
encodes goes through.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Final

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

WRITE_CHUNK: Final = 64 * 1024
_CLOSE_POLL_S: Final = 0.005


class Link:
    """One established connection, as taken for one operation: what is written through it goes
    to that connection or fails; it never reaches a later one."""

    __slots__ = ("_conn", "flavour", "generation")

    def __init__(self, conn: Any, generation: int, flavour: BrokerFlavour) -> None:
        self._conn = conn
        self.generation = generation
        self.flavour = flavour

    def write(self, data: bytes, what: str) -> None:
        """One socket write; a failure is a TransportError naming what was written.

        A write that failed may have put part of a frame on the wire, after which nothing
        written can be read right: the connection is dropped, and the transport reconnects."""
        transport = self._conn.transport
        try:
            if transport.blocking:
                transport.send(data)
            else:
                # TLS: stomp.py made the socket non-blocking, and its io thread writes what is
                # queued as the socket takes it. A write of our own would fail as soon as the
                # socket's buffer is full, and race that thread for the TLS connection.
                if not transport.running:
                    raise TransportError("the connection is closed")
                transport.send_queue.put(data)
        except BlockingIOError as exc:  # the socket's write timeout (connection._tune_socket)
            self.drop()
            raise TransportError(
                f"{what} failed: the broker read nothing for confirm_timeout_s (is it frozen, "
                "or its host unreachable?); the connection is dropped"
            ) from exc
        except Exception as exc:
            self.drop()
            raise TransportError(f"{what} failed: {exc}") from exc

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
        """Send DISCONNECT, then close the socket when the broker's receipt for it has come
        (stomp.py closes it then) or wait_s has passed, whichever is first.

        stomp.py alone closes the socket only on that receipt: a broker that never sends it
        would keep the connection open on heart-beats, and with it every unacknowledged delivery
        of the connection, out of reach of any other consumer."""
        transport = self._conn.transport
        try:
            self._conn.disconnect()
            deadline = time.monotonic() + wait_s
            while transport.running and time.monotonic() < deadline:
                time.sleep(_CLOSE_POLL_S)
        finally:
            self.drop()

    def drop(self) -> None:
        """Close the socket now, without DISCONNECT, as a crash would: the broker takes back
        every unacknowledged delivery of the connection. No frame follows a DISCONNECT this way;
        Artemis 2.44 may apply an ACK written after one, or count its message in flight with no
        consumer holding it (docs/interop.md)."""
        transport = self._conn.transport
        if transport.running:
            # Racing stomp.py's own close on a late receipt: either one closes the socket.
            with contextlib.suppress(Exception):
                transport.disconnect_socket()


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
