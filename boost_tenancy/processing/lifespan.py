"""A processor's lifespan hooks (TenantProcessor.on_startup, on_shutdown), run once per runner:
a plain def on the runner's starting or stopping thread, an async def on its event loop, where the
async handlers run and so where what on_startup opens must live."""

from __future__ import annotations

import inspect
from typing import Literal

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.event_loop import EventLoop
from boost_tenancy.processing.processor import TenantProcessor

log = structlog.get_logger("boost_tenancy.processing")

Hook = Literal["on_startup", "on_shutdown"]


def run_hook(processor: TenantProcessor, hook: Hook, event_loop: EventLoop | None) -> None:
    """Call processor's hook and wait for it; what it raises is raised here."""
    result = getattr(processor, hook)()
    if not inspect.isawaitable(result):
        return
    if event_loop is None:
        if inspect.iscoroutine(result):
            result.close()
        raise ConfigError(
            f"{type(processor).__name__}.{hook} returned an awaitable from a plain def: declare "
            f"it `async def {hook}(self)`, so that the runner starts the event loop it runs on"
        )
    event_loop.complete(result)


def shut_down(processor: TenantProcessor, event_loop: EventLoop | None) -> None:
    """run_hook(on_shutdown), whose failure is logged: a stop always goes on."""
    try:
        run_hook(processor, "on_shutdown", event_loop)
    except Exception as exc:  # a failing hook must not leave the connection open
        log.error(
            "processor_shutdown_failed",
            processor=type(processor).__name__,
            error_type=type(exc).__name__,
            error=str(exc),
        )


__all__ = ["run_hook", "shut_down"]
