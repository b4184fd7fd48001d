"""The Redis the tests use (BOOST_TEST_REDIS_URL): a client that skips locally when Redis is absent
and fails under CI=true, a key prefix per test, and a proxy that hangs until told to forward."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import unavailable
from tests.socket_support import pump

REDIS_URL = os.environ.get("BOOST_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def connect_redis() -> Any:
    """A client of the test Redis once it answered a PING; otherwise unavailable()."""
    try:
        import redis
    except ImportError:
        unavailable("the redis package is not installed (pip install 'boost-tenancy[redis]')")
    made = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        made.ping()
    except redis.RedisError as exc:
        unavailable(f"no Redis at BOOST_TEST_REDIS_URL={REDIS_URL}: {exc}")
    return made


def fresh_prefix(client: Any) -> Iterator[str]:
    """A key prefix of one test alone; its keys are deleted afterwards."""
    chosen = f"boost-test:{uuid.uuid4().hex[:12]}"
    yield chosen
    for key in client.scan_iter(match=f"{chosen}:*"):
        client.delete(key)


class RedisSwitch:
    """A TCP proxy in front of the real Redis that hangs (accepts, never answers) until told to
    forward: a Redis that hangs, and then one that comes back.

    Counts the connections it accepts: redis-py drops a connection after each timeout, so the
    count is the number of calls that reached the hung Redis.
    """

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)  # lets the accept loop notice close()
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        port = self._server.getsockname()[1]
        self.url = urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{port}"))
        self.accepted = 0
        self._forwarding = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def forward(self) -> None:
        """From now on, new connections reach the real Redis."""
        with self._lock:
            self._forwarding = True

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._server.close()
        with self._lock:
            for held in self._sockets:
                held.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with self._lock:
                self.accepted += 1
                self._sockets.append(conn)
                forwarding = self._forwarding
            if forwarding:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
                with self._lock:
                    self._sockets.append(upstream)
                for src, dst in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=pump, args=(src, dst), daemon=True).start()
