"""SIGTERM and SIGINT stop a long-running component whatever its main thread is doing when they
come. The handler used to log and set an Event: run between two bytecodes of code holding the
same lock (structlog's write lock while a line was written, the Event's own while it waited), it
waited for that lock for good and the process never stopped."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading
    import structlog
    from structlog._output import _get_lock_for_file
    from boost_tenancy.lifecycle import run_until_stopped
    from boost_tenancy.observability.logging import configure_logging

    configure_logging("json", "INFO")
    log = structlog.get_logger("test")
    stop_requested = threading.Event()
    hold = sys.argv[1]

    def start():
        # The signal comes while the main thread holds the lock, as if in the middle of
        # writing a log line, or of waiting on the Event: its handler runs right there.
        lock = _get_lock_for_file(sys.stderr) if hold == "log" else stop_requested._cond
        with lock:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        log.info("started")

    run_until_stopped(
        start, lambda: print("stopped", flush=True), stop_requested, install_signal_handlers=True
    )
    """
)


@pytest.mark.parametrize("hold", ["log", "event"])
def test_a_stop_signal_that_interrupts_code_holding_a_lock_still_stops_the_process(
    hold: str,
) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, hold],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the process did not stop within 20 s of SIGTERM (lock held: {hold})")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
    assert '"stop_signal_received"' in done.stderr
    assert '"signal": "SIGTERM"' in done.stderr
