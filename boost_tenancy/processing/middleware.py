"""Middleware: one model for both directions, in one named, ordered list.

A piece of middleware takes part through its hooks, in the order of the list (the first given
is the outermost):
- consume: called as piece(message, ctx, call_next) around the handler, it returns an outcome,
  by calling call_next or deciding by itself; an AsyncMiddleware (aio.py) awaits on the runner's
  event loop, in the same place in the chain, so sync and async handlers go through one chain;
- publish: piece.publish(draft, call_next) around the build of every message its handler
  publishes (boost_tenancy.publishing), and of every message a TenantProducer given it sends;
- outcomes: piece.on_outcome(tenant, queue, outcome) once a delivery is settled, whatever
  decided it (the accounting is this).

Subclass Middleware and override the hooks you need; a plain function of (message, ctx,
call_next) is a consume-only piece. A piece goes where it is given, or before or after a named
one (chain_order.place, or its class's `before`/`after`). The default list, outermost first:

    handling_metrics  consume   handling latency and in-flight per queue (run_processor)
    accounting        outcomes  per-tenant counts of every outcome (run_processor)
    (yours)                     run_processor(middleware=...), the CLI's --middleware
    (the processor's)           TenantProcessor.middleware
    retry             consume   a failure to a retry with backoff, or to a dead letter
    trace             publish   the trace context what is published continues
    ttl               publish   the tenant's message expiry
    limits            publish   the tenant's publishing limits

Two stages stand outside the list because they are not around the handler: before it, the
fairness gate admits a tenant's deliveries to the workers (processing/admission.py: a held
delivery must not hold a worker), and after it, the Settler carries the outcome out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, Protocol, cast

from boost_tenancy.chain_order import arrange, hook_of, name_of, passthrough
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.processor import HandlerContext
from boost_tenancy.publishing import AdmittedSend, Draft, PublishNext
from boost_tenancy.tenancy import TenantId

Handler = Callable[[IncomingMessage, HandlerContext], Outcome]
ConsumeFunction = Callable[[IncomingMessage, HandlerContext, Handler], Outcome]
"""A consume piece: a plain function of (message, ctx, call_next), or a Middleware."""


class DispatchObserver(Protocol):
    """Told of every outcome (accounting); must be cheap and must not raise."""

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None: ...


class Middleware:
    """A piece of the chain in either direction, or both: override consume, publish or
    on_outcome; what is not overridden takes no part, at no cost.

    name is its name in the list (default: the class's, in snake case); before or after a
    named piece puts it there. One instance serves every tenant and worker thread at once.
    """

    name: ClassVar[str] = ""
    before: ClassVar[str | None] = None
    after: ClassVar[str | None] = None

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome:
        return self.consume(message, ctx, call_next)

    @passthrough
    def consume(self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler) -> Outcome:
        """Around the handler: return call_next(message, ctx), or an outcome of your own."""
        return call_next(message, ctx)

    @passthrough
    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        """Around the build of each published message: change the draft before call_next
        (properties, expiry), look at or refuse (raise) what it built after."""
        return call_next(draft)

    @passthrough
    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        """A delivery was settled: outcome is processed, retried, dead_lettered, quarantined or
        deferred. Must be cheap and must not raise."""


def takes_consume(piece: object) -> bool:
    """Whether piece runs around the handler."""
    if isinstance(piece, Middleware):  # consume, or __call__ itself (AsyncMiddleware), overridden
        return (
            hook_of(piece, "consume") is not None or type(piece).__call__ is not Middleware.__call__
        )
    return callable(piece)


class MiddlewareStack:
    """The named, ordered list of one dispatcher: every piece, and what each direction runs."""

    def __init__(self, pieces: Iterable[object]) -> None:
        self.pieces: tuple[object, ...] = arrange(pieces)
        self.consume: tuple[ConsumeFunction, ...] = tuple(
            cast(ConsumeFunction, p) for p in self.pieces if takes_consume(p)
        )
        """Around the handler, outermost first (plain and async pieces)."""
        self.publish: tuple[object, ...] = tuple(
            p for p in self.pieces if hook_of(p, "publish") is not None
        )
        """Around each published message, outermost first."""
        self.observers: tuple[DispatchObserver, ...] = tuple(
            cast(DispatchObserver, p) for p in self.pieces if hook_of(p, "on_outcome") is not None
        )
        """Told of every settled outcome."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every piece's name, outermost first."""
        return tuple(name_of(p) for p in self.pieces)


def chain(middleware: Sequence[ConsumeFunction], handler: Handler) -> Handler:
    """The plain consume chain: middleware (outermost first) around handler."""
    call = handler
    for layer in reversed(middleware):
        call = _bind(layer, call)
    return call


def _bind(layer: ConsumeFunction, call_next: Handler) -> Handler:
    # A Middleware's consume directly, one call less per delivery, unless it overrides __call__.
    step = layer
    if isinstance(layer, Middleware) and type(layer).__call__ is Middleware.__call__:
        step = layer.consume

    def call(message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        return step(message, ctx, call_next)

    return call


__all__ = [
    "ConsumeFunction",
    "DispatchObserver",
    "Handler",
    "Middleware",
    "MiddlewareStack",
    "chain",
    "takes_consume",
]
