"""A processor's lifespan, once per runner: its dependencies opened (processing/dependencies.py),
then on_startup; on_shutdown, then its dependencies closed. A plain def runs on the runner's
starting or stopping thread, an async def on its event loop, where the async handlers run and so
where what they share must live."""

from __future__ import annotations

import inspect
from typing import Literal

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.dependencies import OpenDependencies
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


class Lifespan:
    """The start and the stop of one processor in one runner."""

    def __init__(self, processor: TenantProcessor, event_loop: EventLoop | None) -> None:
        self._processor = processor
        self._event_loop = event_loop
        self._dependencies = OpenDependencies(processor, event_loop)

    def start(self) -> None:
        """Open the dependencies, then run on_startup; what fails is raised, with the
        dependencies opened so far closed again."""
        self._dependencies.open()
        try:
            run_hook(self._processor, "on_startup", self._event_loop)
        except BaseException:
            self._dependencies.close()
            raise

    def stop(self) -> None:
        """Run on_shutdown, then close the dependencies; a failure is logged: a stop always
        goes on."""
        try:
            run_hook(self._processor, "on_shutdown", self._event_loop)
        except Exception as exc:  # a failing hook must not leave the connection open
            log.error(
                "processor_shutdown_failed",
                processor=type(self._processor).__name__,
                error_type=type(exc).__name__,
                error=str(exc),
            )
        finally:
            self._dependencies.close()


__all__ = ["Lifespan", "run_hook"]
