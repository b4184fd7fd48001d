"""Async processors and middleware the async tests share, on the in-memory and the real broker,
and a transport whose confirmations the test holds back."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any, ClassVar

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor
from boost_tenancy.errors import PermanentError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.aio import AsyncHandler, AsyncMiddleware
from boost_tenancy.processing.middleware import Handler
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import BatchSink


def on_loop() -> bool:
    """Whether the caller runs on a runner's event loop thread (not a worker)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return threading.current_thread().name.startswith("boost-loop")


class AsyncEcho(TenantProcessor):
    """Publishes {"n": ...} to <queue>.out after an await; "fail" in the body raises (retried),
    "permanent" dead-letters. Records every attempt and whether it ran on the loop."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self._lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.on_loop: list[bool] = []

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.attempts[message.message_id] += 1
            self.on_loop.append(on_loop())
        await asyncio.sleep(0)
        data = message.data if isinstance(message.data, dict) else {}
        if data.get("fail"):
            raise ConnectionError(f"dependency down on attempt {message.attempt}")
        if data.get("permanent"):
            raise PermanentError("cannot be handled")
        ctx.publish(f"{message.queue}.out", {"n": data.get("n")})


class Parked(TenantProcessor):
    """Waits on the loop until cancelled or released (release() from any thread)."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self._release = threading.Event()

    def release(self) -> None:
        self._release.set()

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.started.set()
        try:
            while not self._release.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        ctx.publish(f"{message.queue}.out", {"released": True})


class Trail:
    """Where each piece of a mixed chain ran, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.steps: list[str] = []

    def add(self, step: str) -> None:
        with self._lock:
            self.steps.append(f"{step}@{'loop' if on_loop() else 'worker'}")


class SyncStep:
    """A plain middleware that records entering and leaving."""

    def __init__(self, name: str, trail: Trail) -> None:
        self.name, self.trail = name, trail

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome:
        self.trail.add(f"{self.name}>")
        try:
            return call_next(message, ctx)
        finally:
            self.trail.add(f"<{self.name}")


class AsyncStep(AsyncMiddleware):
    """An async middleware that awaits before and after the rest of the chain."""

    def __init__(self, name: str, trail: Trail) -> None:
        self.name, self.trail = name, trail

    async def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: AsyncHandler
    ) -> Outcome:
        self.trail.add(f"{self.name}>")
        await asyncio.sleep(0)
        try:
            return await call_next(message, ctx)
        finally:
            self.trail.add(f"<{self.name}")


class TrailedAsync(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str, trail: Trail) -> None:
        self.queues = (queue,)
        self.trail = trail

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.trail.add("handler")
        ctx.publish(f"{message.queue}.out", {"ok": True})


class TrailedSync(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str, trail: Trail) -> None:
        self.queues = (queue,)
        self.trail = trail

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.trail.add("handler")
        ctx.publish(f"{message.queue}.out", {"ok": True})


HOLD_S = 10.0
"""The longest a held confirmation waits before failing the send: a producer that blocks the
loop then fails its test instead of hanging it."""


class HeldConfirmations(InMemoryTransport):
    """Confirms a send, or a batch's commit, only once release is set."""

    def __init__(self, broker: InMemoryBroker) -> None:
        super().__init__(broker)
        self.waiting = threading.Event()
        self.release = threading.Event()

    def _hold(self) -> None:
        self.waiting.set()
        if not self.release.wait(HOLD_S):
            raise TransportError("the confirmation was held back and never released")

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._hold()
        super().send(queue, message, delay_ms=delay_ms)

    def open_batch(self, *, atomic: bool = True) -> Any:
        return _HeldBatch(super().open_batch(atomic=atomic), self._hold)


class _HeldBatch:
    def __init__(self, sink: BatchSink, hold: Any) -> None:
        self._sink, self._hold = sink, hold

    def add(self, queue: str, message: WireMessage) -> None:
        self._sink.add(queue, message)

    def commit(self) -> None:
        self._hold()
        self._sink.commit()

    def abort(self) -> None:
        self._sink.abort()
