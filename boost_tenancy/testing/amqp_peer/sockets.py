"""The in-process AMQP peer's sockets: the listener accepting on the peer's thread, and the
doorway that answers the SASL exchange before a connection is handed to proton."""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any, Final

from proton import Data, Described, ubyte, ulong

from boost_tenancy.testing.amqp_peer.wire import _symbols

if TYPE_CHECKING:
    from boost_tenancy.testing.amqp_peer.engine import _Engine

_SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
_AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"


def _sasl_frame(code: int, fields: list[Any]) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = data.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


class _SaslGate:
    """Answers the SASL layer before proton's transport sees a connection.

    proton-c's built-in SASL server offers ANONYMOUS only; both brokers also take PLAIN, and a
    client that insists on PLAIN must be able to connect. Any user and password are accepted,
    and a client that starts with the plain AMQP header (no SASL) is let through.
    """

    def __init__(self, mechanisms: tuple[str, ...]) -> None:
        self._mechanisms = mechanisms
        self._buffer = b""
        self._header_seen = False

    @property
    def leftover(self) -> bytes:
        """What the client sent past the SASL exchange: its first AMQP bytes."""
        return self._buffer

    def feed(self, received: bytes) -> tuple[bytes, bool | None]:
        """Take bytes; return the reply and the outcome: None while the exchange goes on, True
        once the client may speak AMQP, False when the connection must be dropped."""
        self._buffer += received
        reply = b""
        if not self._header_seen:
            if len(self._buffer) < 8:
                return reply, None
            header = self._buffer[:8]
            if header == _AMQP_HEADER:
                return reply, True
            self._buffer = self._buffer[8:]
            if header != _SASL_HEADER:
                return _SASL_HEADER, False
            self._header_seen = True
            reply = _SASL_HEADER + _sasl_frame(0x40, [_symbols(*self._mechanisms)])
        if len(self._buffer) < 4 or len(self._buffer) < struct.unpack(">I", self._buffer[:4])[0]:
            return reply, None
        size = struct.unpack(">I", self._buffer[:4])[0]
        frame, self._buffer = self._buffer[:size], self._buffer[size:]
        data = Data()
        data.decode(frame[frame[4] * 4 :])
        data.rewind()
        data.next()
        init = data.get_object()
        ok = (  # sasl-init naming an offered mechanism
            isinstance(init, Described)
            and init.descriptor == 0x41
            and isinstance(init.value, list)
            and bool(init.value)
            and str(init.value[0]) in self._mechanisms
        )
        return reply + _sasl_frame(0x44, [ubyte(0 if ok else 1)]), ok


class _Doorway:
    """Reads an accepted socket until its SASL exchange is done, then hands it to proton."""

    def __init__(self, engine: _Engine, sock: socket.socket) -> None:
        self._engine = engine
        self._sock = sock
        self._gate = _SaslGate(engine.profile.mechanisms)

    def on_selectable_readable(self, event: Any) -> None:
        try:
            received = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            received = b""
        reply, outcome = self._gate.feed(received) if received else (b"", False)
        if reply:
            try:
                self._sock.sendall(reply)  # a few dozen bytes to a fresh socket
            except OSError:
                outcome = False
        if outcome is not None:
            self._engine.doorways.discard(event.selectable)
        if outcome is False:
            event.selectable.terminate()
            event.selectable.update()
        elif outcome is True:
            self._engine.adopt(event.selectable, self._sock, self._gate.leftover)


class _Listener:
    """The listening socket, accepting on the peer's thread."""

    def __init__(self, engine: _Engine, sock: socket.socket) -> None:
        self._engine = engine
        self._sock = sock

    def on_selectable_readable(self, _event: Any) -> None:
        try:
            accepted, _ = self._sock.accept()
        except OSError:
            return
        accepted.setblocking(False)
        accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._engine.sockets.append(accepted)
        self._engine.doorways.add(self._engine.watch(_Doorway(self._engine, accepted), accepted))
