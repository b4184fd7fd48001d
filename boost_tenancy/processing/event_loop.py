"""The runner's event loop for async handlers and middleware: a loop on a thread of its own,
with a watchdog that replaces a blocked loop, started and stopped with the runner."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import math
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import structlog

from boost_tenancy.errors import ConfigError, HandlerCancelledError
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.worker_hop import Hop

log = structlog.get_logger("boost_tenancy.processing.aio")
T = TypeVar("T")

_TEARDOWN_S: Final = 5.0
"""How long a stopping loop waits for the tasks it cancels, and for its default executor."""

_STACK_FRAMES: Final = 8
"""Frames of the blocked loop thread's stack logged when the loop is replaced."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EventLoopSettings:
    """The runner's event loop, which it starts only for an async handler or middleware."""

    stall_s: float = 10.0
    """How long the loop may go without running anything before it counts as blocked: the
    stack that blocks it is logged at critical level and new async work goes to a fresh loop,
    so one handler blocking the loop cannot stall every tenant for longer than this."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.stall_s) and self.stall_s > 0):
            raise ConfigError(f"stall_s must be a finite number > 0, got {self.stall_s}")


class _Escaped(Exception):  # noqa: N818  # a carrier, not an error of its own
    """SystemExit or KeyboardInterrupt from a task, carried to the worker: raised in a task they
    would end the loop's run_forever, and with it every tenant's async handling."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


async def _guarded(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    except (KeyboardInterrupt, SystemExit) as exc:
        raise _Escaped(exc) from exc


def _guarded_task(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    context: contextvars.Context | None = None,
) -> asyncio.Task[Any]:
    """The loop's task factory: every task, a delivery's or one a handler spawned and left
    running, is guarded, so a SystemExit in any of them cannot end the loop of every tenant."""
    return asyncio.Task(_guarded(coro), loop=loop, context=context)


_Start = tuple[Callable[[], Coroutine[Any, Any, Outcome]], contextvars.Context]
_Queued = tuple[
    concurrent.futures.Future[Outcome],
    Callable[[], Coroutine[Any, Any, Outcome]],
    contextvars.Context,
]


class _Loop:
    """One asyncio loop on a thread of its own, with the deliveries submitted to it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(_guarded_task)  # type: ignore[arg-type]  # context= is passed on 3.11
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.beat = time.monotonic()
        self._lock = threading.Lock()
        self._submitted: set[concurrent.futures.Future[Outcome]] = set()
        self._queued: dict[concurrent.futures.Future[Outcome], _Start] = {}
        self._tasks: set[asyncio.Task[Outcome]] = set()  # the loop thread's only
        self._retiring = False  # the loop thread's only

    def submit(
        self,
        make: Callable[[], Coroutine[Any, Any, Outcome]],
        context: contextvars.Context,
        done: concurrent.futures.Future[Outcome] | None = None,
    ) -> concurrent.futures.Future[Outcome]:
        """Run make()'s coroutine as a task in context; the future settles when it ends."""
        if done is None:
            done = concurrent.futures.Future()
        future = done
        with self._lock:
            self._submitted.add(future)
            self._queued[future] = (make, context)

        def start() -> None:
            with self._lock:
                if self._queued.pop(future, None) is None:
                    return  # moved to a fresh loop while this one was blocked
            if not future.set_running_or_notify_cancel():
                return
            task = self.loop.create_task(make(), context=context)  # guarded: _guarded_task
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._finished(t, future))

        try:
            self.loop.call_soon_threadsafe(start)
        except RuntimeError as exc:  # closed between the caller's look and now
            with self._lock:
                self._queued.pop(future, None)
            self._fail(future, "the runner's event loop is closed")
            raise HandlerCancelledError("the runner's event loop is closed") from exc
        return future

    def take_queued(self) -> list[_Queued]:
        """The submissions not started yet, taken away (to move them to another loop)."""
        with self._lock:
            taken = [(future, *started) for future, started in self._queued.items()]
            self._queued.clear()
            for future, *_ in taken:
                self._submitted.discard(future)
        return taken

    def _finished(
        self, task: asyncio.Task[Outcome], done: concurrent.futures.Future[Outcome]
    ) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            self._fail(done, "the handler's task was cancelled before it finished")
        elif (exc := task.exception()) is not None:
            done.set_exception(exc)
        else:
            done.set_result(task.result())
        with self._lock:
            self._submitted.discard(done)
        if self._retiring and not self._tasks:
            self.loop.stop()

    def _fail(self, done: concurrent.futures.Future[Outcome], why: str) -> None:
        if not done.done():
            done.set_exception(HandlerCancelledError(why))
        with self._lock:
            self._submitted.discard(done)

    @property
    def running(self) -> int:
        """Deliveries submitted and not finished."""
        with self._lock:
            return len(self._submitted)

    def call(self, callback: Callable[[], object]) -> bool:
        """Run callback on the loop thread soon; False when the loop is closed already."""
        try:
            self.loop.call_soon_threadsafe(callback)
        except RuntimeError:
            return False
        return True

    def ping(self) -> None:
        self.call(self._beat)

    def _beat(self) -> None:
        self.beat = time.monotonic()

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def retire(self) -> None:
        """Stop once the tasks it runs have ended (it gets no new ones)."""
        self._retiring = True
        if not self._tasks:
            self.loop.stop()

    def stack(self) -> str:
        frame = sys._current_frames().get(self.thread.ident or -1)
        if frame is None:
            return ""
        return "".join(traceback.format_stack(frame)[-_STACK_FRAMES:])

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            while True:
                try:
                    self.loop.run_forever()
                except (KeyboardInterrupt, SystemExit) as exc:
                    # From a plain callback (loop.call_soon(sys.exit)): tasks are guarded.
                    # The loop goes on serving every tenant's handlers.
                    log.error("event_loop_callback_escaped", error=repr(exc))
                    continue
                return
        finally:
            self._teardown()

    def _teardown(self) -> None:
        loop = self.loop
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=_TEARDOWN_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
            with contextlib.suppress(TimeoutError):
                loop.run_until_complete(
                    asyncio.wait_for(loop.shutdown_default_executor(), _TEARDOWN_S)
                )
        finally:
            with self._lock:
                left = list(self._submitted)
            for done in left:  # never started, or ignoring its cancellation: never waited for
                self._fail(done, "the runner's event loop stopped before the handler finished")
            loop.close()


