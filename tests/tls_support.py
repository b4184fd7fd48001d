"""What the TLS tests of both transports share: a round trip and a refusal, and a TLS terminator
that accepts TLS connections on a loopback port and forwards the plain bytes to a broker's plain
port, as a load balancer or stunnel in front of a broker does. The client's TLS (CA, host name
check, client certificate) is then tested against a real TLS server whatever the broker behind
it can do itself."""

from __future__ import annotations

import contextlib
import queue as queue_mod
import socket
import ssl
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import Delivery, Transport
from tests.socket_support import pump


def round_trip(
    transport: Transport, *, connected: Callable[[Transport], None] = lambda _t: None
) -> str:
    """Connect, send one message to a tenant's queue and receive it back; its body. connected
    checks the connection once it is open (that it is TLS, where the transport can tell)."""
    queue = f"tenant.org-tls.cmd.{uuid.uuid4().hex[:8]}"
    body = f"over tls {uuid.uuid4().hex}"
    received: queue_mod.Queue[Delivery] = queue_mod.Queue()
    transport.connect()
    try:
        connected(transport)
        transport.send(queue, WireMessage(body=body, properties={"tenantUUID": "org-tls"}))
        transport.subscribe(queue, selector=None, prefetch=1, on_delivery=received.put)
        delivery = received.get(timeout=20)
        transport.ack(delivery)
        assert isinstance(delivery.body, str)
        return delivery.body
    finally:
        transport.close()


def amqps_client(url: str, ca_file: Path, **env: str) -> Transport:
    """An AMQP 1.0 transport over TLS configured as an entry point is: a URL and BOOST_BROKER_*
    variables, the CA that signed the server's certificate among them."""
    return open_transport(
        url,
        {
            "BOOST_BROKER_CA_FILE": str(ca_file),
            "BOOST_BROKER_CONNECT_TIMEOUT_S": "10",
            "BOOST_BROKER_RECONNECT_WAIT_S": "0",
            **env,
        },
    )


def refused(transport: Transport) -> bool:
    """Whether connecting is refused with a TransportError."""
    try:
        transport.connect()
    except TransportError:
        return True
    finally:
        transport.close()
    return False


class TlsTerminator:
    """Serves TLS with cert_file/key_file on 127.0.0.1:port, each connection piped to
    upstream (host, port). client_ca: the CA a client certificate must be signed by (then one is
    required). Closed with close(), or as a context manager."""

    def __init__(
        self,
        upstream: tuple[str, int],
        cert_file: Path,
        key_file: Path,
        *,
        client_ca: Path | None = None,
    ) -> None:
        self._upstream = upstream
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert_file, key_file)
        if client_ca is not None:
            self._context.load_verify_locations(client_ca)
            self._context.verify_mode = ssl.CERT_REQUIRED
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.handshakes_failed = 0
        threading.Thread(target=self._accept, name="tls-terminator", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        try:
            secure = self._context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            with self._lock:
                self.handshakes_failed += 1
            raw.close()
            return
        secure.settimeout(None)
        try:
            upstream = socket.create_connection(self._upstream, timeout=10)
        except OSError:
            secure.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets += [secure, upstream]
        threading.Thread(target=pump, args=(secure, upstream), daemon=True).start()
        pump(upstream, secure)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> TlsTerminator:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
