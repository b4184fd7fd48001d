"""Async middleware and async handlers: what an async middleware is, and which processors
need the runner's event loop (event_loop.py) and the mixed chain (async_chain.py)."""

from __future__ import annotations

import abc
import inspect
from collections.abc import Awaitable, Callable, Sequence

from boost_tenancy.chain_order import hook_of, unplaced
from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.dependencies import opens_on_event_loop
from boost_tenancy.processing.middleware import ConsumeFunction, Middleware, takes_consume
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.processor import HandlerContext, TenantProcessor

AsyncHandler = Callable[[IncomingMessage, HandlerContext], Awaitable[Outcome]]
"""What an async middleware's call_next is: awaited, it gives the outcome of the rest."""


class AsyncMiddleware(Middleware, abc.ABC):
    """A middleware whose consume awaits: subclass it and implement an async __call__.

    It runs on the runner's event loop, in the same place in the chain as a plain middleware
    would; `await call_next(message, ctx)` gives the outcome of the rest of the chain, wherever
    those pieces run. Like a handler, it must never block the loop. Its publish and on_outcome
    hooks, when it has them, are plain, as a Middleware's.
    """

    @abc.abstractmethod
    async def __call__(  # type: ignore[override]  # the async form of Middleware.__call__
        self, message: IncomingMessage, ctx: HandlerContext, call_next: AsyncHandler
    ) -> Outcome: ...


AnyMiddleware = Middleware | ConsumeFunction | object
"""What ProcessorRunner(middleware=...) takes: Middleware and AsyncMiddleware instances, consume
functions, pieces with a publish or on_outcome hook only, each perhaps placed
(chain_order.place), mixed in any order."""


def is_async_handler(processor: TenantProcessor) -> bool:
    """Whether the processor's handle is an async def, which runs on the runner's event loop."""
    return inspect.iscoroutinefunction(processor.handle)


def check_middleware(piece: object) -> None:
    """Refuse what cannot be a middleware, naming it: a class where an instance belongs (it
    would be called with the message and fail every delivery), anything that takes part in no
    direction, and an async def consume that does not declare itself an AsyncMiddleware (its
    coroutine would be taken for an outcome, never awaited) or an async publish or on_outcome
    hook (they are called on worker threads)."""
    layer = unplaced(piece)
    if isinstance(layer, type):
        raise ConfigError(
            f"middleware {layer.__qualname__} is a class; give an instance of it, "
            f"{layer.__qualname__}(...)"
        )
    for hook_name in ("publish", "on_outcome"):
        hook = hook_of(layer, hook_name)
        if hook is not None and inspect.iscoroutinefunction(hook):
            raise ConfigError(
                f"middleware {type(layer).__qualname__}.{hook_name} is an async def; it must be "
                "a plain def (it runs on the worker or the producer's thread)"
            )
    if isinstance(layer, AsyncMiddleware):
        return
    if not takes_consume(layer) and not any(
        hook_of(layer, name) is not None for name in ("publish", "on_outcome")
    ):
        raise ConfigError(
            f"middleware {layer!r} is a {type(layer).__name__}, not a middleware (a Middleware, "
            "a callable of message, ctx and call_next, an AsyncMiddleware, or an object with a "
            "publish or on_outcome hook)"
        )
    # A class with an async __call__: its instances are not coroutine functions themselves.
    call = type(layer).__call__ if callable(layer) else None
    consume = hook_of(layer, "consume") if isinstance(layer, Middleware) else None
    if (
        inspect.iscoroutinefunction(layer)
        or inspect.iscoroutinefunction(call)
        or inspect.iscoroutinefunction(consume)
    ):
        name = getattr(layer, "__qualname__", type(layer).__qualname__)
        raise ConfigError(
            f"middleware {name} is an async def; subclass "
            "boost_tenancy.processing.aio.AsyncMiddleware so the runner awaits it on its loop"
        )


def middleware_of(processor: TenantProcessor) -> tuple[AnyMiddleware, ...]:
    """The processor's own middleware (TenantProcessor.middleware), each checked: a piece that
    is not callable, or an async def that is not an AsyncMiddleware, is a ConfigError."""
    for layer in processor.middleware:
        try:
            check_middleware(layer)
        except ConfigError as exc:
            raise ConfigError(f"{type(processor).__name__}.middleware: {exc}") from None
    return tuple(processor.middleware)


def needs_event_loop(processor: TenantProcessor, middleware: Sequence[AnyMiddleware]) -> bool:
    """Whether a runner of processor with this middleware must start an event loop: an async
    handler, middleware, lifespan hook or dependency (what on_startup opens must live on the
    handlers' loop)."""
    hooks = (processor.on_startup, processor.on_shutdown)
    return (
        is_async_handler(processor)
        or any(inspect.iscoroutinefunction(hook) for hook in hooks)
        or opens_on_event_loop(processor)
        or any(isinstance(unplaced(m), AsyncMiddleware) for m in middleware)
    )


__all__ = [
    "AnyMiddleware",
    "AsyncHandler",
    "AsyncMiddleware",
    "ConsumeFunction",
    "check_middleware",
    "is_async_handler",
    "middleware_of",
    "needs_event_loop",
]
