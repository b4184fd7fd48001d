"""TenantProcessor, what a service subclasses, and HandlerContext, what its handler may do.

A handler sees one message of one tenant whose tenant has been checked; what it publishes goes
out only when it returns, together with the acknowledgement.
"""

from __future__ import annotations

import abc
import inspect
import typing
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from boost_tenancy.errors import ConfigError, PermanentError
from boost_tenancy.expiry import ExpiryPolicy
from boost_tenancy.frozen import fast_init
from boost_tenancy.header_values import derived_id
from boost_tenancy.messages import IncomingMessage, M, MessageBody, PublishCheck
from boost_tenancy.models import binding_for
from boost_tenancy.observability.trace_context import TraceContext
from boost_tenancy.observability.tracing import current_trace
from boost_tenancy.publishing import Publisher, default_steps
from boost_tenancy.requests import check_reply_queue
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Outgoing

if TYPE_CHECKING:  # processing.retry imports this module
    from boost_tenancy.processing.retry import RetryPolicy


@dataclass(slots=True)
class _Outbox:
    items: list[Outgoing] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerContext:
    """What a handler knows and may do: its tenant, the ids, the attempt, a bound logger, publish.

    publish stamps this tenant and correlation id; the messages go out only when the handler
    returns, together with the acknowledgement, so a failed handler publishes nothing.
    """

    tenant: TenantId
    queue: str
    message_id: str
    correlation_id: str
    attempt: int
    log: Any
    routing: Routing = DEFAULT_ROUTING
    """Where publish sends: the logical queue maps to this tenant's broker queue."""
    guard: PublishCheck | None = None
    """The tenant's publishing limits, checked at publish (quotas/), without a publisher."""
    ttl: ExpiryPolicy | None = None
    """The tenant's message time-to-live, stamped on what it publishes (quotas.MessageTtl),
    without a publisher."""
    publisher: Publisher | None = None
    """The publish direction of the dispatcher's middleware (boost_tenancy.publishing); None:
    the default steps over routing, guard and ttl."""
    trace: TraceContext | None = field(default_factory=current_trace)
    """The handled message's trace context (its process span's with OpenTelemetry), which what
    publish sends continues (observability/tracing.py)."""
    reply_to: str | None = None
    """The reply queue the handled message names (boostReplyTo, untrusted: reply checks it)."""
    _outbox: _Outbox = field(default_factory=_Outbox, repr=False)

    def publish(
        self,
        queue: str,
        body: MessageBody,
        *,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> str:
        """Queue a message of this tenant for sending on success; returns its (stable) id.

        A mapping, dataclass or pydantic model body is sent as JSON (boost_tenancy.codec);
        a value JSON cannot carry raises MessageEncodeError, a PermanentError: dead-lettered.

        With a time-to-live it carries the absolute expiry the tenant's TTL gives it now (not
        the handled message's: what a handler publishes is a new message).
        Over a publishing limit it raises PublishRateExceededError (a TransientError: the delivery
        is retried later) or MessageTooLargeError (a PermanentError: dead-lettered).
        """
        index = self._outbox.counts.get(queue, 0)
        # A bad queue name or a refusal fails the handler (retry, then dead letter), never the
        # ack; and before the index is taken, so a refused publish caught by the handler leaves
        # the next one the id a retry would give it.
        publisher = self.publisher or Publisher(self.routing, default_steps(self.guard, self.ttl))
        admitted = publisher.admit(
            queue,
            self.tenant,
            body,
            trace=self.trace,
            message_id=derived_id(self.message_id, queue, index),
            correlation_id=self.correlation_id,
            properties=properties,
        )
        self._outbox.counts[queue] = index + 1
        # By logical queue: the settler routes it again with the same routing when it sends.
        self._outbox.items.append(Outgoing(queue, admitted.wire, max(0, delay_ms)))
        return admitted.message.message_id

    def reply(self, body: MessageBody, *, properties: Mapping[str, str] | None = None) -> str:
        """Answer a request (TenantRequester.request): publish body to the reply queue it names,
        as this tenant and with its correlation id, on success like publish. A message that names
        no reply queue, or a queue that is not one (reply.<name>), is a PermanentError: it is
        dead-lettered with the reason, never answered elsewhere."""
        try:
            queue = check_reply_queue(self.reply_to)
        except ConfigError as exc:
            raise PermanentError(f"cannot reply: {exc}") from None
        return self.publish(queue, body, properties=properties)

    @property
    def outputs(self) -> tuple[Outgoing, ...]:
        return tuple(self._outbox.items)


class TenantProcessor(abc.ABC, Generic[M]):
    """Subclass, name the queues, implement handle. One instance serves every tenant and worker
    thread at once, so keep per-message state in locals and shared state thread-safe.

    TenantProcessor[ResizeCommand] declares a message model (boost_tenancy.models): every body
    is validated into it before handle runs, as message.model; one that does not fit is
    dead-lettered at once, reason "invalid".
    """

    queues: ClassVar[tuple[str, ...]] = ()
    publishes: ClassVar[tuple[str, ...]] = ()
    """The queues handle may publish to (ctx.publish): what the processor's AsyncAPI document
    lists as its send operations (boost-tenancy asyncapi); publishing is not limited to them."""
    json_body: ClassVar[bool] = True
    """Decode bodies as JSON into message.data; an undecodable body is dead-lettered at once."""
    model: ClassVar[type[Any] | None] = None
    """The message model (a pydantic v2 model class or a dataclass), or None: message.data only.
    Set by TenantProcessor[Model], or assigned directly."""
    retry_policy: ClassVar[RetryPolicy | None] = None
    """This processor's attempts, backoff and which exceptions it retries
    (processing.retry.RetryPolicy); None uses the settings' (BOOST_MAX_ATTEMPTS, BOOST_RETRY_*)."""
    middleware: ClassVar[tuple[object, ...]] = ()
    """This processor's own middleware (Middleware or AsyncMiddleware instances), outermost
    first: every runner of it runs them inside what the runner is given (run_processor's
    middleware, the CLI's --middleware) and outside the retry middleware."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model" in cls.__dict__:
            return  # assigned in the class body: it wins
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, TenantProcessor):
                (argument,) = typing.get_args(base)
                if isinstance(argument, type):  # not a TypeVar of a generic subclass, not Any
                    cls.model = argument

    @abc.abstractmethod
    def handle(self, message: IncomingMessage[M], ctx: HandlerContext) -> Awaitable[None] | None:
        """Handle one message. Raise PermanentError to dead-letter it, anything else to retry.

        A plain def runs on a worker thread. An async def runs on the runner's event loop while
        a worker waits for it (processing/event_loop.py): it must never block the loop, so blocking
        calls go through `await asyncio.to_thread(...)`.
        """

    def on_startup(self) -> Awaitable[None] | None:  # an optional hook, empty by default
        """Open what the handlers share (an HTTP client pool, a database pool), once per runner
        start, before it connects and subscribes; keep it on the processor (typed attributes
        the handlers read). An async def runs on the runner's event loop, where async handlers
        run. Raising stops the start: nothing is subscribed and on_shutdown is not called."""
        return None

    def on_shutdown(self) -> Awaitable[None] | None:  # an optional hook, empty by default
        """Close what on_startup opened, once, when the runner stops: after the last handler
        finished (or the grace period ended), before the connection closes; also when the start
        failed after on_startup succeeded. An exception is logged, and the stop goes on."""
        return None

    def close(self) -> None:  # an optional hook, empty by default on purpose
        """Release what the processor holds (stores, clients); run() calls it after stopping."""


def refuse_unawaited(processor: TenantProcessor, result: object, *, advice: str) -> None:
    """Raise PermanentError when handle gave back an awaitable (closed first): its work has not
    run, and acknowledging the message would lose it. advice tells the author what to do."""
    if result is None or not inspect.isawaitable(result):
        return
    close = getattr(result, "close", None)
    if callable(close):
        close()
    raise PermanentError(f"{type(processor).__name__}.handle returned an awaitable; {advice}")


def check_processor(processor: TenantProcessor) -> None:
    """Refuse a processor the runner cannot run correctly, before any message is taken."""
    handle = getattr(processor, "handle", None)
    name = type(processor).__name__
    if not callable(handle):
        raise ConfigError(f"{name} has no handle(message, ctx) method")
    if inspect.isasyncgenfunction(handle):
        raise ConfigError(
            f"{name}.handle is an async generator (it yields), and nothing would iterate it. "
            "Declare it as async def without yield, or as a plain def."
        )
    binding_for(processor)  # a model it cannot validate with, or json_body = False with one


__all__ = ["HandlerContext", "TenantProcessor", "check_processor", "refuse_unawaited"]
