"""One established STOMP connection (a Link) and the one chunked write every frame the toolkit
encodes goes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

WRITE_CHUNK: Final = 64 * 1024


class Link:
    """One established connection, as taken for one operation: what is written through it goes
    to that connection or fails; it never reaches a later one."""

    __slots__ = ("_conn", "flavour", "generation")

    def __init__(self, conn: Any, generation: int, flavour: BrokerFlavour) -> None:
        self._conn = conn
        self.generation = generation
        self.flavour = flavour

    def write(self, data: bytes, what: str) -> None:
        """One socket write; a failure is a TransportError naming what was written."""
        try:
            self._conn.transport.send(data)
        except Exception as exc:
            raise TransportError(f"{what} failed: {exc}") from exc

    def subscribe(self, destination: str, sub_id: str, headers: Mapping[str, str]) -> None:
        self._conn.subscribe(destination, sub_id, ack="client-individual", headers=dict(headers))

    def unsubscribe(self, sub_id: str) -> None:
        self._conn.unsubscribe(sub_id)

    def disconnect(self) -> None:
        self._conn.disconnect()


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
