"""Redelivery strategies: who counts attempts and how a failed message comes back.

Over STOMP the toolkit counts (NACK dead-letters on Classic and discards on Artemis); a transport
with a native delivery count can let the broker count instead.
"""

from __future__ import annotations

from typing import Protocol

from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import ATTEMPT_PROPERTY, WireMessage, parse_attempt
from boost_tenancy.resilience.dead_letter import with_error
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.transports.base import Delivery, Outgoing, Transport, TransportCapabilities


class RedeliveryStrategy(Protocol):
    """Reads the attempt number of a delivery and brings a failed one back later."""

    def attempt_of(self, delivery: Delivery) -> int:
        """1 for a first delivery, n for the n-th."""

    def retry(
        self, transport: Transport, delivery: Delivery, delay_ms: int, error: ErrorInfo
    ) -> None:
        """Make the message come back once after delay_ms, counted as one more attempt, with
        the error that failed this attempt on it."""

    def defer(self, transport: Transport, delivery: Delivery, delay_ms: int) -> None:
        """Make the message come back after delay_ms without counting an attempt."""


def _attempt_property(delivery: Delivery) -> int:
    # A foreign producer (a Java service) may not stamp it, or stamp nonsense: a first attempt.
    return parse_attempt(delivery.properties.get(ATTEMPT_PROPERTY)) or 1


def _copy_with_attempt(
    delivery: Delivery, attempt: int, error: ErrorInfo | None = None
) -> WireMessage:
    properties = dict(delivery.properties)
    if error is not None:
        properties = with_error(properties, error_type=error.type, error_text=error.text)
    properties[ATTEMPT_PROPERTY] = str(attempt)
    return WireMessage(
        body=delivery.body, properties=properties, correlation_id=delivery.correlation_id
    )


class RepublishRedelivery:
    """The toolkit counts: a retry is a delayed copy with boostAttempt + 1, the original acked.

    Scheduled delivery (AMQ_SCHEDULED_DELAY) holds the copy back on the broker, so nothing waits
    in the consumer and a crash during the delay loses nothing. Where the broker also counts
    deliveries (native_count), its count of this copy's redeliveries is added: a message that
    kills the process is then counted too, and reaches the dead-letter queue after the cap.
    """

    def __init__(self, *, native_count: bool = False) -> None:
        self._native_count = native_count

    def attempt_of(self, delivery: Delivery) -> int:
        attempt = _attempt_property(delivery)
        if self._native_count and delivery.delivery_count:
            attempt += max(0, delivery.delivery_count)
        return attempt

    def retry(
        self, transport: Transport, delivery: Delivery, delay_ms: int, error: ErrorInfo
    ) -> None:
        copy = _copy_with_attempt(delivery, _attempt_property(delivery) + 1, error)
        transport.send_then_ack(delivery, [Outgoing(delivery.queue, copy, delay_ms)])

    def defer(self, transport: Transport, delivery: Delivery, delay_ms: int) -> None:
        copy = _copy_with_attempt(delivery, _attempt_property(delivery))
        transport.send_then_ack(delivery, [Outgoing(delivery.queue, copy, delay_ms)])


def strategy_for(capabilities: TransportCapabilities) -> RedeliveryStrategy:
    """The strategy a transport's capabilities call for.

    Retries back off on the broker, so a transport must hold messages back (delayed_delivery);
    a native delivery count is used where the broker keeps one.
    """
    if not capabilities.delayed_delivery:
        raise ConfigError(
            "the transport cannot delay a message, so retries could not back off; "
            "use a broker with scheduled delivery (ActiveMQ schedulerSupport, Artemis)"
        )
    return RepublishRedelivery(native_count=capabilities.native_delivery_count)
