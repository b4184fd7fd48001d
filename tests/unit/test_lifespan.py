"""A processor's lifespan hooks: on_startup once before the runner connects, on_shutdown once
after its last handler, a plain def on the runner's thread and an async def on the event loop
where the async handlers run; a failed start closes what was opened, and a failing shutdown does
not stop the stop."""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.errors import ConfigError, TransportError
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import wait_until

QUEUE = "cmd.lifespan"


class Pool:
    """What a handler shares with the others: opened once, closed once."""

    def __init__(self) -> None:
        self.closed = False
        self.used = 0


class PlainHooks(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)

    def __init__(self, transport: InMemoryTransport) -> None:
        self.events: list[str] = []
        self.transport = transport
        self.pool: Pool | None = None

    def on_startup(self) -> None:
        self.events.append(f"startup connected={self.transport.is_connected}")
        self.pool = Pool()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        assert self.pool is not None and not self.pool.closed
        self.pool.used += 1
        self.events.append("handle")

    def on_shutdown(self) -> None:
        assert self.pool is not None
        self.pool.closed = True
        self.events.append(f"shutdown connected={self.transport.is_connected}")


def send(broker: InMemoryBroker, count: int) -> None:
    transport = InMemoryTransport(broker)
    transport.connect()
    producer = TenantProducer(transport)
    for n in range(count):
        producer.send(QUEUE, "org-a", {"n": n})
    transport.close()


def test_plain_hooks_open_before_connecting_and_close_after_the_last_handler(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = InMemoryTransport(broker)
    processor = PlainHooks(transport)
    runner = ProcessorRunner(processor, transport, ["org-a"], error_store=store)
    runner.start()
    send(broker, 3)
    assert wait_until(lambda: processor.events.count("handle") == 3)
    assert runner.stop(grace_s=5)
    assert processor.events == [
        "startup connected=False",
        "handle",
        "handle",
        "handle",
        "shutdown connected=True",
    ]
    assert processor.pool is not None and processor.pool.closed
    assert not transport.is_connected


class AsyncHooks(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)

    def __init__(self) -> None:
        self.loops: dict[str, asyncio.AbstractEventLoop] = {}
        self.threads: dict[str, str] = {}
        self.lock: asyncio.Lock | None = None

    async def on_startup(self) -> None:
        self.loops["startup"] = asyncio.get_running_loop()
        self.lock = asyncio.Lock()  # bound to the loop it is first used on

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        assert self.lock is not None
        async with self.lock:
            self.loops["handle"] = asyncio.get_running_loop()

    async def on_shutdown(self) -> None:
        self.loops["shutdown"] = asyncio.get_running_loop()
        self.threads["shutdown"] = threading.current_thread().name


def test_async_hooks_run_on_the_loop_the_async_handlers_run_on(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    processor = AsyncHooks()
    transport = InMemoryTransport(broker)
    runner = ProcessorRunner(processor, transport, ["org-a"], error_store=store)
    runner.start()
    send(broker, 2)
    assert wait_until(lambda: "handle" in processor.loops)
    assert runner.stop(grace_s=5)
    assert processor.loops["startup"] is processor.loops["handle"] is processor.loops["shutdown"]
    assert processor.threads["shutdown"] != threading.current_thread().name


class FailingStartup(PlainHooks):
    def on_startup(self) -> None:
        self.events.append("startup")
        raise RuntimeError("the database is down")


def test_a_failing_startup_stops_the_start_before_anything_is_subscribed(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = InMemoryTransport(broker)
    processor = FailingStartup(transport)
    runner = ProcessorRunner(processor, transport, ["org-a"], error_store=store)
    with pytest.raises(RuntimeError, match="the database is down"):
        runner.start()
    assert processor.events == ["startup"]  # nothing opened: nothing to shut down
    assert not transport.is_connected
    send(broker, 1)
    assert broker.depth(f"tenant.org-a.{QUEUE}") == 1  # nobody took it


class Unreachable(InMemoryTransport):
    def connect(self) -> None:
        raise TransportError("cannot connect to the broker at memory://: refused")


def test_a_start_that_fails_after_startup_shuts_down_what_it_opened(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = Unreachable(broker)
    processor = PlainHooks(transport)
    runner = ProcessorRunner(processor, transport, ["org-a"], error_store=store)
    with pytest.raises(TransportError, match="refused"):
        runner.start()
    assert processor.events == ["startup connected=False", "shutdown connected=False"]
    assert processor.pool is not None and processor.pool.closed


class FailingShutdown(PlainHooks):
    def on_shutdown(self) -> None:
        self.events.append("shutdown")
        raise RuntimeError("the pool would not close")


def test_a_failing_shutdown_is_logged_and_the_stop_goes_on(
    broker: InMemoryBroker, store: ErrorStore, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = InMemoryTransport(broker)
    processor = FailingShutdown(transport)
    runner = ProcessorRunner(processor, transport, ["org-a"], error_store=store)
    runner.start()
    assert runner.stop(grace_s=5)
    assert processor.events == ["startup connected=False", "shutdown"]
    assert not transport.is_connected
    assert "processor_shutdown_failed" in capsys.readouterr().out


class AwaitableFromPlainDef(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)

    def on_startup(self) -> None:
        return asyncio.sleep(0)  # type: ignore[return-value]  # the mistake under test

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Never called."""


def test_a_plain_def_hook_returning_an_awaitable_is_refused_saying_what_to_write(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = InMemoryTransport(broker)
    runner = ProcessorRunner(AwaitableFromPlainDef(), transport, ["org-a"], error_store=store)
    with pytest.raises(ConfigError, match=r"declare it `async def on_startup\(self\)`"):
        runner.start()
    assert not transport.is_connected
