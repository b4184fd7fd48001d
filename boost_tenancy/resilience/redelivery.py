"""Redelivery strategies: who counts attempts and how a failed message comes back.

Over STOMP the toolkit counts (NACK dead-letters on Classic and discards on Artemis); a transport
with a native delivery count can let the broker count instead.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog

from boost_tenancy.header_values import parse_attempt
from boost_tenancy.messages import ATTEMPT_PROPERTY, MESSAGE_ID_PROPERTY, WireMessage
from boost_tenancy.resilience.dead_letter import (
    dead_letter_queue,
    dead_letter_refused,
    with_error,
)
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.transports.base import Delivery, Outgoing, Transport
from boost_tenancy.transports.capabilities import TransportCapabilities


class RedeliveryStrategy(Protocol):
    """Reads the attempt number of a delivery and brings a failed one back later."""

    def attempt_of(self, delivery: Delivery, stamped: int) -> int:
        """1 for a first delivery, n for the n-th; stamped is the attempt its boostAttempt
        property claims, as adoption read it (processing/inbound.py)."""

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
    # The same message coming back later: it keeps the absolute expiry it was sent with, so no
    # number of retries or deferrals stretches its time-to-live.
    return WireMessage(
        body=delivery.body,
        properties=properties,
        correlation_id=delivery.correlation_id,
        expires_at_ms=delivery.expires_at_ms,
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

    def attempt_of(self, delivery: Delivery, stamped: int) -> int:
        if self._native_count and delivery.delivery_count:
            return stamped + max(0, delivery.delivery_count)
        return stamped

    def retry(
        self, transport: Transport, delivery: Delivery, delay_ms: int, error: ErrorInfo
    ) -> None:
        copy = _copy_with_attempt(delivery, self._attempt(delivery) + 1, error)
        transport.send_then_ack(delivery, [Outgoing(delivery.queue, copy, delay_ms)])

    def defer(self, transport: Transport, delivery: Delivery, delay_ms: int) -> None:
        copy = _copy_with_attempt(delivery, self._attempt(delivery))
        transport.send_then_ack(delivery, [Outgoing(delivery.queue, copy, delay_ms)])

    def _attempt(self, delivery: Delivery) -> int:
        """The attempt this delivery was, as the copy carries it on: with the broker's count,
        the deliveries a crash ended stay counted (the copy starts the broker's count anew)."""
        return self.attempt_of(delivery, _attempt_property(delivery))


log = structlog.get_logger("boost_tenancy.resilience")


class _Timers:
    """One daemon thread running callbacks when they are due, earliest first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._due, (time.monotonic() + delay_s, next(self._order), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="held-retries", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    timeout = None if not self._due else self._due[0][0] - time.monotonic()
                    self._cond.wait(timeout)
                _, _, callback = heapq.heappop(self._due)
            try:
                callback()
            except BaseException:  # one callback ending this thread would strand every other
                log.exception("held_timer_callback_failed")


class HeldRedelivery(RepublishRedelivery):
    """For a broker that cannot hold a message back (RabbitMQ's AMQP 1.0 plugin): the original
    stays unacknowledged, held for this consumer, while a timer waits out the delay; then the
    copy is sent and the original acknowledged, as RepublishRedelivery does at once.

    Nothing is lost: a connection lost meanwhile makes the broker redeliver the original, with
    the attempt it had (not counted again). A held message occupies one prefetch slot until its
    delay ends, so a subscription's prefetch bounds how many wait at once.
    """

    def __init__(self, timers: _Timers | None = None) -> None:
        super().__init__(native_count=False)
        self._timers = timers or _TIMERS

    def retry(
        self, transport: Transport, delivery: Delivery, delay_ms: int, error: ErrorInfo
    ) -> None:
        copy = _copy_with_attempt(delivery, self._attempt(delivery) + 1, error)
        self._later(transport, delivery, Outgoing(delivery.queue, copy), delay_ms)

    def defer(self, transport: Transport, delivery: Delivery, delay_ms: int) -> None:
        copy = _copy_with_attempt(delivery, self._attempt(delivery))
        self._later(transport, delivery, Outgoing(delivery.queue, copy), delay_ms)

    def _later(
        self, transport: Transport, delivery: Delivery, copy: Outgoing, delay_ms: int
    ) -> None:
        if delay_ms <= 0:
            transport.send_then_ack(delivery, [copy])
            return

        def forward() -> None:
            if not transport.is_live(delivery):
                return  # its connection is gone: the broker redelivers the original
            try:
                transport.send_then_ack(delivery, [copy])
            except Exception as exc:  # the timer thread serves every held message: it goes on
                log.warning("held_retry_failed", queue=delivery.queue, error=str(exc))
                if transport.is_live(delivery):
                    # Refused on a live connection (a queue over its limit, say): dead-lettered,
                    # as the dispatcher's last resort does for a copy refused at once.
                    dead_letter_refused(
                        transport,
                        delivery,
                        dead_letter_queue(delivery.queue),
                        refusal=exc,
                        error=f"the retry's copy could not be sent: {exc}",
                        message_id=delivery.properties.get(MESSAGE_ID_PROPERTY, ""),
                        attempt=self._attempt(delivery),
                    )

        self._timers.call_later(delay_ms / 1000.0, forward)


_TIMERS = _Timers()


def strategy_for(capabilities: TransportCapabilities) -> RedeliveryStrategy:
    """The strategy a transport's capabilities call for.

    Retries back off on the broker where it holds messages back (delayed_delivery); elsewhere
    the consumer holds the original unacknowledged for the delay (HeldRedelivery). A native
    delivery count is used where the broker keeps one.
    """
    if not capabilities.delayed_delivery:
        return HeldRedelivery()
    return RepublishRedelivery(native_count=capabilities.native_delivery_count)
