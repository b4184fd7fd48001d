"""Processors the CLI tests start with `boost-tenancy run tests.integration.cli_processors:...`."""

from __future__ import annotations

from typing import ClassVar

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor

ALWAYS_FAILS_QUEUE = "test.cli.always-fails"


class AlwaysFails(TenantProcessor):
    """Raises RuntimeError for every message: each is retried to the cap, then dead-lettered."""

    queues: ClassVar[tuple[str, ...]] = (ALWAYS_FAILS_QUEUE,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.log.info("always_fails_handling", n=message.data.get("n"))
        raise RuntimeError(f"always fails (attempt {ctx.attempt})")
