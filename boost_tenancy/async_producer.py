"""AsyncTenantProducer: a TenantProducer for asyncio code (FastAPI, Starlette), whose sends
await the broker's confirmation without blocking the event loop.

The transport's blocking work (the write, the wait for the receipt) runs on threads of the
producer's own, at most max_threads at once; the caller's loop keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, asynccontextmanager
from types import TracebackType
from typing import TypeVar

from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import Message, MessageBody
from boost_tenancy.producer import ProducerBatch, TenantProducer
from boost_tenancy.tenancy import TenantId

_T = TypeVar("_T")


class AsyncProducerBatch:
    """A batch of an AsyncTenantProducer: `await batch.send(...)`, confirmed when the
    `async with` block ends; nothing is stored if the block raises."""

    def __init__(
        self, batch: ProducerBatch, run: Callable[[Callable[[], Message]], asyncio.Future[Message]]
    ) -> None:
        self._batch = batch
        self._run = run
        # A batch is one stream of sends on the transport: one at a time, whatever the caller
        # gathers.
        self._lock = asyncio.Lock()

    async def send(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Message:
        """Add a message of tenant to the batch (streamed now where the batch is atomic)."""
        call = functools.partial(
            self._batch.send,
            queue,
            tenant,
            body,
            message_id=message_id,
            correlation_id=correlation_id,
            properties=properties,
        )
        async with self._lock:
            return await self._run(call)

    def __len__(self) -> int:
        return len(self._batch)


class AsyncTenantProducer:
    """Wraps a TenantProducer: `await producer.send(...)` returns once the broker confirmed.

    Use it as `async with AsyncTenantProducer(producer) as p:`, or call aclose(): it waits for
    the sends under way, then ends the producer's threads. The transport stays the caller's.
    Cancelling an awaiting send does not take the message back (it may still be stored): send
    it again with the same message_id to stay idempotent.
    """

    def __init__(self, producer: TenantProducer, *, max_threads: int = 4) -> None:
        if max_threads < 1:
            raise ConfigError(f"max_threads must be at least 1, got {max_threads}")
        self._producer = producer
        self._executor = ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="boost-async-producer"
        )
        self._closed = False
        self._open_batches = 0
        """Batches entered and not ended: their commit or abort still needs the threads."""
        self._lock = threading.Lock()

    @property
    def producer(self) -> TenantProducer:
        """The wrapped producer (its sends block: for threads, not for the event loop)."""
        return self._producer

    def _run(self, call: Callable[[], _T], *, ending: bool = False) -> asyncio.Future[_T]:
        """call on the producer's threads; refused once closed, unless it ends a batch."""
        with self._lock:
            if self._closed and not ending:
                raise ConfigError("the AsyncTenantProducer is closed")
            return asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def send(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> Message:
        """Send one message of tenant; returns once the broker confirmed it (TenantProducer.send).

        Over a publishing limit it raises PublishRefusedError and nothing is sent.
        """
        return await self._run(
            functools.partial(
                self._producer.send,
                queue,
                tenant,
                body,
                message_id=message_id,
                correlation_id=correlation_id,
                properties=properties,
                delay_ms=delay_ms,
            )
        )

    @asynccontextmanager
    async def batch(self, *, atomic: bool | None = None) -> AsyncIterator[AsyncProducerBatch]:
        """Collect sends and confirm them together when the block ends (TenantProducer.batch);
        an exception, or the task's cancellation, inside the block stores nothing."""
        manager: AbstractContextManager[ProducerBatch] = self._producer.batch(atomic=atomic)
        with self._lock:
            if self._closed:
                raise ConfigError("the AsyncTenantProducer is closed")
            self._open_batches += 1
        try:
            batch = await self._run(manager.__enter__, ending=True)
            try:
                # A send after aclose() is refused, and so the block ends in an abort.
                yield AsyncProducerBatch(batch, self._run)
            except BaseException as exc:
                # Aborted on the producer's thread, even when this task is being cancelled.
                abort = functools.partial(manager.__exit__, type(exc), exc, exc.__traceback__)
                await asyncio.shield(self._run(abort, ending=True))
                raise
            await self._run(functools.partial(manager.__exit__, None, None, None), ending=True)
        finally:
            with self._lock:
                self._open_batches -= 1
                last = self._closed and self._open_batches == 0
            if last:  # aclose() left the threads to the last batch open then
                await self._shutdown()

    async def _shutdown(self) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._executor.shutdown, wait=True)
        )

    async def aclose(self) -> None:
        """Refuse new sends and batches, wait for the sends under way, then end the producer's
        threads; idempotent. A batch still open is committed or aborted when its block ends
        (a send into it after aclose is refused, so it aborts), and the threads end after it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            batches_open = self._open_batches > 0
        if not batches_open:
            await self._shutdown()

    async def __aenter__(self) -> AsyncTenantProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


__all__ = ["AsyncProducerBatch", "AsyncTenantProducer"]
