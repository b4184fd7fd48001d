"""Byte relays the tests put between a client and a server (a TLS terminator, a switchable
Redis): what one socket reads goes to the other until either end closes."""

from __future__ import annotations

import contextlib
import socket


def pump(source: socket.socket, target: socket.socket) -> None:
    """Copy source to target until source ends or either fails, then shut both down, so the
    relay's other direction ends too."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
