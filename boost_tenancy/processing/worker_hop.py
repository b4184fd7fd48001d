"""The hop channel: how one delivery's coroutines on the event loop hand plain work (sync
middleware, a plain handler) back to the worker thread waiting for that delivery."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Callable

from boost_tenancy.processing.outcomes import Outcome


class _Request:
    """Plain work a coroutine hands to the worker thread of its delivery."""

    __slots__ = ("abandoned", "fn", "future", "loop")

    def __init__(
        self,
        fn: Callable[[], Outcome],
        future: asyncio.Future[Outcome],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.abandoned = False

    def run(self) -> None:
        if self.abandoned:  # its coroutine was cancelled while this waited
            return
        try:
            result = self.fn()
        except BaseException as exc:  # handed to the coroutine, whatever it is
            self._settle(None, exc)
        else:
            self._settle(result, None)

    def _settle(self, result: Outcome | None, exc: BaseException | None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if exc is None:
                self.future.set_result(result)  # type: ignore[arg-type]  # None only with exc
                return
            try:
                self.future.set_exception(exc)
            except TypeError:
                # asyncio takes no StopIteration into a future (it refused, and the coroutine
                # waited for good): as a coroutine does, it goes on as a RuntimeError.
                error = RuntimeError(f"{type(exc).__name__} raised: {exc}")
                error.__cause__ = exc
                self.future.set_exception(error)

        with contextlib.suppress(RuntimeError):  # the loop closed: its waiter is failed already
            self.loop.call_soon_threadsafe(settle)


class Hop:
    """The channel from one delivery's coroutines back to the worker thread waiting for it."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()

    async def call(self, fn: Callable[[], Outcome]) -> Outcome:
        """On the loop: run fn on the delivery's worker thread and await what it returns."""
        loop = asyncio.get_running_loop()
        request = _Request(fn, loop.create_future(), loop)
        self.requests.put(request)
        try:
            return await request.future
        except asyncio.CancelledError:
            request.abandoned = True
            raise


__all__ = ["Hop"]
