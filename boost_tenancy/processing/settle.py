"""Carrying an outcome out on the broker, and the last resort when that fails for the message.

The failure is recorded after the broker took the message's copy, so the error store never
records a move that did not happen; every path ends the delivery settled or, on a lost
connection, unacknowledged for the broker to redeliver.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog

from boost_tenancy.errors import ConfigError, NotConfirmedError, TransportError
from boost_tenancy.processing.middleware import DispatchObserver
from boost_tenancy.processing.outcomes import Ack, DeadLetter, Defer, Outcome, Quarantine, Retry
from boost_tenancy.resilience.dead_letter import (
    DeadLetterReason,
    dead_letter_copy,
    dead_letter_queue,
    quarantine_queue,
    raw_dead_letter_copy,
)
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, FailureRecord
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.resilience.recorder import record_failure
from boost_tenancy.resilience.redelivery import RedeliveryStrategy
from boost_tenancy.routing import Routing
from boost_tenancy.tenancy import TenantId, claimed_tenant
from boost_tenancy.transports.base import Delivery, Outgoing, Transport

if TYPE_CHECKING:
    from boost_tenancy.processing.dispatcher import DispatchSettings

log = structlog.get_logger("boost_tenancy.processing")


class Settler:
    """Carries out the outcomes of one dispatcher's deliveries on its transport."""

    def __init__(
        self,
        transport: Transport,
        store: ErrorStore,
        *,
        settings: DispatchSettings,
        strategy: RedeliveryStrategy,
        routing: Routing,
        observers: Sequence[DispatchObserver] = (),
    ) -> None:
        self._transport = transport
        self._store = store
        self._settings = settings
        self._strategy = strategy
        self._routing = routing
        self._observers = tuple(observers)

    def settle(
        self,
        tenant: TenantId | None,
        delivery: Delivery,
        outcome: Outcome,
        *,
        message_id: str,
        attempt: int,
        logical: str | None = None,
    ) -> str:
        """Carry the outcome out; when that fails for this message (not for the connection),
        fall back to a raw dead letter. The failure is recorded after the broker took the
        message's copy, so the store never records a move that did not happen.

        logical: the delivery's logical queue when the caller has it already (the dispatcher
        resolves it once per delivery); the store and the observers are told that one."""
        if logical is None:
            logical = self._routing.logical(delivery.queue)
        try:
            name = self._carry_out(tenant, delivery, outcome, attempt)
        except Exception as exc:  # an output or copy the wire or the broker refused
            if self._left_to_redelivery(exc, delivery):
                raise
            return self._last_resort(
                tenant,
                delivery,
                outcome,
                exc,
                message_id=message_id,
                attempt=attempt,
                logical=logical,
            )
        self._record_outcome(
            tenant, delivery, outcome, message_id=message_id, attempt=attempt, logical=logical
        )
        return self._notify(_claimed_tenant(tenant, outcome), logical, name)

    def _carry_out(
        self, tenant: TenantId | None, delivery: Delivery, outcome: Outcome, attempt: int
    ) -> str:
        match outcome:
            case Ack(outputs=outputs) if tenant is not None:
                # ctx.publish names logical queues; the same routing picks the broker queue.
                self._transport.send_then_ack(
                    delivery,
                    [
                        Outgoing(self._routing.physical(queue, tenant), message, delay_ms)
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
                self._move(delivery, dead_letter_queue(delivery.queue), reason, error, attempt)
                log.error(
                    "message_dead_lettered",
                    reason=reason.value,
                    error_type=error.type,
                    error=error.text,
                )
                return "dead_lettered"
            case Quarantine(error=error, claimed=claimed):
                target = quarantine_queue(delivery.queue)
                self._move(delivery, target, DeadLetterReason.TENANCY_VIOLATION, error, attempt)
                log.critical(
                    "tenancy_violation",
                    subscription_tenant=None if tenant is None else tenant.value,
                    message_tenant=claimed,
                    error=error.text,
                )
                return "quarantined"
            case Ack():
                # Without the subscription's tenant nothing can route its outputs.
                raise ConfigError("Ack needs the subscription's tenant")
            case _:
                raise ConfigError(
                    f"the handler's chain returned {type(outcome).__name__}, not an outcome: "
                    "a middleware must return what call_next(message, ctx) returned"
                )

    def _move(
        self,
        delivery: Delivery,
        target: str,
        reason: DeadLetterReason,
        error: ErrorInfo,
        attempt: int,
    ) -> None:
        """Send the message with its error to a dead-letter or quarantine queue, then ack it."""
        copy = dead_letter_copy(
            delivery,
            reason=reason,
            error_type=error.type,
            error_text=error.text,
            attempt=attempt,
        )
        self._transport.send_then_ack(delivery, [Outgoing(target, copy)])

    def _last_resort(
        self,
        tenant: TenantId | None,
        delivery: Delivery,
        outcome: Outcome,
        exc: Exception,
        *,
        message_id: str,
        attempt: int,
        logical: str,
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
        # What happens to the message if the raw copy goes through, recorded as such.
        moved: DeadLetter | Quarantine
        if isinstance(outcome, Quarantine):
            moved, target = replace(outcome, error=error), quarantine_queue(delivery.queue)
        else:
            moved = DeadLetter(error=error, reason=DeadLetterReason.UNSETTLEABLE)
            target = dead_letter_queue(delivery.queue)
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
                self._transport.send_then_ack(delivery, [Outgoing(target, copy)])
            except Exception as again:  # reported below, with the message kept
                if self._left_to_redelivery(again, delivery):
                    raise
                last = again
            else:
                log.error(
                    "message_dead_lettered",
                    reason=DeadLetterReason.UNSETTLEABLE.value,
                    error_type=error.type,
                    error=error.text,
                )
                self._record_outcome(
                    tenant, delivery, moved, message_id=message_id, attempt=attempt, logical=logical
                )
                return self._notify(
                    _claimed_tenant(tenant, moved),
                    logical,
                    "quarantined" if isinstance(moved, Quarantine) else "dead_lettered",
                )
            time.sleep(0.05 * (retry + 1))
        log.critical(
            "message_unsettleable",
            error_type=error.type,
            error=error.text,
            last_error=str(last),
        )
        return self._notify(tenant, logical, "unsettled")

    def _record_outcome(
        self,
        tenant: TenantId | None,
        delivery: Delivery,
        outcome: Outcome,
        *,
        message_id: str,
        attempt: int,
        logical: str,
    ) -> None:
        raw_tenant: str | None = None
        match outcome:
            case Retry(error=error):
                kind = FailureOutcome.RETRY
            case DeadLetter(error=error):
                kind = FailureOutcome.DEAD_LETTER
            case Quarantine(error=error, claimed=raw_tenant):
                kind = FailureOutcome.QUARANTINE
            case Ack() | Defer():
                return
        self._record(
            _claimed_tenant(tenant, outcome),
            delivery,
            kind,
            error,
            message_id=message_id,
            attempt=attempt,
            raw_tenant=raw_tenant,
            logical=logical,
        )

    def _left_to_redelivery(self, exc: Exception, delivery: Delivery) -> bool:
        """Whether a failure to carry an outcome out is the broker's to resolve: a send whose
        receipt never came (whether the broker holds the copy is unknown), or a lost connection
        (the broker redelivers the message). Anything else is this message's to settle."""
        if isinstance(exc, NotConfirmedError):
            return True
        return isinstance(exc, TransportError) and not self._transport.is_live(delivery)

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
        logical: str,
    ) -> None:
        """Bounded in time whatever the store does (record_failure); a failure to record is
        logged at critical level, and the copy carries the error anyway."""
        record_failure(
            self._store,
            FailureRecord(
                tenant=tenant,
                raw_tenant=raw_tenant,
                queue=logical,
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

    def _notify(self, tenant: TenantId | None, logical: str, outcome: str) -> str:
        """Tell every observer of an outcome (by logical queue); returns the outcome's name."""
        for observer in self._observers:
            observer.on_outcome(tenant, logical, outcome)
        return outcome


def _claimed_tenant(tenant: TenantId | None, outcome: Outcome) -> TenantId | None:
    """Whose a failure is: the subscription's tenant, except for a quarantined message, which
    belongs to the tenant it claims (None when that is not a valid tenant)."""
    if not isinstance(outcome, Quarantine):
        return tenant
    return claimed_tenant(outcome.claimed)


__all__ = ["DispatchObserver", "Settler"]
