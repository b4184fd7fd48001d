"""Middleware: pieces wrapped around the handler (retries, fairness), each returning an outcome.

The chain is built once per dispatcher; the first middleware given is the outermost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.processor import HandlerContext

Handler = Callable[[IncomingMessage, HandlerContext], Outcome]


class Middleware(Protocol):
    """Wraps the handler; returns an outcome, by calling call_next or deciding by itself."""

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome: ...


def chain(middleware: Sequence[Middleware], handler: Handler) -> Handler:
    call = handler
    for layer in reversed(middleware):
        call = _bind(layer, call)
    return call


def _bind(layer: Middleware, call_next: Handler) -> Handler:
    def call(message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        return layer(message, ctx, call_next)

    return call


__all__ = ["Handler", "Middleware", "chain"]
