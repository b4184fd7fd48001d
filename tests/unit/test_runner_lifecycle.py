"""The runner's lifecycle: run() stops on request, then lets the processor release what it holds;
what it calls once connected may stop its start; Periodic, the background step it shares with
the statistics readers, outlives a step that raises."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from boost_tenancy import (
    ConfigError,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.lifecycle import Periodic
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import wait_until


class Holder(TenantProcessor):
    queues = ("lifecycle",)

    def __init__(self) -> None:
        self.closed = threading.Event()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Nothing to do."""

    def close(self) -> None:
        self.closed.set()


def test_run_closes_the_processor_after_stopping(tmp_path: Path) -> None:
    broker = InMemoryBroker()
    processor = Holder()
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        ["org-a"],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
    )
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(runner.run(install_signal_handlers=False))
    )
    thread.start()
    assert not processor.closed.wait(0.3), "not closed while running"
    runner.request_stop()
    thread.join(10)
    broker.close()
    assert codes == [0]
    assert processor.closed.is_set()


def test_a_hook_that_raises_once_connected_stops_the_start_with_the_connection_closed(
    tmp_path: Path,
) -> None:
    broker = InMemoryBroker()
    transport = InMemoryTransport(broker)
    calls: list[bool] = []

    def connected_then_refuse() -> None:
        calls.append(transport.is_connected)
        raise ConfigError("refused")

    runner = ProcessorRunner(
        Holder(),
        transport,
        ["org-a"],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
        on_connected=[lambda: calls.append(transport.is_connected), connected_then_refuse],
    )
    try:
        with pytest.raises(ConfigError, match="refused"):
            runner.start()
        assert calls == [True, True]  # each in order, once the transport was connected
        assert not transport.is_connected
        assert runner.drains.subscribed() == frozenset()
        assert runner.health().workers == 0
    finally:
        broker.close()


def test_periodic_runs_at_start_then_every_interval_and_outlives_a_step_that_raises() -> None:
    steps: list[int] = []

    def step() -> None:
        steps.append(len(steps))
        if len(steps) == 2:
            raise RuntimeError("second step fails")

    periodic = Periodic(step, interval_s=0.02, name="test-periodic", at_start=True)
    with capture_logs() as logs:
        periodic.start()
        try:
            assert wait_until(lambda: len(steps) >= 4, timeout=5)
        finally:
            periodic.close()
    assert [entry["event"] for entry in logs] == ["periodic_step_failed"]
    assert logs[0]["thread"] == "test-periodic"
    stopped_at = len(steps)
    assert not wait_until(lambda: len(steps) > stopped_at, timeout=0.1)
    with pytest.raises(ValueError, match="interval_s"):
        Periodic(step, interval_s=0, name="never")


class Counting(TenantProcessor):
    queues = ("lifecycle.count",)

    def __init__(self) -> None:
        self.started: list[float] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.started.append(time.monotonic())


def test_no_handler_starts_once_stop_began_and_what_waits_goes_back_uncounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router winds down for up to 10 s: handlers that started meanwhile were cut off by
    the close, and their attempt ran again (seen on RabbitMQ with held retries)."""
    broker = InMemoryBroker()
    processor = Counting()
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        ["org-a"],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
    )
    runner.start()
    router = runner.router
    assert router is not None
    slow_stop = router.stop

    def winding_down(timeout: float = 10.0) -> None:
        # Messages keep coming while the router stops slowly.
        for n in range(20):
            producer.send("lifecycle.count", "org-a", {"n": n})
            time.sleep(0.01)
        slow_stop(timeout)

    sender = InMemoryTransport(broker)
    sender.connect()
    producer = TenantProducer(sender)
    monkeypatch.setattr(router, "stop", winding_down)
    began = time.monotonic()
    assert runner.stop(grace_s=5)
    assert [t for t in processor.started if t > began] == []
    # Nothing was acknowledged after the stop: every message waits, uncounted, for a runner.
    held = broker.messages("tenant.org-a.lifecycle.count")
    assert len(held) == 20
    assert {m.properties.get("boostAttempt", "1") for m in held} == {"1"}
    sender.close()
    broker.close()
