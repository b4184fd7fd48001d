"""Dead letters: where a message that cannot be handled ends, with its error, never dropped.

Each source queue has its own dead-letter queue (DLQ.<queue>) and quarantine queue for tenancy
violations (DLQ.<queue>.quarantine); the tenant property is preserved on both. No copy made here
carries an expiry (WireMessage.expires_at_ms stays None): a dead letter that expired on its queue
would be evidence lost, and a re-driven one starts afresh.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import structlog

from boost_tenancy.header_values import header_text
from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TEXT_PROPERTY,
    ERROR_TYPE_PROPERTY,
    MESSAGE_ID_PROPERTY,
    ORIGINAL_QUEUE_PROPERTY,
    WireMessage,
)
from boost_tenancy.routing import DLQ_PREFIX, QUARANTINE_SUFFIX
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.transports.base import Delivery, Outgoing, Transport

log = structlog.get_logger("boost_tenancy.resilience")


class DeadLetterReason(enum.StrEnum):
    """Why a message was dead-lettered."""

    PERMANENT = "permanent"
    EXHAUSTED = "exhausted"
    UNDECODABLE = "undecodable"
    INVALID = "invalid"
    """Its JSON body does not fit its processor's message model (ModelValidationError)."""
    TENANCY_VIOLATION = "tenancy-violation"
    UNSETTLEABLE = "unsettleable"
    """Its outcome could not be carried out (a copy the broker or the wire refused): the
    original bytes are kept with only the toolkit's own properties."""


def dead_letter_queue(queue: str) -> str:
    """DLQ.<queue>: the dead-letter queue of a source queue."""
    return DLQ_PREFIX + queue


def quarantine_queue(queue: str) -> str:
    """DLQ.<queue>.quarantine: where messages with a missing or foreign tenant go."""
    return DLQ_PREFIX + queue + QUARANTINE_SUFFIX


def source_queue(dead_letter_queue_name: str) -> str:
    """The queue a dead-letter queue belongs to, derived from its own name: the only place a
    re-drive may send to, whatever a message's properties claim."""
    return dead_letter_queue_name.removeprefix(DLQ_PREFIX)


def with_error(
    properties: Mapping[str, str], *, error_type: str, error_text: str
) -> dict[str, str]:
    """properties plus the error, in the header-safe form every copy carries it."""
    updated = dict(properties)
    updated[ERROR_TYPE_PROPERTY] = header_text(error_type, 200)
    updated[ERROR_TEXT_PROPERTY] = header_text(error_text)
    return updated


def dead_letter_copy(
    delivery: Delivery,
    *,
    reason: DeadLetterReason,
    error_type: str,
    error_text: str,
    attempt: int,
) -> WireMessage:
    """The message as it goes to a dead-letter queue: body and properties plus the error."""
    properties = with_error(delivery.properties, error_type=error_type, error_text=error_text)
    # The queue it came from, never a value it arrived with (adopt() renames those).
    properties[ORIGINAL_QUEUE_PROPERTY] = delivery.queue
    properties[DEAD_LETTER_REASON_PROPERTY] = reason.value
    properties[ATTEMPT_PROPERTY] = str(attempt)
    # No expires_at_ms, whatever the original's: a dead letter is the record of a failure and
    # must stay until an operator lists or re-drives it. Expired on DLQ.<queue>, it would be
    # moved or dropped by the broker (Classic: to ActiveMQ.DLQ; Artemis: to its expiry address,
    # or nowhere) and the evidence lost.
    return WireMessage(
        body=delivery.body,
        properties=properties,
        correlation_id=delivery.correlation_id,
        expires_at_ms=None,
    )


def raw_bytes(text: str) -> bytes:
    """The bytes a text body came as: surrogateescape gives back exactly what a transport
    decoded that way; any other lone surrogate has no UTF-8 form and keeps its code units."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def raw_dead_letter_copy(
    delivery: Delivery, *, message_id: str, error_type: str, error_text: str, attempt: int
) -> WireMessage:
    """The last resort when a full copy could not be sent: the original bytes, and of the
    properties only the tenant and the toolkit's own, each made header-safe."""
    body = delivery.body
    if isinstance(body, str):
        body = raw_bytes(body)
    properties = {
        MESSAGE_ID_PROPERTY: message_id,
        ORIGINAL_QUEUE_PROPERTY: delivery.queue,
        DEAD_LETTER_REASON_PROPERTY: DeadLetterReason.UNSETTLEABLE.value,
        ATTEMPT_PROPERTY: str(attempt),
    }
    tenant = delivery.properties.get(TENANT_PROPERTY)
    if tenant is not None:
        properties[TENANT_PROPERTY] = header_text(tenant, 200)
    return WireMessage(
        body=body,
        properties=with_error(properties, error_type=error_type, error_text=error_text),
        correlation_id=None,
        expires_at_ms=None,  # a dead letter never expires (dead_letter_copy says why)
    )


def dead_letter_refused(
    transport: Transport,
    delivery: Delivery,
    target: str,
    *,
    refusal: Exception,
    error: str,
    message_id: str,
    attempt: int,
) -> None:
    """A copy the broker refused on a live connection, away from the dispatcher (a held retry,
    a parked message moved back): the original bytes go to target, the dead-letter queue, and
    delivery is acknowledged, as raw_dead_letter_copy's last resort does. Should that be refused
    too, delivery stays unacknowledged, reported as message_unsettleable, until its connection
    ends and the broker has it back."""
    copy = raw_dead_letter_copy(
        delivery,
        message_id=message_id,
        error_type=type(refusal).__name__,
        error_text=error,
        attempt=attempt,
    )
    try:
        transport.send_then_ack(delivery, [Outgoing(target, copy)])
    except Exception as again:
        log.critical(
            "message_unsettleable", queue=delivery.queue, error=error, last_error=str(again)
        )
        return
    log.error(
        "message_dead_lettered",
        reason=DeadLetterReason.UNSETTLEABLE.value,
        queue=delivery.queue,
        error_type=type(refusal).__name__,
        error=error,
    )


def redrive_copy(properties: Mapping[str, str], delivery: Delivery) -> WireMessage:
    """A dead letter as it goes back to its original queue: error removed, attempts reset."""
    cleaned = {
        name: value
        for name, value in properties.items()
        if name
        not in {
            ORIGINAL_QUEUE_PROPERTY,
            DEAD_LETTER_REASON_PROPERTY,
            ERROR_TYPE_PROPERTY,
            ERROR_TEXT_PROPERTY,
        }
    }
    cleaned[ATTEMPT_PROPERTY] = "1"
    # A dead letter carries no expiry, and an operator's re-drive sends it to be handled, not to
    # expire again on the way.
    return WireMessage(
        body=delivery.body,
        properties=cleaned,
        correlation_id=delivery.correlation_id,
        expires_at_ms=None,
    )
