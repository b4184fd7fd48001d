"""The Redis the tests use (BOOST_TEST_REDIS_URL): a client that skips locally when Redis is absent
and fails under CI=true, a key prefix per test, and a server that accepts and never answers."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from tests.conftest import unavailable

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


class SilentServer:
    """Accepts TCP connections and never answers: a Redis that hangs."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)
        self.url = f"redis://127.0.0.1:{self._server.getsockname()[1]}/0"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._server.close()
        for held in self._held:
            held.close()
