"""HeldRedelivery: retries and deferrals on a broker that cannot delay a message (RabbitMQ's AMQP
1.0 plugin) hold the original unacknowledged for the delay, then forward as usual."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from structlog.testing import capture_logs

from boost_tenancy.errors import TransportError
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.resilience.redelivery import (
    HeldRedelivery,
    RepublishRedelivery,
    strategy_for,
)
from boost_tenancy.transports.base import Delivery, Outgoing
from boost_tenancy.transports.capabilities import TransportCapabilities
from tests.conftest import wait_until


class Recording:
    """The two transport operations the strategy uses, recorded."""

    def __init__(self) -> None:
        self.live = True
        self.moves: list[tuple[float, Delivery, list[Outgoing]]] = []
        self.lock = threading.Lock()

    def is_live(self, delivery: Delivery) -> bool:
        return self.live

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        with self.lock:
            self.moves.append((time.monotonic(), delivery, list(items)))


def delivery(attempt: str = "2") -> Delivery:
    return Delivery(
        queue="q",
        body="{}",
        properties={"tenantUUID": "org-A", "boostAttempt": attempt},
        correlation_id=None,
        redelivered=False,
        subscription_id="s",
    )


def capabilities(*, delayed: bool) -> TransportCapabilities:
    return TransportCapabilities(
        server_side_selectors=False,
        native_delivery_count=False,
        delayed_delivery=delayed,
        atomic_forward=False,
        atomic_batches=False,
        prefetch_counts_messages=True,
    )


def test_a_broker_without_delays_gets_held_redelivery_and_one_with_delays_does_not() -> None:
    assert isinstance(strategy_for(capabilities(delayed=False)), HeldRedelivery)
    chosen = strategy_for(capabilities(delayed=True))
    assert type(chosen) is RepublishRedelivery


def test_retry_forwards_the_next_attempt_only_after_the_delay() -> None:
    transport = Recording()
    original = delivery("2")
    started = time.monotonic()
    HeldRedelivery().retry(transport, original, 300, ErrorInfo.of(RuntimeError("boom")))  # type: ignore[arg-type]
    assert transport.moves == [], "held: nothing sent, the original not acknowledged"
    assert wait_until(lambda: len(transport.moves) == 1, timeout=5)
    at, moved, items = transport.moves[0]
    assert at - started >= 0.29
    assert moved is original
    [(queue, copy, delay_ms)] = items
    assert (queue, delay_ms) == ("q", 0)
    assert copy.properties["boostAttempt"] == "3"
    assert copy.properties["boostErrorType"] == "RuntimeError"


def test_defer_keeps_the_attempt_and_a_zero_delay_forwards_at_once() -> None:
    transport = Recording()
    HeldRedelivery().defer(transport, delivery("4"), 0)  # type: ignore[arg-type]
    [(_, _, [(_, copy, _)])] = transport.moves
    assert copy.properties["boostAttempt"] == "4"


def test_a_delivery_whose_connection_is_gone_is_left_to_the_broker() -> None:
    transport = Recording()
    HeldRedelivery().retry(transport, delivery(), 100, ErrorInfo.of(ValueError("x")))  # type: ignore[arg-type]
    transport.live = False
    time.sleep(0.4)
    assert transport.moves == [], "the broker redelivers the original; no copy may go out"


def test_held_messages_come_due_in_order_of_their_deadlines() -> None:
    transport = Recording()
    strategy = HeldRedelivery()
    for attempt, delay_ms in (("5", 400), ("2", 100), ("3", 250)):
        strategy.defer(transport, delivery(attempt), delay_ms)  # type: ignore[arg-type]
    assert wait_until(lambda: len(transport.moves) == 3, timeout=5)
    order = [items[0].message.properties["boostAttempt"] for _, _, items in transport.moves]
    assert order == ["2", "3", "5"]


class RefusesCopiesToTheQueue(Recording):
    """A broker refusing what is sent back to the source queue (over its length limit, say)."""

    def __init__(self, *, dead_letters_too: bool = False) -> None:
        super().__init__()
        self.dead_letters_too = dead_letters_too

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        if any(item.queue == delivery.queue for item in items) or self.dead_letters_too:
            raise TransportError("the broker rejected the message: amqp:resource-limit-exceeded")
        super().send_then_ack(delivery, items)


def test_a_copy_the_broker_refuses_sends_the_original_bytes_to_the_dead_letter_queue() -> None:
    """Before, the refusal was logged and the original stayed held, unacknowledged, for as long
    as its connection lived: as after an immediate retry the broker refused, it is dead-lettered."""
    transport = RefusesCopiesToTheQueue()
    original = delivery("2")
    HeldRedelivery().retry(transport, original, 50, ErrorInfo.of(RuntimeError("boom")))  # type: ignore[arg-type]
    assert wait_until(lambda: len(transport.moves) == 1, timeout=5)
    [(_, moved, [(queue, copy, _)])] = transport.moves
    assert moved is original and queue == dead_letter_queue("q")
    assert copy.body == b"{}"
    assert copy.properties["boostDeadLetterReason"] == "unsettleable"
    assert copy.properties["boostAttempt"] == "2"
    assert "resource-limit-exceeded" in copy.properties["boostError"]


def test_when_the_dead_letter_is_refused_too_the_original_is_reported_and_the_timer_goes_on() -> (
    None
):
    transport = RefusesCopiesToTheQueue(dead_letters_too=True)
    strategy = HeldRedelivery()
    with capture_logs() as logs:
        strategy.retry(transport, delivery("2"), 20, ErrorInfo.of(RuntimeError("boom")))  # type: ignore[arg-type]
        assert wait_until(
            lambda: any(entry["event"] == "message_unsettleable" for entry in logs), timeout=5
        )
    later = Recording()
    strategy.defer(later, delivery("3"), 20)  # type: ignore[arg-type]
    assert wait_until(lambda: len(later.moves) == 1, timeout=5), "the timer thread still runs"
