"""The middleware chain when a handler or middleware is async: each piece runs where it
belongs, plain pieces on the delivery's worker thread, async ones on the runner's event loop."""

from __future__ import annotations

from collections.abc import Sequence

from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.aio import (
    AsyncHandler,
    AsyncMiddleware,
    is_async_handler,
    needs_event_loop,
)
from boost_tenancy.processing.event_loop import EventLoop
from boost_tenancy.processing.middleware import ConsumeFunction, Handler, chain
from boost_tenancy.processing.outcomes import Ack, Outcome
from boost_tenancy.processing.processor import HandlerContext, TenantProcessor, refuse_unawaited
from boost_tenancy.processing.worker_hop import Hop


class _MixedChain:
    """The middleware chain when some piece is async: each piece runs where it belongs, plain
    pieces on the delivery's worker thread, async ones on the loop, in the order given.

    A worker thread still takes every delivery and waits while its coroutine runs on the loop, so
    the worker count and the fairness gate's slots bound async handlers exactly as plain ones, and
    settling stays on the worker.
    """

    def __init__(
        self,
        layers: Sequence[ConsumeFunction],
        handler: Handler | None,
        async_handler: AsyncHandler | None,
        event_loop: EventLoop,
    ) -> None:
        self._layers = tuple(layers)
        self._handler = handler
        self._async_handler = async_handler
        self._loop = event_loop

    def __call__(self, message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        return self._sync(0, message, ctx)

    def _sync(self, index: int, message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        """Layers from index on, entered on the worker thread."""
        if index == len(self._layers):
            if self._handler is not None:
                return self._handler(message, ctx)
        elif not isinstance(layer := self._layers[index], AsyncMiddleware):
            return layer(message, ctx, lambda m, c: self._sync(index + 1, m, c))
        return self._loop.run(lambda hop: self._async(index, message, ctx, hop))

    async def _async(
        self, index: int, message: IncomingMessage, ctx: HandlerContext, hop: Hop
    ) -> Outcome:
        """Layers from index on, entered on the loop."""
        if index == len(self._layers):
            if self._async_handler is not None:
                return await self._async_handler(message, ctx)
            handler = self._handler
            if handler is None:  # pragma: no cover  # build_chain gives one or the other
                raise ConfigError("a chain without a handler")
            return await hop.call(lambda: handler(message, ctx))
        layer = self._layers[index]
        if isinstance(layer, AsyncMiddleware):
            return await layer(message, ctx, lambda m, c: self._async(index + 1, m, c, hop))
        return await hop.call(lambda: layer(message, ctx, lambda m, c: self._sync(index + 1, m, c)))


def _async_terminal(processor: TenantProcessor) -> AsyncHandler:
    async def call_handler(message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        result: object = await processor.handle(message, ctx)  # type: ignore[misc]  # async def
        # `return self.work(...)` without await, as the plain path refuses a returned coroutine.
        refuse_unawaited(processor, result, advice="it did not await it: await it inside handle")
        return Ack(outputs=ctx.outputs)

    return call_handler


def build_chain(
    middleware: Sequence[ConsumeFunction],
    handler: Handler,
    processor: TenantProcessor,
    event_loop: EventLoop | None,
) -> Handler:
    """The dispatcher's chain, called on a worker thread: middleware (outermost first) around
    processor's handle, which is handler when it is a plain def. Without anything async it is
    the plain chain, with no loop involved."""
    if not needs_event_loop(processor, middleware):
        return chain([m for m in middleware if not isinstance(m, AsyncMiddleware)], handler)
    if event_loop is None:
        raise ConfigError(
            f"{type(processor).__name__} has an async handler or middleware and needs an event "
            "loop: run it in a ProcessorRunner, or give the Dispatcher event_loop=EventLoop()"
        )
    if is_async_handler(processor):
        return _MixedChain(middleware, None, _async_terminal(processor), event_loop)
    return _MixedChain(middleware, handler, None, event_loop)


__all__ = ["build_chain"]
