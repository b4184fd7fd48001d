"""Routed queues on the real broker, fed the way the Java services feed them: plain STOMP SENDs
(raw stomp.py, no toolkit producer) to the shared queue, with a tenantUUID header and
persistent:true.

The runner of one tenant routes every tenant's messages to tenant.<tenant>.<queue>: a heavy
tenant with no processor, hundreds of messages ahead (past Classic's 200-message page, where a
selector consumer behind them receives nothing), delays no one, and its messages wait, all of
them, in its own queue; a message with no tenant is quarantined and recorded.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
)
from boost_tenancy.resilience.error_store import FailureOutcome, SQLiteErrorStore
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import recorded, unique_queue, wait_until
from tests.raw_stomp import send_confirmed

pytestmark = [pytest.mark.broker]

HEAVY_COUNT = 600
"""Three times Classic's default maxPageSize: the backlog that hides a selector consumer."""
LIGHT_COUNT = 20


class Recorder(TenantProcessor):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.seen: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append((ctx.tenant.value, message.queue, message.data["n"]))

    def count(self) -> int:
        with self._lock:
            return len(self.seen)


class Counter(stomp.ConnectionListener):  # type: ignore[misc]
    """Counts MESSAGE frames (auto-acknowledged) and keeps their headers."""

    def __init__(self) -> None:
        self.frames: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        with self._lock:
            self.frames.append(dict(frame.headers))

    def __len__(self) -> int:
        with self._lock:
            return len(self.frames)


@pytest.fixture
def raw(stomp_settings: StompSettings) -> Iterator[list[stomp.Connection12]]:
    connections: list[stomp.Connection12] = []
    yield connections
    for connection in connections:
        if connection.is_connected():
            connection.disconnect()


def raw_connection(
    settings: StompSettings, connections: list[stomp.Connection12]
) -> stomp.Connection12:
    # No content-length on SEND: the broker stores a TextMessage, as a Java service's would be.
    connection = stomp.Connection12([(settings.host, settings.port)], auto_content_length=False)
    connection.connect(settings.username, settings.password, wait=True)
    connections.append(connection)
    return connection


def drain(
    settings: StompSettings,
    connections: list[stomp.Connection12],
    queue: str,
    count: int,
    timeout: float = 20.0,
) -> Counter:
    """Subscribe to queue with raw STOMP until count messages came or timeout passed."""
    counter = Counter()
    connection = raw_connection(settings, connections)
    connection.set_listener("counter", counter)
    connection.subscribe(f"/queue/{queue}", id=uuid.uuid4().hex, ack="auto")
    wait_until(lambda: len(counter) >= count, timeout=timeout)
    return counter


def test_raw_stomp_sends_to_the_shared_queue_are_stored_and_consumed_per_tenant(
    stomp_settings: StompSettings, tmp_path: Path, raw: list[stomp.Connection12]
) -> None:
    queue = unique_queue("cmd.routed")
    suffix = uuid.uuid4().hex[:8]
    light, heavy = f"org-light-{suffix}", f"org-heavy-{suffix}"
    sender = raw_connection(stomp_settings, raw)
    destination = f"/queue/{queue}"
    send_confirmed(
        sender,
        [
            *(
                (destination, json.dumps({"n": n}), {"tenantUUID": heavy, "persistent": "true"})
                for n in range(HEAVY_COUNT)
            ),
            *(
                (destination, json.dumps({"n": n}), {"tenantUUID": light, "persistent": "true"})
                for n in range(LIGHT_COUNT)
            ),
            (destination, json.dumps({"n": -1}), {"persistent": "true"}),
        ],
    )  # the broker holds every message
    sender.disconnect()

    # Only the light tenant has a processor; the heavy tenant's backlog is ahead of it.
    processor = Recorder(queue)
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    runner = ProcessorRunner(
        processor,
        StompTransport(stomp_settings),
        [light],
        error_store=store,
        settings=RunnerSettings(workers=4, prefetch=20),
    )
    started = time.monotonic()
    runner.start()
    try:
        assert wait_until(lambda: processor.count() == LIGHT_COUNT, timeout=60)
        handled_s = time.monotonic() - started
        router = runner.router
        assert router is not None
        assert wait_until(lambda: router.quarantined == 1)
        # A batch is counted after its commit, and the runner may handle what the commit moved
        # (and the router quarantine the batch's message without a tenant) before that.
        expected = {TenantId(heavy): HEAVY_COUNT, TenantId(light): LIGHT_COUNT}
        assert wait_until(lambda: router.routed == expected), router.routed
        (record,) = recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)
    finally:
        runner.stop(grace_s=5)
        store.close()
    assert record.queue == queue
    assert sorted(n for _, _, n in processor.seen) == list(range(LIGHT_COUNT))
    assert {(t, q) for t, q, _ in processor.seen} == {(light, queue)}

    # The heavy tenant's messages wait, every one of them and unchanged, in its own queue.
    stored = drain(stomp_settings, raw, f"tenant.{heavy}.{queue}", HEAVY_COUNT)
    assert len(stored) == HEAVY_COUNT
    assert {frame["tenantUUID"] for frame in stored.frames} == {heavy}
    assert {frame["persistent"] for frame in stored.frames} == {"true"}

    # The message without a tenant is quarantined, recorded, and nothing is left behind.
    quarantined = drain(stomp_settings, raw, f"DLQ.{queue}.quarantine", 1)
    assert len(quarantined) == 1
    assert quarantined.frames[0]["boostDeadLetterReason"] == "tenancy-violation"
    assert len(drain(stomp_settings, raw, queue, 1, timeout=1.0)) == 0
    print(f"light tenant handled {LIGHT_COUNT} behind {HEAVY_COUNT} in {handled_s:.1f} s")
