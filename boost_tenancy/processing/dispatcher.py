"""The dispatcher: one delivery of one subscription, from the wire to a decided outcome.

It adopts the delivery (inbound.py), checks its tenant, decodes the body, runs the middleware
chain around the handler and hands the outcome to the Settler, which carries it out.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from boost_tenancy.errors import (
    ConfigError,
    ModelValidationError,
    TenantMismatchError,
)
from boost_tenancy.expiry import ExpiryPolicy
from boost_tenancy.json_bodies import decode_json_body
from boost_tenancy.messages import REPLY_TO_PROPERTY, IncomingMessage, PublishCheck, body_text
from boost_tenancy.models import binding_for
from boost_tenancy.observability.tracing import Processing
from boost_tenancy.processing.aio import check_middleware
from boost_tenancy.processing.async_chain import build_chain
from boost_tenancy.processing.event_loop import EventLoop
from boost_tenancy.processing.inbound import adopt
from boost_tenancy.processing.middleware import DispatchObserver, MiddlewareStack
from boost_tenancy.processing.outcomes import Ack, DeadLetter, Defer, Outcome, Quarantine
from boost_tenancy.processing.processor import (
    HandlerContext,
    TenantProcessor,
    check_processor,
    refuse_unawaited,
)
from boost_tenancy.processing.retry import RetryMiddleware, RetryPolicy, policy_for
from boost_tenancy.processing.settle import Settler
from boost_tenancy.publishing import Publisher, default_steps
from boost_tenancy.resilience.dead_letter import DeadLetterReason
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.resilience.redelivery import RedeliveryStrategy, strategy_for
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId, belongs_to
from boost_tenancy.transports.base import Delivery, Transport

log = structlog.get_logger("boost_tenancy.processing")
_handler_log = structlog.get_logger("boost_tenancy.handler")


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchSettings:
    """How failures are treated."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    error_store_attempts: int = 3
    """Writes tried before a failure is logged as unrecorded and handled anyway (never stuck)."""
    error_store_timeout_s: float = 5.0
    """The longest a worker waits for the error store, all tries included; then it logs the
    failure at critical level and settles the message anyway."""
    last_resort_attempts: int = 3
    """Tries to move a message whose outcome could not be carried out, as raw bytes."""

    def __post_init__(self) -> None:
        if self.error_store_attempts < 1:
            raise ConfigError(
                f"error_store_attempts must be at least 1, got {self.error_store_attempts}"
            )
        if not 0 < self.error_store_timeout_s < 3600:
            raise ConfigError(
                f"error_store_timeout_s must be between 0 and 3600, got "
                f"{self.error_store_timeout_s}"
            )
        if self.last_resort_attempts < 1:
            raise ConfigError(
                f"last_resort_attempts must be at least 1, got {self.last_resort_attempts}"
            )


