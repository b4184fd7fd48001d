"""The AMQP transport's event loop (transports/amqp/loop.py) on its own: every function other
threads post runs, in order, whether the loop is waiting or busy; one posted while the loop is
busy runs at the end of the pass, without waking it again."""

from __future__ import annotations

import concurrent.futures
import functools
import gc
import os
import threading
import weakref
from typing import Any

from proton import Event, Handler

from boost_tenancy.transports.amqp.loop import EventLoop


class LoopHandler(Handler):
    """The one call EventLoop asks of its handler, and nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: EventLoop | None = None

    def on_reactor_quiesced(self, event: Event) -> None:
        assert self.loop is not None
        self.loop.run_tasks_before_waiting()

    def on_unhandled(self, method: str, *args: Any) -> None:
        pass


def started_loop() -> EventLoop:
    handler = LoopHandler()
    loop = EventLoop(handler, "test-amqp-loop", on_failure=lambda exc: None)
    handler.loop = loop
    loop.start()
    return loop


def counted_wake_ups(loop: EventLoop) -> list[object]:
    """A list that gets an item each time a post writes the loop's wake-up byte (the test
    reaches into the loop's wake-up to count them)."""
    triggers: list[object] = []
    real_trigger = loop._wakeup.trigger

    def counted_trigger() -> None:
        triggers.append(None)
        real_trigger()

    loop._wakeup.trigger = counted_trigger  # type: ignore[method-assign]
    return triggers


