"""TenantProcessor, the handler context, the middleware chain and the per-delivery dispatcher.

A delivery passes the tenant check, is decoded, runs through middleware around the handler and
ends in exactly one outcome (ack, retry, dead letter, quarantine or defer) that is then carried out.
"""

from __future__ import annotations

import abc
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

import structlog

from boost_tenancy.errors import (
    ConfigError,
    MessageDecodeError,
    NotConfirmedError,
    PermanentError,
    TenantMismatchError,
    TransportError,
)
from boost_tenancy.inbound import adopt
from boost_tenancy.messages import (
    Body,
    IncomingMessage,
    Message,
    body_text,
    check_properties,
    decode_json_body,
    derived_id,
    encode_json_body,
)
from boost_tenancy.resilience.dead_letter import (
    DeadLetterReason,
    dead_letter_copy,
    dead_letter_queue,
    quarantine_queue,
    raw_dead_letter_copy,
)
from boost_tenancy.resilience.error_store import (
    ErrorStore,
    FailureOutcome,
    FailureRecord,
    record_failure,
)
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.resilience.redelivery import RedeliveryStrategy, strategy_for
from boost_tenancy.resilience.retry import RetryPolicy, compute_backoff
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Delivery, Outgoing, Transport

log = structlog.get_logger("boost_tenancy.processor")
_handler_log = structlog.get_logger("boost_tenancy.handler")


