"""Running a long-lived component: in the foreground, start, wait for SIGTERM/SIGINT, stop
(the processor runner, the parking sweeper, the sample integrations service); in the
background, a step repeated on a thread of its own until closed (Periodic: the readers of
broker statistics).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Final, TypeVar

import structlog

log = structlog.get_logger("boost_tenancy.lifecycle")

T = TypeVar("T")

_NOTICE_S: Final = 0.1
"""How long a noted stop signal waits, at most, for the main loop to see it."""
_TICK_S: Final = 0.5


def run_until_stopped(
    start: Callable[[], object],
    stop: Callable[[], T],
    stop_requested: threading.Event,
    *,
    install_signal_handlers: bool,
    tick: Callable[[], object] | None = None,
) -> T:
    """Start, block until SIGTERM/SIGINT (when handlers are installed) or stop_requested, stop.

    tick runs about twice a second while waiting (a supervisor); returns what stop returned.

    The signal handler only notes the signal. A Python handler runs on the main thread between
    two of its bytecodes, wherever that thread is: one that logged or set an Event could wait
    for a lock the interrupted code holds (structlog's write lock, the Event's own), and the
    process would never stop (a SIGTERM during a log line's write did, in
    tests/unit/test_stop_signals.py). The loop below sees the note within a tenth of a second
    and does the rest.
    """
    received: list[int] = []
    if install_signal_handlers:

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            received.append(signum)  # no lock taken: see above

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    start()
    # A bounded wait: the main thread wakes regularly, so signal handlers always get to run.
    next_tick = time.monotonic() + _TICK_S
    while not received and not stop_requested.wait(_NOTICE_S):
        if tick is not None and time.monotonic() >= next_tick:
            next_tick = time.monotonic() + _TICK_S
            tick()
    if received:
        log.info("stop_signal_received", signal=signal.Signals(received[0]).name)
        stop_requested.set()
    return stop()


class Periodic:
    """Calls step every interval_s on a daemon thread of its own, from start() until close().

    at_start makes the first call at once rather than one interval after start. step handles
    its own failures; one it lets through is logged and the next call comes as usual, so the
    thread outlives a step that raises.
    """

    def __init__(
        self, step: Callable[[], object], *, interval_s: float, name: str, at_start: bool = False
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self._step = step
        self._interval_s = float(interval_s)
        self._name = name
        self._at_start = at_start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_s(self) -> float:
        return self._interval_s

    def start(self) -> None:
        """Start the thread; does nothing if it was started already."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread, waiting for a step under way a little longer than one interval."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval_s + 5)

    def _loop(self) -> None:
        if self._at_start:
            self._run_step()
        while not self._stop.wait(self._interval_s):
            self._run_step()

    def _run_step(self) -> None:
        try:
            self._step()
        except Exception:  # the thread must outlive a failing step; it runs again next time
            log.exception("periodic_step_failed", thread=self._name)
