"""Dead letters: where a message that cannot be handled ends, with its error, never dropped.

Each source queue has its own dead-letter queue (DLQ.<queue>) and quarantine queue for tenancy
violations (DLQ.<queue>.quarantine); the tenant property is preserved on both.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TEXT_PROPERTY,
    ERROR_TYPE_PROPERTY,
    ORIGINAL_QUEUE_PROPERTY,
    WireMessage,
)
from boost_tenancy.transports.base import Delivery

DLQ_PREFIX = "DLQ."
QUARANTINE_SUFFIX = ".quarantine"
_ERROR_PROPERTY_LIMIT = 2_000
"""Error text carried on the message itself; the error store keeps the full text."""


class DeadLetterReason(enum.StrEnum):
    """Why a message was dead-lettered."""

    PERMANENT = "permanent"
    EXHAUSTED = "exhausted"
    UNDECODABLE = "undecodable"
    TENANCY_VIOLATION = "tenancy-violation"


def dead_letter_queue(queue: str) -> str:
    """DLQ.<queue>: the dead-letter queue of a source queue."""
    return DLQ_PREFIX + queue


def quarantine_queue(queue: str) -> str:
    """DLQ.<queue>.quarantine: where messages with a missing or foreign tenant go."""
    return DLQ_PREFIX + queue + QUARANTINE_SUFFIX


def dead_letter_copy(
    delivery: Delivery,
    *,
    reason: DeadLetterReason,
    error_type: str,
    error_text: str,
    attempt: int,
) -> WireMessage:
    """The message as it goes to a dead-letter queue: body and properties plus the error."""
    properties = dict(delivery.properties)
    properties[ORIGINAL_QUEUE_PROPERTY] = delivery.properties.get(
        ORIGINAL_QUEUE_PROPERTY, delivery.queue
    )
    properties[DEAD_LETTER_REASON_PROPERTY] = reason.value
    properties[ERROR_TYPE_PROPERTY] = error_type
    properties[ERROR_TEXT_PROPERTY] = error_text[:_ERROR_PROPERTY_LIMIT]
    properties[ATTEMPT_PROPERTY] = str(attempt)
    return WireMessage(
        body=delivery.body, properties=properties, correlation_id=delivery.correlation_id
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
    return WireMessage(
        body=delivery.body, properties=cleaned, correlation_id=delivery.correlation_id
    )
