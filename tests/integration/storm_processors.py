"""The processor of the kill-storm test, run in worker processes that are SIGKILLed at random.

`boost-tenancy run tests.integration.storm_processors:StormRecorder --tenant ...` builds it
without arguments, so its queue, log file and handling time come from environment variables.
"""

from __future__ import annotations

import os
import time

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor

QUEUE_ENV = "STORM_TEST_QUEUE"
"""The queue the processor consumes."""
LOG_ENV = "STORM_TEST_LOG"
"""The file every handled message is appended to."""
HANDLE_MS_ENV = "STORM_TEST_HANDLE_MS"
"""Milliseconds each handler takes before it records the message."""

TENANT_PROPERTY = "tenantUUID"


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"the worker needs the environment variable {name}")
    return value


class StormRecorder(TenantProcessor):
    """Takes STORM_TEST_HANDLE_MS, then records one line per handled message and publishes nothing.

    The line is `<subscription tenant> <message id> <attempt> <tenantUUID property>
    <tenantUUID of the body> <pid>`: both tenants the message claims are written next to the
    subscription's, so the test sees any delivery that reached another tenant's handler.
    """

    def __init__(self) -> None:
        self.queues = (_required(QUEUE_ENV),)
        self._handle_s = int(_required(HANDLE_MS_ENV)) / 1000
        # One os.write per line on an O_APPEND descriptor: lines of concurrent handlers never
        # interleave, and a SIGKILLed process keeps every line it wrote (no user-space buffer).
        self._fd = os.open(_required(LOG_ENV), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        # Recorded after the work: a kill mid-handler leaves no line, a kill between the line and
        # the acknowledgement reaching the broker leaves a line and a redelivery (a duplicate).
        time.sleep(self._handle_s)
        body_tenant = message.data.get(TENANT_PROPERTY) if isinstance(message.data, dict) else None
        fields = (
            ctx.tenant.value,
            ctx.message_id,
            str(ctx.attempt),
            message.properties.get(TENANT_PROPERTY) or "-",
            body_tenant or "-",
            str(self._pid),
        )
        os.write(self._fd, (" ".join(fields) + "\n").encode("utf-8"))

    def close(self) -> None:
        os.close(self._fd)
