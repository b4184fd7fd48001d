"""Processors run in worker processes by the crash and shutdown tests.

`boost-tenancy run tests.integration.crash_processors:SlowProcessor --tenant org-A` instantiates
them without arguments, so everything they need comes from environment variables. They write
what they do to a plain log file, one line per event, flushed at once so a killed process keeps
every line it wrote.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor

QUEUE_ENV = "CRASH_TEST_QUEUE"
"""The queue the processor consumes."""
LOG_ENV = "CRASH_TEST_LOG"
"""The file every handled message is appended to."""
MARKER_ENV = "CRASH_TEST_MARKER"
"""The file written (with the message id) once a handler is mid-flight."""
BLOCK_ENV = "CRASH_TEST_BLOCK"
"""SlowProcessor: 1 makes the handler hang (a long handler a crash interrupts)."""
SLEEP_ENV = "CRASH_TEST_SLEEP_S"
"""SleepyProcessor: seconds each handler takes."""

BLOCK_SECONDS = 300.0


def output_queue(queue: str) -> str:
    return f"{queue}.out"


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"the worker needs the environment variable {name}")
    return value


def _append(path: Path, line: str) -> None:
    # One write per line on an O_APPEND file: lines of concurrent handlers never interleave.
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()


def _mark(path: Path, message_id: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(message_id, encoding="utf-8")
    temporary.replace(path)


class SlowProcessor(TenantProcessor):
    """Logs `<message_id> <attempt> <redelivered>`; then hangs (CRASH_TEST_BLOCK=1) or publishes
    one result to `<queue>.out`."""

    def __init__(self) -> None:
        self.queues = (_required(QUEUE_ENV),)
        self._log = Path(_required(LOG_ENV))
        self._marker = Path(_required(MARKER_ENV))
        self._block = os.environ.get(BLOCK_ENV) == "1"

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        _append(self._log, f"{ctx.message_id} {ctx.attempt} {message.redelivered}")
        if self._block:
            _mark(self._marker, ctx.message_id)
            time.sleep(BLOCK_SECONDS)
            return
        ctx.publish(output_queue(ctx.queue), {"source": ctx.message_id})


class SleepyProcessor(TenantProcessor):
    """Logs `start <message_id> <redelivered>`, takes CRASH_TEST_SLEEP_S seconds, then logs
    `done <message_id>`."""

    def __init__(self) -> None:
        self.queues = (_required(QUEUE_ENV),)
        self._log = Path(_required(LOG_ENV))
        self._marker = Path(_required(MARKER_ENV))
        self._sleep_s = float(_required(SLEEP_ENV))

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        _append(self._log, f"start {ctx.message_id} {message.redelivered}")
        if not self._marker.exists():
            _mark(self._marker, ctx.message_id)
        time.sleep(self._sleep_s)
        _append(self._log, f"done {ctx.message_id}")
