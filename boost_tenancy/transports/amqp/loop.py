"""A proton Container on its own thread, and the one way other threads reach it.

proton is not thread-safe: every proton object is touched on the loop thread only. Other
threads hand it functions (post, submit); one wake-up runs every function waiting, so a burst
of acknowledgements costs one pass of the loop, not one each.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Final, TypeVar

import structlog
from proton import Handler
from proton.reactor import ApplicationEvent, Container, EventInjector

from boost_tenancy.errors import TransportError

log = structlog.get_logger("boost_tenancy.transports.amqp")

T = TypeVar("T")

TASKS_EVENT: Final = "boost_tasks"
"""The application event that makes the loop run waiting functions: on_boost_tasks."""


class EventLoop:
    """Runs a Container with handler on a daemon thread named name.

    The handler must call run_tasks() from its on_boost_tasks(event) method; on_failure is
    called on the loop thread when the container ends on an error.
    """

    def __init__(
        self, handler: Handler, name: str, on_failure: Callable[[BaseException], None]
    ) -> None:
        self.container = Container(handler)
        self._injector = EventInjector()
        self.container.selectable(self._injector)
        self._lock = threading.Lock()
        self._tasks: deque[Callable[[], None]] = deque()
        self._wake_pending = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._failure: BaseException | None = None
        self._on_failure = on_failure

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self.container.run()
        except BaseException as exc:  # the loop is gone: every waiter must hear of it
            self._failure = exc
            log.exception("amqp_event_loop_failed")
            self._on_failure(exc)
        finally:
            with self._lock:
                self._stopped = True
                left = list(self._tasks)
                self._tasks.clear()
            for task in left:
                task()  # tasks check is_stopped and fail their futures

    @property
    def is_stopped(self) -> bool:
        return self._stopped

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def post(self, task: Callable[[], None]) -> None:
        """Run task on the loop thread soon; in order with every other posted task."""
        with self._lock:
            if self._stopped:
                stopped = True
            else:
                stopped = False
                self._tasks.append(task)
                wake = not self._wake_pending
                self._wake_pending = True
        if stopped:
            task()
            return
        if wake:
            self._injector.trigger(ApplicationEvent(TASKS_EVENT))

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run fn on the loop thread; its result or exception comes back by the future. A
        future cancelled before fn starts skips fn (the caller gave up waiting)."""
        future: Future[T] = Future()

        def task() -> None:
            if not future.set_running_or_notify_cancel():
                return
            if self._stopped and not self.on_loop_thread():
                future.set_exception(TransportError("the AMQP connection is closed"))
                return
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self.post(task)
        return future

    def run_tasks(self) -> None:
        """Run every waiting task (the handler's on_boost_tasks)."""
        with self._lock:
            self._wake_pending = False
            tasks = list(self._tasks)
            self._tasks.clear()
        for task in tasks:
            task()

    def stop(self, timeout_s: float) -> None:
        """Stop the container and wait for the thread, at most timeout_s."""
        if not self._thread.is_alive():
            self._stopped = True
            return
        self.post(self.container.stop)
        self._injector.close()
        self._thread.join(timeout_s)
