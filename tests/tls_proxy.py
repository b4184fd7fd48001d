"""A TLS terminator for tests: accepts TLS connections on a loopback port and forwards the
plain bytes to a broker's plain port, as a load balancer or stunnel in front of a broker does.
The client's TLS (CA, host name check, client certificate) is then tested against a real TLS
server whatever the broker behind it can do itself."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path


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
        threading.Thread(target=self._pipe, args=(secure, upstream), daemon=True).start()
        self._pipe(upstream, secure)

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

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
