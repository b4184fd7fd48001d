"""Processors the CLI tests start with `boost-tenancy run tests.integration.cli_processors:...`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor

ALWAYS_FAILS_QUEUE = "test.cli.always-fails"


class AlwaysFails(TenantProcessor):
    """Raises RuntimeError for every message: each is retried to the cap, then dead-lettered."""

    queues: ClassVar[tuple[str, ...]] = (ALWAYS_FAILS_QUEUE,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.log.info("always_fails_handling", n=message.data.get("n"))
        raise RuntimeError(f"always fails (attempt {ctx.attempt})")


GAUGES_QUEUE = "test.cli.gauges"
RELEASE_FILE_ENV = "GAUGES_TEST_RELEASE_FILE"
"""The file whose existence lets HoldsUntilReleased's handlers return."""


class HoldsUntilReleased(TenantProcessor):
    """Holds every message in its handler until the file RELEASE_FILE_ENV names exists (at most
    a minute), then acknowledges it: with one worker and a prefetch of one, the rest wait."""

    queues: ClassVar[tuple[str, ...]] = (GAUGES_QUEUE,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        release = Path(os.environ[RELEASE_FILE_ENV])
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
