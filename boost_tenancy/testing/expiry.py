"""What a STOMP broker of each flavour does with a message whose expiry has passed: it never
delivers it. ActiveMQ Classic moves a persistent one to ActiveMQ.DLQ and drops a non-persistent
one (its default dead-letter strategy, seen on 5.17 here); Artemis moves it to the expiry
address when one is configured and drops it otherwise (message-expiry.adoc). Neither copy keeps
an expiry.
"""

from __future__ import annotations

from typing import Final

from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.wire import ORIGINAL_DESTINATION, Sent
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import QUEUE_PREFIX

CLASSIC_DLQ: Final = "ActiveMQ.DLQ"
"""Classic's shared dead-letter queue (SharedDeadLetterStrategy, the default)."""
_EXPIRED_CAUSE: Final = "java.lang.Throwable: Message Expired. Expiration:"


def has_expired(sent: Sent, now_ms: int) -> bool:
    """Whether sent's expiry (epoch ms) is at or before now_ms."""
    expires = sent.message.expires_at_ms
    return expires is not None and expires <= now_ms


def expired_copy(
    flavour: BrokerFlavour,
    sent: Sent,
    *,
    queue: str,
    message_id: str,
    now_ms: int,
    expiry_address: str | None,
) -> tuple[str, Sent] | None:
    """Where an expired message goes and as what, or None: it is dropped.

    Classic (RegionBroker.sendToDeadLetterQueue, as seen on 5.17): persistent messages to
    ActiveMQ.DLQ with originalExpiration, dlqDeliveryFailureCause and original-destination, and
    expires 0. Artemis (QueueImpl.expire): to expiry_address with _AMQ_ORIG_QUEUE,
    _AMQ_ORIG_ADDRESS, _AMQ_ORIG_MESSAGE_ID and _AMQ_ACTUAL_EXPIRY, and expiration 0; nowhere
    without one. (A broker configured to create EXP.<address> queues there is modelled by one
    queue of the address's name.)
    """
    message = sent.message
    expires = message.expires_at_ms
    if flavour is BrokerFlavour.CLASSIC:
        if not message.persistent or queue == CLASSIC_DLQ:
            return None  # processNonPersistent is false by default; no DLQ loop
        target = CLASSIC_DLQ
        added = {
            "originalExpiration": str(expires),
            "dlqDeliveryFailureCause": f"{_EXPIRED_CAUSE}{expires}",
            ORIGINAL_DESTINATION: QUEUE_PREFIX + queue,
        }
    elif expiry_address is None:
        return None
    else:
        target = expiry_address
        added = {
            "_AMQ_ORIG_QUEUE": queue,
            "_AMQ_ORIG_ADDRESS": queue,
            "_AMQ_ORIG_MESSAGE_ID": message_id,
            "_AMQ_ACTUAL_EXPIRY": str(now_ms),
        }
    copy = WireMessage(
        body=message.body,
        properties={**message.properties, **added},
        correlation_id=message.correlation_id,
        persistent=message.persistent,
    )
    return target, Sent(copy, sent.body, sent.body_headers)


__all__ = ["CLASSIC_DLQ", "expired_copy", "has_expired"]