# -- outcomes -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """Handled: send what the handler published, then acknowledge."""

    outputs: tuple[Outgoing, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Failed, may succeed later: record, then redeliver after delay_ms as the next attempt."""

    error: ErrorInfo
    delay_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """Cannot be handled: record, then move to the dead-letter queue."""

    error: ErrorInfo
    reason: DeadLetterReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Defer:
    """Not now (a fairness limit): redeliver after delay_ms without counting an attempt."""

    delay_ms: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantine:
    """A message of a tenant other than its subscription's (by property or body): never handled,
    recorded and moved to the quarantine queue."""

    error: ErrorInfo
    claimed: str | None
    """The tenant the message claims, as received (may be missing or invalid)."""


Outcome = Ack | Retry | DeadLetter | Defer | Quarantine


# -- handler context ------------------------------------------------------------------------------
@dataclass(slots=True)
class _Outbox:
    items: list[Outgoing] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


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
    _outbox: _Outbox = field(default_factory=_Outbox, repr=False)

    def publish(
        self,
        queue: str,
        body: Mapping[str, Any] | str | bytes,
        *,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> str:
        """Queue a message of this tenant for sending on success; returns its (stable) id."""
        # Resolved now so a bad name fails the handler (retry, then dead letter), not the ack.
        self.routing.physical(queue, self.tenant)
        index = self._outbox.counts.get(queue, 0)
        self._outbox.counts[queue] = index + 1
        message = build_message(
            self.tenant,
            body,
            message_id=derived_id(self.message_id, queue, index),
            correlation_id=self.correlation_id,
            properties=properties,
        )
        self._outbox.items.append((queue, message.to_wire(), max(0, delay_ms)))
        return message.message_id

    @property
    def outputs(self) -> tuple[Outgoing, ...]:
        return tuple(self._outbox.items)


def build_message(
    tenant: TenantId | str,
    body: Mapping[str, Any] | str | bytes,
    *,
    message_id: str | None = None,
    correlation_id: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> Message:
    """A tenant's message; a mapping body becomes JSON text carrying tenantUUID too."""
    tenant_id = TenantId.parse(tenant)
    payload: Body
    if isinstance(body, Mapping):
        payload = encode_json_body(tenant_id, body)
    elif isinstance(body, str | bytes):
        payload = body
    else:
        raise TypeError(f"message body must be a mapping, str or bytes, got {type(body).__name__}")
    extra: dict[str, Any] = {}
    if message_id is not None:
        extra["message_id"] = message_id
    return Message(
        tenant=tenant_id,
        body=payload,
        correlation_id=correlation_id,
        properties=check_properties(properties or {}),
        **extra,
    )


# -- processor ------------------------------------------------------------------------------------
class TenantProcessor(abc.ABC):
    """Subclass, name the queues, implement handle. One instance serves every tenant and worker
    thread at once, so keep per-message state in locals and shared state thread-safe.
    """

    queues: ClassVar[tuple[str, ...]] = ()
    json_body: ClassVar[bool] = True
    """Decode bodies as JSON into message.data; an undecodable body is dead-lettered at once."""

    @abc.abstractmethod
    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Handle one message. Raise PermanentError to dead-letter it, anything else to retry.

        A plain def: it runs on a worker thread. An async def is refused when the processor is
        loaded (check_processor), because nothing would ever await it.
        """

    def close(self) -> None:  # noqa: B027  # an optional hook, empty by default on purpose
        """Release what the processor holds (stores, clients); run() calls it after stopping."""


def check_processor(processor: TenantProcessor) -> None:
    """Refuse a processor the runner cannot run correctly, before any message is taken."""
    handle = getattr(processor, "handle", None)
    name = type(processor).__name__
    if not callable(handle):
        raise ConfigError(f"{name} has no handle(message, ctx) method")
    if inspect.iscoroutinefunction(handle) or inspect.isasyncgenfunction(handle):
        raise ConfigError(
            f"{name}.handle is declared async def, but handlers run on worker threads and "
            "nothing would await it (every message would be acknowledged unhandled). Declare "
            "it as a plain def; to call async code, run it inside with asyncio.run(...)."
        )


Handler = Callable[[IncomingMessage, HandlerContext], Outcome]


class Middleware(Protocol):
    """Wraps the handler; returns an outcome, by calling call_next or deciding by itself."""

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome: ...


@dataclass(frozen=True, slots=True)
class RetryMiddleware:
    """Handler exceptions to outcomes: permanent -> dead letter, others -> retry up to the cap."""

    policy: RetryPolicy
    rand: Callable[[], float] | None = None

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome:
        try:
            return call_next(message, ctx)
        except BaseException as exc:  # SystemExit too: a handler must never end a worker
            return self.failed(exc, message.attempt)

    def failed(self, exc: BaseException, attempt: int) -> DeadLetter | Retry:
        """The outcome of an attempt that raised exc: dead letter or retry after a backoff."""
        error = ErrorInfo.of(exc)
        if isinstance(exc, PermanentError | MessageDecodeError | TenantMismatchError):
            return DeadLetter(error=error, reason=DeadLetterReason.PERMANENT)
        if not isinstance(exc, Exception):
            log.critical("handler_raised_base_exception", error_type=error.type, error=error.text)
        if not self.policy.should_retry(attempt):
            return DeadLetter(error=error, reason=DeadLetterReason.EXHAUSTED)
        delay = (
            compute_backoff(self.policy, attempt)
            if self.rand is None
            else compute_backoff(self.policy, attempt, self.rand)
        )
        return Retry(error=error, delay_ms=delay)


def _chain(middleware: Sequence[Middleware], handler: Handler) -> Handler:
    call = handler
    for layer in reversed(middleware):
        call = _bind(layer, call)
    return call


def _bind(layer: Middleware, call_next: Handler) -> Handler:
    def call(message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        return layer(message, ctx, call_next)

    return call


# -- dispatcher -----------------------------------------------------------------------------------
class DispatchObserver(Protocol):
    """Told of every outcome (accounting); must be cheap and must not raise."""

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None: ...


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
        middleware: Sequence[Middleware] = (),
        strategy: RedeliveryStrategy | None = None,
        observers: Sequence[DispatchObserver] = (),
        routing: Routing = DEFAULT_ROUTING,
    ) -> None:
        check_processor(processor)
        self._processor = processor
        self._routing = routing
        self._transport = transport
        self._store = error_store
        self._settings = settings or DispatchSettings()
        self._strategy = strategy or strategy_for(transport)
        self._observers = tuple(observers)
        self._retry = RetryMiddleware(self._settings.retry)
        self._handler = _chain([*middleware, self._retry], self._call_handler)

    def _call_handler(self, message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        result: object = self._processor.handle(message, ctx)
        if inspect.isawaitable(result):
            # A handler that hands back a coroutine did nothing yet: acknowledging would lose
            # the message. (check_processor refuses async def; this catches wrapped ones.)
            close = getattr(result, "close", None)
            if callable(close):
                close()
            raise PermanentError(
                f"{type(self._processor).__name__}.handle returned an awaitable; handlers must "
                "do their work before returning (async handlers are not supported)"
            )
        return Ack(outputs=ctx.outputs)

    def dispatch(self, tenant: TenantId, delivery: Delivery) -> str:
        """Handle one delivery made to tenant's subscription; returns the outcome's name."""
        if not self._transport.is_live(delivery):
            log.info("delivery_skipped_stale", queue=delivery.queue)
            return "stale"
        # Before anything reads or copies it: bounded attempt, valid ids, foreign toolkit
        # properties renamed.
        adopted = adopt(delivery)
        delivery = adopted.delivery
        message_id = adopted.message_id
        attempt = self._strategy.attempt_of(delivery)
        correlation_id = delivery.correlation_id or message_id
        # Handlers, logs, the error store and observers see the logical queue, whatever the
        # topology; retries and dead letters use delivery.queue, the broker queue it came from.
        queue = self._routing.logical(delivery.queue)
        # bind/reset rather than bound_contextvars: a third of the cost, on every message.
        tokens = structlog.contextvars.bind_contextvars(
            tenant=tenant.value,
            queue=queue,
            message_id=message_id,
            correlation_id=correlation_id,
            attempt=attempt,
        )
        try:
            if adopted.foreign:
                log.warning("foreign_toolkit_headers_renamed", headers=list(adopted.foreign))
            raw_tenant = delivery.properties.get(TENANT_PROPERTY)
            if raw_tenant != tenant.value:
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
            return self._settle(tenant, delivery, outcome, message_id, attempt)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

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
        )
        ctx = HandlerContext(
            tenant=tenant,
            queue=queue,
            message_id=message_id,
            correlation_id=correlation_id,
            attempt=attempt,
            log=_handler_log,
            routing=self._routing,
        )
        try:
            return self._handler(message, ctx)
        except BaseException as exc:  # raised by a middleware, outside RetryMiddleware
            return self._retry.failed(exc, attempt)

    # -- settling ---------------------------------------------------------------------------------
    def _settle(
        self, tenant: TenantId, delivery: Delivery, outcome: Outcome, message_id: str, attempt: int
    ) -> str:
        """Carry the outcome out; when that fails for this message (not for the connection),
        fall back to a raw dead letter. The failure is recorded after the broker took the
        message's copy, so the store never records a move that did not happen."""
        try:
            name = self._carry_out(tenant, delivery, outcome)
        except NotConfirmedError:
            raise  # whether the broker holds the copy is unknown: leave it to redelivery
        except TransportError as exc:
            if not self._transport.is_live(delivery):
                raise  # the connection is gone; the broker redelivers the message
            return self._last_resort(
                tenant, delivery, outcome, exc, message_id=message_id, attempt=attempt
            )
        except Exception as exc:  # an output or copy the wire cannot carry
            return self._last_resort(
                tenant, delivery, outcome, exc, message_id=message_id, attempt=attempt
            )
        self._record_outcome(tenant, delivery, outcome, message_id, attempt)
        return self.notify_observers(_claimed_tenant(tenant, outcome), delivery.queue, name)

    def _carry_out(self, tenant: TenantId, delivery: Delivery, outcome: Outcome) -> str:
        match outcome:
            case Ack(outputs=outputs):
                # ctx.publish names logical queues; the same routing picks the broker queue.
                self._transport.forward(
                    delivery,
                    [
                        (self._routing.physical(queue, tenant), message, delay_ms)
                        for queue, message, delay_ms in outputs
                    ],
                )
                return "processed"
            case Defer(delay_ms=delay_ms, reason=reason):
                self._strategy.defer(self._transport, delivery, delay_ms)
                log.debug("message_deferred", delay_ms=delay_ms, reason=reason)
                return "deferred"
            case Retry(error=error, delay_ms=delay_ms):
                self._strategy.retry(self._transport, delivery, delay_ms, error)
                log.warning(
                    "message_retry_scheduled",
                    delay_ms=delay_ms,
                    error_type=error.type,
                    error=error.text,
                )
                return "retried"
            case DeadLetter(error=error, reason=reason):
                copy = dead_letter_copy(
                    delivery,
                    reason=reason,
                    error_type=error.type,
                    error_text=error.text,
                    attempt=self._strategy.attempt_of(delivery),
                )
                self._transport.forward(delivery, [(dead_letter_queue(delivery.queue), copy, 0)])
                log.error(
                    "message_dead_lettered",
                    reason=reason.value,
                    error_type=error.type,
                    error=error.text,
                )
                return "dead_lettered"
            case Quarantine(error=error, claimed=claimed):
                copy = dead_letter_copy(
                    delivery,
                    reason=DeadLetterReason.TENANCY_VIOLATION,
                    error_type=error.type,
                    error_text=error.text,
                    attempt=self._strategy.attempt_of(delivery),
                )
                self._transport.forward(delivery, [(quarantine_queue(delivery.queue), copy, 0)])
                log.critical(
                    "tenancy_violation",
                    subscription_tenant=tenant.value,
                    message_tenant=claimed,
                    error=error.text,
                )
                return "quarantined"

    def _last_resort(
        self,
        tenant: TenantId,
        delivery: Delivery,
        outcome: Outcome,
        exc: Exception,
        *,
        message_id: str,
        attempt: int,
    ) -> str:
        """The outcome could not be carried out: move the original bytes, with only the
        toolkit's own properties, to the dead-letter (or quarantine) queue; a bounded number of
        tries, then the message is left unacknowledged and reported (it holds one prefetch slot
        of its subscription until the connection ends, never its tenant's other messages)."""
        failure = ErrorInfo.of(exc)
        error = ErrorInfo(
            type=failure.type,
            text=f"{type(outcome).__name__} could not be carried out: {failure.text}",
            trace=failure.trace,
        )
        target = (
            quarantine_queue(delivery.queue)
            if isinstance(outcome, Quarantine)
            else dead_letter_queue(delivery.queue)
        )
        copy = raw_dead_letter_copy(
            delivery,
            message_id=message_id,
            error_type=error.type,
            error_text=error.text,
            attempt=attempt,
        )
        last: Exception = exc
        for retry in range(self._settings.last_resort_attempts):
            try:
                self._transport.forward(delivery, [(target, copy, 0)])
            except NotConfirmedError:
                raise
            except TransportError as again:
                if not self._transport.is_live(delivery):
                    raise
                last = again
            except Exception as again:  # reported below, with the message kept
                last = again
            else:
                log.error(
                    "message_dead_lettered",
                    reason=DeadLetterReason.UNSETTLEABLE.value,
                    error_type=error.type,
                    error=error.text,
                )
                self._record(
                    _claimed_tenant(tenant, outcome),
                    delivery,
                    FailureOutcome.QUARANTINE
                    if isinstance(outcome, Quarantine)
                    else FailureOutcome.DEAD_LETTER,
                    error,
                    message_id=message_id,
                    attempt=attempt,
                    raw_tenant=outcome.claimed if isinstance(outcome, Quarantine) else None,
                )
                return self.notify_observers(
                    _claimed_tenant(tenant, outcome),
                    delivery.queue,
                    "quarantined" if isinstance(outcome, Quarantine) else "dead_lettered",
                )
            time.sleep(0.05 * (retry + 1))
        log.critical(
            "message_unsettleable",
            error_type=error.type,
            error=error.text,
            last_error=str(last),
        )
        return self.notify_observers(tenant, delivery.queue, "unsettled")

    # -- recording --------------------------------------------------------------------------------
    def _record_outcome(
        self, tenant: TenantId, delivery: Delivery, outcome: Outcome, message_id: str, attempt: int
    ) -> None:
        match outcome:
            case Retry(error=error):
                self._record(
                    tenant,
                    delivery,
                    FailureOutcome.RETRY,
                    error,
                    message_id=message_id,
                    attempt=attempt,
                )
            case DeadLetter(error=error):
                self._record(
                    tenant,
                    delivery,
                    FailureOutcome.DEAD_LETTER,
                    error,
                    message_id=message_id,
                    attempt=attempt,
                )
            case Quarantine(error=error, claimed=claimed):
                self._record(
                    _claimed_tenant(tenant, outcome),
                    delivery,
                    FailureOutcome.QUARANTINE,
                    error,
                    message_id=message_id,
                    attempt=attempt,
                    raw_tenant=claimed,
                )
            case Ack() | Defer():
                pass

    def _record(
        self,
        tenant: TenantId | None,
        delivery: Delivery,
        outcome: FailureOutcome,
        error: ErrorInfo,
        *,
        message_id: str,
        attempt: int,
        raw_tenant: str | None = None,
    ) -> None:
        """Bounded in time whatever the store does (record_failure); a failure to record is
        logged at critical level, and the copy carries the error anyway."""
        record_failure(
            self._store,
            FailureRecord(
                tenant=tenant,
                raw_tenant=raw_tenant,
                queue=self._routing.logical(delivery.queue),
                message_id=message_id,
                correlation_id=delivery.correlation_id,
                attempt=attempt,
                outcome=outcome,
                error_type=error.type,
                error_text=error.text,
                trace=error.trace,
                occurred_at=datetime.now(UTC),
            ),
            attempts=self._settings.error_store_attempts,
            timeout_s=self._settings.error_store_timeout_s,
        )

    def notify_observers(self, tenant: TenantId | None, queue: str, outcome: str) -> str:
        """Tell every observer of an outcome (by logical queue); returns the outcome's name."""
        logical = self._routing.logical(queue)
        for observer in self._observers:
            observer.on_outcome(tenant, logical, outcome)
        return outcome


def _claimed_tenant(tenant: TenantId, outcome: Outcome) -> TenantId | None:
    """Whose a failure is: the subscription's tenant, except for a quarantined message, which
    belongs to the tenant it claims (None when that is not a valid tenant)."""
    if not isinstance(outcome, Quarantine):
        return tenant
    if outcome.claimed is None:
        return None
    try:
        return TenantId.parse(outcome.claimed)
    except ValueError:
        return None


__all__ = [
    "Ack",
    "DeadLetter",
    "Defer",
    "DispatchSettings",
    "Dispatcher",
    "ErrorInfo",
    "HandlerContext",
    "Middleware",
    "Outcome",
    "Quarantine",
    "Retry",
    "RetryMiddleware",
    "TenantProcessor",
    "build_message",
    "check_processor",
]
