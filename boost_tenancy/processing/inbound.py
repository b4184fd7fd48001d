"""What a delivery becomes before anything trusts it: every toolkit header read off the wire
with bounds, and toolkit properties a foreign producer set renamed, so no producer can steer
the toolkit.

The dispatcher, the parking sweeper and the dead-letter admin all see deliveries through adopt().
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from boost_tenancy.frozen import fast_init
from boost_tenancy.header_values import (
    derived_id,
    header_text,
    is_valid_id,
    parse_attempt,
    sanitized_id,
)
from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    MESSAGE_ID_PROPERTY,
    ORIGINAL_QUEUE_PROPERTY,
)
from boost_tenancy.transports.base import Delivery

FOREIGN_PREFIX: Final = "foreign_"
"""A toolkit property that cannot be trusted is kept under this prefix, for whoever debugs it."""
FOREIGN_CORRELATION_PROPERTY: Final = FOREIGN_PREFIX + "correlationId"
"""The correlation id as a foreign producer sent it, when it had to be made valid."""
# Only the toolkit writes these, and only on dead-letter copies: on a source queue they come from
# a producer, and re-drive must never take its destination from one.
_DEAD_LETTER_ONLY: Final = (ORIGINAL_QUEUE_PROPERTY, DEAD_LETTER_REASON_PROPERTY)


@fast_init
@dataclass(frozen=True, slots=True)
class Adopted:
    """A delivery with trusted toolkit headers, and the names of those it did not trust."""

    delivery: Delivery
    message_id: str
    attempt: int
    foreign: tuple[str, ...]


def adopt(delivery: Delivery, *, dead_letter: bool = False) -> Adopted:
    """The delivery with a valid message id, a bounded attempt and a valid correlation id.

    dead_letter: the delivery comes from a dead-letter queue, where the toolkit's own
    dead-letter properties are expected; on any other queue they are foreign and renamed.
    """
    props: Mapping[str, str] = delivery.properties
    message_id = props.get(MESSAGE_ID_PROPERTY)
    valid_id = is_valid_id(message_id)
    attempt = parse_attempt(props.get(ATTEMPT_PROPERTY))
    correlation_id = delivery.correlation_id
    valid_correlation = correlation_id is None or is_valid_id(correlation_id)
    if (
        message_id is not None
        and valid_id
        and attempt is not None
        and valid_correlation
        and (
            dead_letter
            or (ORIGINAL_QUEUE_PROPERTY not in props and DEAD_LETTER_REASON_PROPERTY not in props)
        )
    ):
        # What the toolkit's producers send: nothing to rename, the delivery as it came.
        return Adopted(delivery, message_id, attempt, ())
    changed: dict[str, str] = {}
    foreign: list[str] = []

    def distrust(name: str) -> None:
        foreign.append(name)
        changed[FOREIGN_PREFIX + name] = header_text(props[name])

    if message_id is None or not valid_id:
        if message_id is not None:
            distrust(MESSAGE_ID_PROPERTY)
        seed = delivery.broker_message_id or f"{time.time_ns()}"
        message_id = derived_id(seed, delivery.queue, 0)
        changed[MESSAGE_ID_PROPERTY] = message_id
    if attempt is None:
        distrust(ATTEMPT_PROPERTY)
        attempt = 1
        changed[ATTEMPT_PROPERTY] = "1"
    removed: tuple[str, ...] = ()
    if not dead_letter:
        removed = tuple(name for name in _DEAD_LETTER_ONLY if name in props)
        for name in removed:
            distrust(name)
    if correlation_id is not None and not valid_correlation:
        foreign.append("correlation-id")
        changed[FOREIGN_CORRELATION_PROPERTY] = header_text(correlation_id)
        correlation_id = sanitized_id(correlation_id)
    properties = {k: v for k, v in props.items() if k not in removed}
    properties.update(changed)
    adopted = replace(delivery, properties=properties, correlation_id=correlation_id)
    return Adopted(adopted, message_id, attempt, tuple(foreign))


__all__ = ["FOREIGN_CORRELATION_PROPERTY", "FOREIGN_PREFIX", "Adopted", "adopt"]