class Dispatcher:
    """Runs one delivery of one subscription through checks, middleware and handler, and settles
    it: whatever its bytes, headers and handler do, it ends in exactly one carried-out outcome,
    or stays unacknowledged only when its connection is gone (the broker then redelivers it).
    """

    def __init__(
        self,
        processor: TenantProcessor,
        transport: Transport,
        error_store: ErrorStore,
        *,
        settings: DispatchSettings | None = None,
        middleware: Sequence[object] = (),
        strategy: RedeliveryStrategy | None = None,
        observers: Sequence[DispatchObserver] = (),
        routing: Routing = DEFAULT_ROUTING,
        publish_guard: PublishCheck | None = None,
        message_ttl: ExpiryPolicy | None = None,
        event_loop: EventLoop | None = None,
    ) -> None:
        """middleware: pieces of the chain (processing/middleware.py), outermost first; with
        observers first, the retry middleware ("retry") and the publish steps ("trace", "ttl"
        over message_ttl, "limits" over publish_guard) after them, they make the dispatcher's
        MiddlewareStack, where a piece may ask to go before or after a named one.

        event_loop runs an async handle or AsyncMiddleware (the runner gives its own)."""
        check_processor(processor)
        self._processor = processor
        self._model = binding_for(processor)
        self._routing = routing
        self._transport = transport
        self._settings = settings or DispatchSettings()
        self._strategy = strategy or strategy_for(transport.capabilities)
        # The processor's own retry policy, when it declares one, over the settings'.
        self._retry = RetryMiddleware(policy_for(processor, self._settings.retry))
        for piece in (*observers, *middleware):
            check_middleware(piece)
        self.middleware = MiddlewareStack(
            [*observers, *middleware, self._retry, *default_steps(publish_guard, message_ttl)]
        )
        self._publisher = Publisher(routing, self.middleware.publish)
        self._handler = build_chain(
            self.middleware.consume, self._call_handler, processor, event_loop
        )
        self._settler = Settler(
            transport,
            error_store,
            settings=self._settings,
            strategy=self._strategy,
            routing=routing,
            observers=self.middleware.observers,
        )

    def _call_handler(self, message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        # An async def handle runs on the event loop; this catches a plain def that hands back
        # a coroutine, which did nothing yet.
        refuse_unawaited(
            self._processor,
            self._processor.handle(message, ctx),
            advice="handlers must do their work before returning, or be declared async def",
        )
        return Ack(outputs=ctx.outputs)

    def dispatch(self, tenant: TenantId, delivery: Delivery) -> str:
        """Handle one delivery made to tenant's subscription; returns the outcome's name.

        It runs in a copy of the caller's context: what it binds for its logs and its trace
        is gone when it returns, with nothing to undo (half the cost of binding and resetting
        each variable, on every message).
        """
        return contextvars.copy_context().run(self._dispatch, tenant, delivery)

    def _dispatch(self, tenant: TenantId, delivery: Delivery) -> str:
        if not self._transport.is_live(delivery):
            log.info("delivery_skipped_stale", queue=delivery.queue)
            return "stale"
        # Before anything reads or copies it: bounded attempt, valid ids, foreign toolkit
        # properties renamed.
        adopted = adopt(delivery)
        delivery = adopted.delivery
        message_id = adopted.message_id
        attempt = self._strategy.attempt_of(delivery, adopted.attempt)
        correlation_id = delivery.correlation_id or message_id
        # Handlers, logs, the error store and observers see the logical queue, whatever the
        # topology; retries and dead letters use delivery.queue, the broker queue it came from.
        queue = self._routing.logical(delivery.queue)
        # The process span, and the trace context what the handler publishes continues.
        trace = Processing(
            delivery.properties,
            destination=delivery.queue,
            queue=queue,
            tenant=tenant.value,
            message_id=message_id,
            correlation_id=correlation_id,
            attempt=attempt,
        )
        # The trace id with the rest, in one call; the context copy drops them (dispatch).
        structlog.contextvars.bind_contextvars(
            tenant=tenant.value,
            queue=queue,
            message_id=message_id,
            correlation_id=correlation_id,
            attempt=attempt,
            trace_id=trace.context.trace_id,
        )
        try:
            if adopted.foreign:
                log.warning("foreign_toolkit_headers_renamed", headers=list(adopted.foreign))
            raw_tenant = delivery.properties.get(TENANT_PROPERTY)
            if not belongs_to(raw_tenant, tenant):
                outcome: Outcome = Quarantine(
                    error=ErrorInfo(
                        type="TenancyViolation",
                        text=(
                            f"tenantUUID property {raw_tenant!r} delivered to the subscription "
                            f"of tenant {tenant.value!r}"
                        ),
                    ),
                    claimed=raw_tenant,
                )
            else:
                outcome = self._decide(
                    tenant,
                    delivery,
                    queue=queue,
                    message_id=message_id,
                    correlation_id=correlation_id,
                    attempt=attempt,
                )
            settled = self._settler.settle(
                tenant, delivery, outcome, message_id=message_id, attempt=attempt, logical=queue
            )
            trace.settled(settled, outcome)
            return settled
        finally:
            trace.end()

    def defer(self, tenant: TenantId, delivery: Delivery, delay_ms: int, reason: str) -> str:
        """Put a delivery back without running it or counting an attempt (the fairness gate
        held it past its hold time); returns the outcome's name."""
        if not self._transport.is_live(delivery):
            return "stale"
        adopted = adopt(delivery)
        return self._settler.settle(
            tenant,
            adopted.delivery,
            Defer(delay_ms=delay_ms, reason=reason),
            message_id=adopted.message_id,
            attempt=self._strategy.attempt_of(adopted.delivery, adopted.attempt),
        )

    def _decide(
        self,
        tenant: TenantId,
        delivery: Delivery,
        *,
        queue: str,
        message_id: str,
        correlation_id: str,
        attempt: int,
    ) -> Outcome:
        data: Any = None
        if self._processor.json_body:
            try:
                data = decode_json_body(body_text(delivery.body), tenant)
            except TenantMismatchError as exc:
                # Recorded under the property's tenant, the one the broker routed it by.
                return Quarantine(
                    error=ErrorInfo.of(exc), claimed=delivery.properties.get(TENANT_PROPERTY)
                )
            except Exception as exc:  # any decoding failure is the message's, never a stall
                return DeadLetter(error=ErrorInfo.of(exc), reason=DeadLetterReason.UNDECODABLE)
        model: Any = None
        if self._model is not None:
            # Before the middleware and the handler, sync or async alike: a body that does not
            # fit its model cannot be helped by a retry.
            try:
                model = self._model.validate(data)
            except ModelValidationError as exc:
                return DeadLetter(error=ErrorInfo.of(exc), reason=DeadLetterReason.INVALID)
            except BaseException as exc:  # the model's own code failed: the retry policy decides
                # (SystemExit and the like too, as from a handler: a validator is user code)
                return self._retry.failed(exc, attempt)
        message = IncomingMessage(
            tenant=tenant,
            queue=queue,
            body=delivery.body,
            message_id=message_id,
            correlation_id=correlation_id,
            attempt=attempt,
            redelivered=delivery.redelivered,
            properties=delivery.properties,
            data=data,
            model=model,
        )
        ctx = HandlerContext(
            tenant=tenant,
            queue=queue,
            message_id=message_id,
            correlation_id=correlation_id,
            attempt=attempt,
            log=_handler_log,
            publisher=self._publisher,
            reply_to=delivery.properties.get(REPLY_TO_PROPERTY),
        )
        try:
            return self._handler(message, ctx)
        except BaseException as exc:  # raised by a middleware, outside RetryMiddleware
            return self._retry.failed(exc, attempt)


__all__ = ["DispatchObserver", "DispatchSettings", "Dispatcher"]
