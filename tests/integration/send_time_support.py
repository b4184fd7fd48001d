"""What the tests of routing at send time on a real Classic share: a broker of their own, sends
the way a Java service sends, the queue read back, and a processor that records what it got."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import stomp

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantProcessor,
)
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.local_broker import LocalBroker, LocalBrokerSettings
from tests.conftest import require_activemq, wait_until
from tests.integration.test_local_broker import _free_port_pair
from tests.raw_stomp import send_confirmed


@contextmanager
def own_broker(home: Path, **settings: Any) -> Iterator[tuple[StompSettings, str]]:
    """A Classic broker in home, on free ports, with settings (LocalBrokerSettings fields);
    yields its STOMP settings and OpenWire URL, and stops it after."""
    require_activemq()
    stomp_port, openwire_port = _free_port_pair()
    broker = LocalBroker(
        LocalBrokerSettings(
            home=home / "broker", stomp_port=stomp_port, openwire_port=openwire_port, **settings
        )
    )
    broker.start()
    try:
        yield StompSettings(host="127.0.0.1", port=stomp_port), f"tcp://127.0.0.1:{openwire_port}"
    finally:
        broker.stop(timeout_s=10)


def raw_send(settings: StompSettings, queue: str, messages: list[tuple[str | None, int]]) -> None:
    """Plain STOMP sends to queue, as a Java service sends: (tenantUUID or none, n of the body)."""
    connection = stomp.Connection12([(settings.host, settings.port)], auto_content_length=False)
    connection.connect(wait=True)
    sends = []
    for tenant, n in messages:
        headers = {"persistent": "true"}
        if tenant is not None:
            headers["tenantUUID"] = tenant
        sends.append((f"/queue/{queue}", json.dumps({"n": n}), headers))
    send_confirmed(connection, sends)  # the broker holds every message
    connection.disconnect()


Frame = tuple[dict[str, str], Any]
"""A message read back: its headers and the n of its JSON body (the body itself otherwise)."""


def read_back(settings: StompSettings, queue: str, expected: int, timeout: float) -> list[Frame]:
    """What queue holds, read (and acknowledged) until expected came or timeout passed."""
    frames: list[Frame] = []
    lock = threading.Lock()

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: stomp.utils.Frame) -> None:
            try:
                body: Any = json.loads(frame.body)["n"]
            except (ValueError, KeyError, TypeError):
                body = frame.body
            with lock:
                frames.append((dict(frame.headers), body))

    connection = stomp.Connection12([(settings.host, settings.port)])
    connection.set_listener("l", Listener())
    connection.connect(wait=True)
    connection.subscribe(f"/queue/{queue}", id=uuid.uuid4().hex, ack="auto")
    try:
        wait_until(lambda: len(frames) >= expected, timeout=timeout)
    finally:
        connection.disconnect()
    return frames


class Recorder(TenantProcessor):
    """Records the n of every message it handles."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.seen: list[int] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append(message.data["n"])

    def count(self) -> int:
        with self._lock:
            return len(self.seen)


@contextmanager
def light_runner(
    settings: StompSettings, queue: str, tenant: str, store_path: Path, expected: int
) -> Iterator[tuple[Recorder, TenantRouter, SQLiteErrorStore]]:
    """A runner of tenant on queue, started, its expected messages handled; yields its processor,
    its router and its error store, and stops it after."""
    processor = Recorder(queue)
    store = SQLiteErrorStore(store_path)
    runner = ProcessorRunner(
        processor,
        StompTransport(settings),
        [tenant],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=20),
    )
    runner.start()
    try:
        assert wait_until(lambda: processor.count() == expected, timeout=30)
        router = runner.router
        assert router is not None
        yield processor, router, store
    finally:
        runner.stop(grace_s=5)
        store.close()