class EventLoop:
    """The runner's event loop: started and stopped with the runner, closed when it stops.

    A watchdog pings the loop; when it has not run for settings.stall_s (a coroutine blocking
    it) the blocking stack is logged and new work goes to a fresh loop, while the blocked one
    finishes what it holds whenever it is unblocked, and then closes.
    """

    def __init__(
        self, settings: EventLoopSettings | None = None, *, name: str = "boost-loop"
    ) -> None:
        self._settings = settings or EventLoopSettings()
        self._name = name
        self._lock = threading.Lock()
        self._loops: list[_Loop] = []
        self._current: _Loop | None = None
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None

    @property
    def replaced(self) -> int:
        """Loops replaced because they were blocked."""
        with self._lock:
            return len(self._loops) - (1 if self._loops else 0)

    @property
    def running(self) -> int:
        """Coroutines of deliveries running now, on every loop."""
        with self._lock:
            loops = list(self._loops)
        return sum(loop.running for loop in loops)

    def start(self) -> None:
        with self._lock:
            if self._current is not None:
                return
            self._current = self._new_loop()
        self._watchdog = threading.Thread(
            target=self._watch, name=f"{self._name}-watchdog", daemon=True
        )
        self._watchdog.start()

    def _new_loop(self) -> _Loop:
        loop = _Loop(f"{self._name}-{len(self._loops)}")
        self._loops.append(loop)
        loop.thread.start()
        return loop

    def _watch(self) -> None:
        stall = self._settings.stall_s
        while not self._stopping.wait(stall / 4):
            with self._lock:
                current = self._current
            if current is None:
                return
            if time.monotonic() - current.beat > stall:
                self._replace(current)
            else:
                current.ping()

    def _replace(self, blocked: _Loop) -> None:
        # Read before anything is moved: once a fresh loop takes the waiting work, the blocked
        # call may return, and its stack would no longer show it.
        stack = blocked.stack()
        with self._lock:
            if self._stopping.is_set() or self._current is not blocked:
                return
            fresh = self._current = self._new_loop()
        # What waits for the blocked loop without having started moves; what started stays.
        moved = blocked.take_queued()
        for future, make, context in moved:
            with contextlib.suppress(HandlerCancelledError):
                fresh.submit(make, context, future)
        log.critical(
            "event_loop_blocked",
            blocked_s=round(time.monotonic() - blocked.beat, 3),
            running=blocked.running,
            moved=len(moved),
            stack=stack,
            hint="an async handler or middleware blocked the loop; await asyncio.to_thread(...) "
            "for blocking calls. New deliveries go to a fresh loop.",
        )
        blocked.call(blocked.retire)

    def run(self, make: Callable[[Hop], Coroutine[Any, Any, Outcome]]) -> Outcome:
        """On a worker thread: run make(hop)'s coroutine on the loop and wait for its outcome,
        doing meanwhile the plain work it hands back through hop (sync middleware, a plain
        handler), so that work stays on this worker."""
        with self._lock:
            loop = self._current
        if loop is None:
            raise HandlerCancelledError("the runner's event loop is not running")
        hop = Hop()
        done = loop.submit(lambda: make(hop), contextvars.copy_context())
        done.add_done_callback(lambda _: hop.requests.put(None))
        while (request := hop.requests.get()) is not None:
            request.run()
        try:
            return done.result()
        except _Escaped as escaped:
            raise escaped.original from None

    def complete(self, awaitable: Awaitable[object]) -> object:
        """From a thread other than the loop's: run awaitable on the current loop and wait for
        its result (a processor's on_startup and on_shutdown)."""
        with self._lock:
            current = self._current
        if current is None:
            raise RuntimeError("the runner's event loop is not running")

        async def awaited() -> object:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(awaited(), current.loop).result()

    def cancel_running(self) -> int:
        """Cancel every running coroutine (the grace period is over); returns how many ran.
        Each ends in HandlerCancelledError on its worker, which settles it as a retry."""
        with self._lock:
            loops = list(self._loops)
        running = 0
        for loop in loops:
            if loop.running:
                running += loop.running
                loop.call(loop.cancel_all)
        return running

    def stop(self, timeout: float = _TEARDOWN_S * 2) -> bool:
        """Stop and close every loop; False if one is still blocked at the deadline (its thread
        is left behind, a daemon)."""
        self._stopping.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout)
        with self._lock:
            loops = list(self._loops)
            self._current = None
        for loop in loops:
            loop.call(loop.loop.stop)
        deadline = time.monotonic() + timeout
        closed = True
        for loop in loops:
            loop.thread.join(max(0.0, deadline - time.monotonic()))
            if loop.thread.is_alive():
                closed = False
                log.critical("event_loop_left_blocked", stack=loop.stack())
        return closed


__all__ = ["EventLoop", "EventLoopSettings"]
