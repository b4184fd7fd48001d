"""Probes of a broker's ports: does STOMP answer a CONNECT, is a port already taken."""

from __future__ import annotations

import contextlib
import errno
import socket
import ssl
from typing import Final

from devtools.broker_settings import LocalBrokerError

_STOMP_CONNECT: Final = b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"
# Asking for a receipt lets the broker close the connection itself, so every readiness probe does
# not leave a "transport failed" warning in the broker log.
_STOMP_DISCONNECT: Final = b"DISCONNECT\nreceipt:probe\n\n\x00"
_PROBE_TIMEOUT_S: Final = 2.0


def stomp_login(host: str, port: int, login: str, passcode: str) -> bool:
    """True when a STOMP CONNECT with login and passcode on host:port is answered with
    CONNECTED: a broker that requires a login is ready only when its security is loaded too."""
    frame = f"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:{login}\npasscode:{passcode}\n\n"
    return stomp_handshake(host, port, connect=frame.encode() + b"\x00")


def stomp_handshake(
    host: str,
    port: int,
    timeout_s: float = _PROBE_TIMEOUT_S,
    *,
    tls: bool = False,
    connect: bytes = _STOMP_CONNECT,
) -> bool:
    """True when a STOMP CONNECT on host:port (over TLS when tls) is answered with CONNECTED.

    Over TLS the broker's certificate is not checked: the probe asks whether the broker the
    manager started is up, and sends nothing secret."""
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout_s))
            if tls:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
            sock.sendall(connect)
            reply = _read_frame(sock)
            if not reply.lstrip(b"\r\n").startswith(b"CONNECTED"):
                return False
            with contextlib.suppress(OSError):
                sock.sendall(_STOMP_DISCONNECT)
                _read_frame(sock)
            return True
    except OSError:
        return False


def _read_frame(sock: socket.socket) -> bytes:
    data = b""
    while b"\x00" not in data and len(data) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (binding is refused)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR, connections of a just-stopped broker in TIME_WAIT would count as
        # a listener; the broker's own sockets reuse the address the same way.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise LocalBrokerError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    return False
