"""Running a long-lived component in the foreground: start, wait for SIGTERM/SIGINT, stop.

Shared by the processor runner and the parking sweeper, so both stop the same way.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

import structlog

log = structlog.get_logger("boost_tenancy.lifecycle")

T = TypeVar("T")


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
    """
    if install_signal_handlers:

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            log.info("stop_signal_received", signal=signal.Signals(signum).name)
            stop_requested.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    start()
    # A bounded wait: the main thread wakes regularly, so signal handlers always get to run.
    while not stop_requested.wait(0.5):
        if tick is not None:
            tick()
    return stop()
