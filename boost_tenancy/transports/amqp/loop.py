"""A proton Container on its own thread, and the one way other threads reach it.

proton is not thread-safe: every proton object is touched on the loop thread only. Other
threads hand it functions (post, submit). A function posted while the loop is busy runs at the
end of its pass, without waking it; one posted while it waits wakes it, and that one wake-up
runs every function waiting: a burst of acknowledgements costs one pass, not one each.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, TypeVar

import structlog
from cproton import (
    PN_DELIVERY,
    pn_collector_peek,
    pn_collector_pop,
    pn_event_delivery,
    pn_event_type,
)
from proton import Collector, Event, Handler
from proton import _reactor as proton_reactor
from proton.handlers import IOHandler
from proton.reactor import Container

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.amqp.events import Timer

log = structlog.get_logger("boost_tenancy.transports.amqp")

T = TypeVar("T")


_STRAIGHT_TO_IO: Final = (
    "on_selectable_updated",
    "on_selectable_readable",
    "on_selectable_writable",
)
"""The socket events of a pass, which concern no connection: proton's GlobalOverrides hands them
to its IOHandler after looking for the event's connection, which they never have (so does it
on_reactor_quiesced, where the IOHandler waits for the sockets)."""
_GLOBAL_OVERRIDES: Final[type | None] = getattr(proton_reactor, "GlobalOverrides", None)


class _SparingGlobalHandler(Handler):
    """proton's global handler (sockets, connecting, timers) spared the per-message events it
    does nothing with: every delivery and flow event went through three dispatches there, for
    nothing (5 % of the loop thread's time when consuming, profiled).

    The socket events of _STRAIGHT_TO_IO and the end of a pass go to proton's IOHandler directly,
    where the global handler is GlobalOverrides around it (proton 0.39 and 0.40): about a dozen
    such events per confirmed send, each of which went through two more dispatches and a
    connection lookup on the way. Any other layout takes every event the general way."""

    def __init__(
        self,
        base: Handler,
        waited: Callable[[], None],
        connect_failed: Callable[[OSError], bool],
    ) -> None:
        """waited is called on the loop thread each time proton's IOHandler has waited for the
        sockets (or found the pass not over): the loop then runs its handler's
        on_reactor_quiesced before it waits again. Around any other global handler it is never
        called, and every post made while the loop is not marked awake wakes it.

        connect_failed takes an OSError proton raised while it connected a socket, and returns
        whether it ended that connection attempt (see on_unhandled)."""
        super().__init__()
        self._base = base
        self._connect_failed = connect_failed
        io = getattr(base, "base", None)
        if (
            _GLOBAL_OVERRIDES is not None
            and isinstance(base, _GLOBAL_OVERRIDES)
            and isinstance(io, IOHandler)
        ):
            for method in _STRAIGHT_TO_IO:
                setattr(self, method, getattr(io, method))
            wait = io.on_reactor_quiesced

            def on_reactor_quiesced(event: Event) -> None:
                try:
                    wait(event)
                except OSError as exc:
                    if not connect_failed(exc):
                        raise
                waited()

            self.on_reactor_quiesced = on_reactor_quiesced

    def on_delivery(self, event: Event) -> None:
        pass

    def on_link_flow(self, event: Event) -> None:
        pass

    def on_unhandled(self, method: str, *args: Any) -> None:
        """proton connects a socket on the loop thread, where the connection is bound (and, when
        the first address refused, to the next address as the pass ends): a failure other than
        "in progress" (a network or host unreachable, an address family not supported) raises
        there, out of the container, and would end the loop for good. It is the connection
        attempt's failure, and ends that attempt alone: the next address, or a later attempt,
        follows as after any other."""
        event = args[0]
        try:
            event.dispatch(self._base)
        except OSError as exc:
            if not self._connect_failed(exc):
                raise


DeliveryShortcut = Callable[[Any], bool]
"""Takes a delivery event's pn_delivery_t and returns True when it dealt with the event."""


class _ShortcutCollector(Collector):
    """proton's collector, giving delivery events to a shortcut before proton wraps them.

    proton wraps every event in Python objects (the event, its delivery, link, session,
    connection and transport) before any handler sees it: for a delivery, most of what the loop
    thread spent on it. The shortcut reads the C delivery itself; what it does not take is
    wrapped and dispatched as before.
    """

    def __init__(self, shortcut: DeliveryShortcut) -> None:
        super().__init__()
        self._shortcut = shortcut

    def peek(self) -> Event | None:
        impl = self._impl
        shortcut = self._shortcut
        while True:
            event = pn_collector_peek(impl)
            if event and pn_event_type(event) == PN_DELIVERY and shortcut(pn_event_delivery(event)):
                pn_collector_pop(impl)
                continue
            return Event.wrap(event)  # type: ignore[no-untyped-call,no-any-return]


class _Wakeup:
    """The pipe other threads wake the loop through: the container selects on its read end, and
    a byte written to it runs the loop's waiting functions straight from the readable event.

    proton's EventInjector does the same through an application event, put on a locked queue by
    the waking thread, taken off it on the loop thread, then wrapped by proton and dispatched
    through the handlers before the functions run: for every wake-up, which every confirmed send
    takes."""

    def __init__(self, on_wake: Callable[[], None]) -> None:
        self.pipe: tuple[int, ...] = os.pipe()
        """Read end, write end; empty once EventLoop closed them."""
        self._on_wake = on_wake
        self._closed = False
        self._transport = None
        """proton's Selectable reads it off its delegate: a pipe carries no AMQP transport."""

    def fileno(self) -> int:
        return self.pipe[0]

    def trigger(self) -> None:
        os.write(self.pipe[1], b"!")

    def close(self) -> None:
        """Run what waits, then take the pipe out of the container's selection (the loop can end
        once nothing else is selected); the descriptors stay open for the owner to close."""
        self._closed = True
        os.write(self.pipe[1], b"!")

    def on_selectable_init(self, event: Event) -> None:
        selectable = event.selectable
        selectable.reading = True
        selectable.update()

    def on_selectable_readable(self, event: Event) -> None:
        selectable = event.selectable
        os.read(self.pipe[0], 512)
        self._on_wake()
        if self._closed:
            selectable.terminate()
            selectable.update()


class EventLoop:
    """Runs a Container with handler on a daemon thread named name.

    The handler must call run_tasks_before_waiting() from its on_reactor_quiesced(event) method
    (a wake-up runs the waiting tasks itself); on_failure is called
    on the loop thread when the container ends on an error. connect_failed is given an OSError
    proton raised while connecting a socket, and returns whether it ended that attempt (the
    loop goes on); when it returns False, the error ends the loop.
    """

    def __init__(
        self,
        handler: Handler,
        name: str,
        on_failure: Callable[[BaseException], None],
        delivery_shortcut: DeliveryShortcut | None = None,
        connect_failed: Callable[[OSError], bool] = lambda _exc: False,
    ) -> None:
        self.container = Container(handler)
        self.shortcut_installed = False
        """Whether delivery events go to the shortcut first: proton's reactor (0.39 and 0.40)
        keeps its collector as _collector, empty until the container runs; another layout keeps
        proton's own collector, and every delivery takes the wrapped path."""
        collector = getattr(self.container, "_collector", None)
        if (
            delivery_shortcut is not None
            and isinstance(collector, Collector)
            and not pn_collector_peek(collector._impl)
        ):
            self.container._collector = _ShortcutCollector(delivery_shortcut)
            self.shortcut_installed = True
        self.container.global_handler = _SparingGlobalHandler(
            self.container.global_handler, self.awake, connect_failed
        )
        self._wakeup = _Wakeup(self.run_tasks)
        # proton's annotation names its own two handlers; any object with a fileno and these
        # selectable events is one (its IOHandler selects on fileno()).
        self.container.selectable(self._wakeup)  # type: ignore[arg-type]
        self._lock = threading.Lock()
        self._tasks: deque[Callable[[], None]] = deque()
        self._wake_pending = False
        self._awake = False
        """The loop thread runs waiting tasks before it next waits: a post need not wake it.
        Set True on the loop thread only; set False only under the lock, with no task waiting."""
        self._stopped = False
        self._timers: set[Timer] = set()
        """Scheduled and not fired yet: disarmed when the loop ends (schedule)."""
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
            for timer in self._timers:
                timer.disarm()
            self._timers.clear()
            # Nothing selects on the pipe now, and nothing writes to it once stopped: it is
            # closed here, also where stop() gave up waiting for this thread.
            self._close_pipe()

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
                wake = not self._awake and not self._wake_pending
                if wake:
                    self._wake_pending = True
                    # Under the lock: stop() closes the pipe under it, so a wake never writes
                    # to a descriptor closed (or reused) meanwhile.
                    self._wakeup.trigger()
        if stopped:
            task()

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

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> None:
        """Loop thread: call callback after delay_s, unless the loop has ended by then.

        An ended loop lets go of every callback still waiting. proton keeps a timer until its
        time comes, and a callback that holds the connection (a connect timeout does) kept the
        whole connection with it for good, proton's buffers included: proton's objects refer
        to their handlers from C, so the garbage collector never found the cycle (1.6 MiB per
        transport opened and closed, measured)."""
        timer = Timer(callback, self._timers.discard)
        self._timers.add(timer)
        self.container.schedule(delay_s, timer)

    def awake(self) -> None:
        """The loop thread is in a pass that ends with run_tasks_before_waiting: posts until
        then need not wake it. Called as each wait for the sockets returns (the global
        handler), and by the connection's handler where a busy pass starts."""
        self._awake = True

    def run_tasks(self) -> None:
        """Run every waiting task (on a wake-up)."""
        with self._lock:
            self._wake_pending = False
            self._awake = True
            tasks = list(self._tasks)
            self._tasks.clear()
        self._run_in_order(tasks)

    def run_tasks_before_waiting(self) -> None:
        """Run every waiting task, until none is left; from then on a post wakes the loop (the
        handler's on_reactor_quiesced: the loop waits for its sockets next)."""
        while True:
            with self._lock:
                if not self._tasks:
                    self._awake = False
                    return
                tasks = list(self._tasks)
                self._tasks.clear()
            self._run_in_order(tasks)

    def _run_in_order(self, tasks: list[Callable[[], None]]) -> None:
        """Run tasks; when one raises (which ends the loop), those after it wait again, first,
        so that the loop's end still runs them and each fails its future at once instead of
        leaving its caller to time out."""
        for index, task in enumerate(tasks):
            try:
                task()
            except BaseException:
                with self._lock:
                    self._tasks.extendleft(reversed(tasks[index + 1 :]))
                raise

    def stop(self, timeout_s: float) -> None:
        """Stop the container and wait for the thread, at most timeout_s. The thread closes the
        wake-up pipe as it ends (the container never closes it: two descriptors per transport,
        leaked on every close before); a loop never started closes it here."""
        if not self._thread.is_alive():
            self._close_pipe()
            return
        self.post(self.container.stop)
        with self._lock:
            if not self._stopped:  # the pipe is still open
                self._wakeup.close()
        self._thread.join(timeout_s)

    def _close_pipe(self) -> None:
        """Close the wake-up pipe once: a second close could end a descriptor the process has
        opened since under the same number."""
        with self._lock:
            self._stopped = True  # no post writes to the pipe from now on
            fds, self._wakeup.pipe = self._wakeup.pipe, ()
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