def test_every_posted_task_runs_in_order_from_many_threads() -> None:
    loop = started_loop()
    ran: list[tuple[int, int]] = []
    per_thread = 2_000
    threads = 3
    done = threading.Semaphore(0)

    def poster(index: int) -> None:
        for n in range(per_thread):
            loop.post(functools.partial(ran.append, (index, n)))
        loop.post(done.release)

    try:
        workers = [threading.Thread(target=poster, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for _ in range(threads):
            assert done.acquire(timeout=30)
        assert len(ran) == threads * per_thread
        for index in range(threads):
            assert [n for i, n in ran if i == index] == list(range(per_thread))
    finally:
        loop.stop(5.0)


def test_tasks_posted_while_the_loop_is_busy_run_without_waking_it() -> None:
    loop = started_loop()
    triggers = counted_wake_ups(loop)
    busy = threading.Event()
    release = threading.Event()
    ran: list[int] = []
    finished = threading.Event()

    def long_task() -> None:
        busy.set()
        assert release.wait(30)

    try:
        loop.post(long_task)
        assert busy.wait(30)
        woken_before = len(triggers)
        for n in range(100):
            loop.post(functools.partial(ran.append, n))
        loop.post(finished.set)
        assert len(triggers) == woken_before  # the loop is busy: nobody woke it
        release.set()
        assert finished.wait(30)
        assert ran == list(range(100))
    finally:
        loop.stop(5.0)


class HoldingTimer(Handler):
    """A timer's event that holds the loop thread mid-pass until released."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = threading.Event()
        self.release = threading.Event()

    def on_timer_task(self, event: Event) -> None:
        self.busy.set()
        assert self.release.wait(30)


def test_tasks_posted_in_a_pass_no_wake_up_began_run_without_waking_the_loop() -> None:
    """A pass begun by the sockets or a timer (a broker's answer, a heart-beat), not by a
    wake-up: what other threads post during it runs at its end too. A confirmed send's caller,
    woken by its outcome, posts its next send while the loop is still in that pass; it wrote a
    wake-up byte each time, and the loop made one more pass for it."""
    loop = started_loop()
    triggers = counted_wake_ups(loop)
    timer = HoldingTimer()
    finished = threading.Event()
    ran: list[int] = []
    try:

        def schedule() -> None:
            loop.container.schedule(0.05, timer)

        loop.post(schedule)
        assert timer.busy.wait(30)
        woken_before = len(triggers)
        for n in range(10):
            loop.post(functools.partial(ran.append, n))
        loop.post(finished.set)
        assert len(triggers) == woken_before  # in a pass: nobody woke the loop
        timer.release.set()
        assert finished.wait(30)
        assert ran == list(range(10))
    finally:
        timer.release.set()
        loop.stop(5.0)


def test_a_task_that_raises_ends_the_loop_and_the_tasks_after_it_still_run() -> None:
    """A posted task that raises ends the loop (on_failure hears it); the tasks waiting behind
    it in the same round still run as the loop ends (a transport's own tasks fail their futures
    there), where they were dropped, and their callers waited for their timeouts."""
    failures: list[BaseException] = []
    handler = LoopHandler()
    loop = EventLoop(handler, "test-amqp-loop", on_failure=failures.append)
    handler.loop = loop
    gate = threading.Event()
    loop.post(lambda: gate.wait(30) and None)  # holds the loop while the round is queued
    loop.start()

    def broken() -> None:
        raise RuntimeError("a task's own bug")

    try:
        loop.post(broken)
        behind = [loop.submit(lambda: "ran") for _ in range(3)]
        gate.set()
        not_done = concurrent.futures.wait(behind, timeout=10).not_done
        assert not not_done, f"{len(not_done)} of {len(behind)} tasks dropped"
        assert [type(exc) for exc in failures] == [RuntimeError]
    finally:
        loop.stop(5.0)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_stopped_loop_leaves_no_descriptor_open() -> None:
    """The wake-up pipe is never closed by proton: every AMQP transport closed left
    two descriptors behind, until a long process passed 1,024 and proton's select() failed."""
    before = open_descriptors()
    for _ in range(20):
        loop = started_loop()
        ran = threading.Event()
        loop.post(ran.set)
        assert ran.wait(10)
        loop.stop(10)
        assert loop.is_stopped
        loop.post(ran.clear)  # after stop: run at once, nothing written to the closed pipe
        assert not ran.is_set()
    assert open_descriptors() <= before + 2  # a descriptor or two of pytest's own at most


def test_a_loop_stopped_while_busy_closes_its_descriptors_once_it_ends() -> None:
    """stop() waits at most its timeout; a loop still busy then closes the wake-up pipe itself
    as it ends, where the two descriptors were left open for good."""
    before = open_descriptors()
    loop = started_loop()
    busy, release = threading.Event(), threading.Event()

    def long_task() -> None:
        busy.set()
        release.wait(30)

    loop.post(long_task)
    assert busy.wait(10)
    loop.stop(0.05)
    assert open_descriptors() == before + 2  # the loop still runs: its pipe is open
    release.set()
    loop._thread.join(10)  # the test reaches in to wait for the thread's end
    assert open_descriptors() == before
    kept = os.open(os.devnull, os.O_RDONLY)  # may take a number the pipe had
    try:
        loop.stop(1.0)  # a second stop closes nothing more
        os.fstat(kept)
    finally:
        os.close(kept)


def test_pass_events_go_straight_to_protons_io_handler_and_the_rest_through_its_overrides() -> None:
    from proton import _reactor as proton_reactor
    from proton.handlers import IOHandler

    from boost_tenancy.transports.amqp import loop as loop_module

    handler = LoopHandler()
    loop = EventLoop(handler, "test-amqp-loop", on_failure=lambda exc: None)
    loop.stop(timeout_s=1.0)  # never started: this closes the wake-up pipe
    sparing = loop.container.global_handler
    overrides = sparing._base
    assert isinstance(overrides, proton_reactor.GlobalOverrides), "proton's layout as expected"
    assert isinstance(overrides.base, IOHandler)
    for method in loop_module._STRAIGHT_TO_IO:
        bound = getattr(sparing, method)
        assert bound.__self__ is overrides.base and bound.__func__ is getattr(IOHandler, method)
    # The end of a pass goes to the IOHandler too, which waits for the sockets there; the loop
    # then counts itself awake (test_tasks_posted_in_a_pass_no_wake_up_began_...).
    assert "on_reactor_quiesced" in vars(sparing)
    # A connection's events (its transport, its opening) still reach the connection's
    # overrides first, through GlobalOverrides.
    assert not hasattr(sparing, "on_transport") and not hasattr(sparing, "on_connection_bound")
    # Around any other global handler, every event takes the general way.
    other = loop_module._SparingGlobalHandler(Handler(), lambda: None, lambda _exc: False)
    assert not any(
        method in vars(other) for method in (*loop_module._STRAIGHT_TO_IO, "on_reactor_quiesced")
    )


def test_a_scheduled_callback_runs_once_and_an_ended_loop_lets_go_of_those_still_waiting() -> None:
    """A timer proton still keeps when its loop ends must not keep what its callback holds:
    a connect timeout held the connection, and every transport closed kept 1.6 MiB for good."""

    class Held:
        pass

    loop = started_loop()
    fired: list[object] = []
    ran = threading.Event()
    held = Held()
    gone = weakref.ref(held)
    never = functools.partial(fired.append, held)
    del held

    def soon() -> None:
        fired.append("soon")
        ran.set()

    loop.post(functools.partial(loop.schedule, 0.01, soon))
    loop.post(functools.partial(loop.schedule, 3600, never))
    del never
    assert ran.wait(10)
    loop.stop(10)
    assert loop.is_stopped
    gc.collect()
    assert fired == ["soon"]
    assert gone() is None  # while the loop, and proton's timer in it, are still referenced
