"""Moving messages off shared queues in broker transactions, what parking and routing share:
batches, the quarantine of messages without a valid tenant, and the one-by-one fallback.
"""

from __future__ import annotations

import queue as queue_mod
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from boost_tenancy.errors import ConfigError, NotConfirmedError
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.inbound import adopt
from boost_tenancy.processing.middleware import DispatchObserver
from boost_tenancy.processing.outcomes import DeadLetter, Quarantine
from boost_tenancy.processing.settle import Settler
from boost_tenancy.resilience.dead_letter import DeadLetterReason
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.resilience.redelivery import strategy_for
from boost_tenancy.routing import DEFAULT_ROUTING, Routing, check_logical_queue
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import (
    Delivery,
    Outgoing,
    PartlyForwardedError,
    SubscribeRequest,
    Subscription,
    Transport,
)

log = structlog.get_logger("boost_tenancy.ops.moving")

T = TypeVar("T")

MOVE_BATCH = 200
"""Deliveries moved per broker transaction: one commit per message is far too slow for a backlog."""


def copy_of(delivery: Delivery, properties: Mapping[str, str] | None = None) -> WireMessage:
    """The message unchanged (tenant, ids, attempt, application properties and absolute expiry
    kept: a move to a tenant's or a parked queue does not extend its time-to-live), or with
    properties instead of its own."""
    return WireMessage(
        body=delivery.body,
        properties=dict(delivery.properties if properties is None else properties),
        correlation_id=delivery.correlation_id,
        expires_at_ms=delivery.expires_at_ms,
    )


def take_batch(inbox: queue_mod.SimpleQueue[T], timeout: float) -> list[T]:
    """The first item within timeout, then whatever else is already waiting, up to MOVE_BATCH."""
    try:
        batch = [inbox.get(timeout=timeout)]
    except queue_mod.Empty:
        return []
    while len(batch) < MOVE_BATCH:
        try:
            batch.append(inbox.get_nowait())
        except queue_mod.Empty:
            break
    return batch


def unsubscribe_all(transport: Transport, subscriptions: Iterable[Subscription]) -> None:
    """End each subscription; one that fails (a lost connection ends it anyway) is logged."""
    for subscription in subscriptions:
        try:
            transport.unsubscribe(subscription)
        except Exception:
            log.warning("move_unsubscribe_failed", queue=subscription.queue)


def tenancy_violation(delivery: Delivery, raw_tenant: str | None, why: str) -> Quarantine:
    """The quarantine of a message a mover cannot give to any tenant: why, in words (a message
    without the property says so, rather than showing None)."""
    where = f"on shared queue {delivery.queue!r}"
    if raw_tenant is None:
        text = f"no tenantUUID property {where}: the message names no tenant"
    elif not raw_tenant.strip():
        text = f"an empty tenantUUID property {where}: the message names no tenant"
    else:
        text = f"tenantUUID property {raw_tenant!r} {where} {why}"
    return Quarantine(error=ErrorInfo(type="TenancyViolation", text=text), claimed=raw_tenant)


@dataclass(frozen=True, slots=True)
class Move:
    """One delivery's move: message goes to target, counted for tenant."""

    delivery: Delivery
    tenant: TenantId
    target: str
    message: WireMessage


Plan = Callable[[Delivery], Move | Quarantine | None]
"""What becomes of a delivery: moved, quarantined, or None: left unacknowledged, so it returns
to its queue when the subscription ends."""


class QueueMover:
    """Consumes queues and carries out what plan decides for each delivery, in batches.

    Moves go out in one broker transaction per batch (Transport.send_then_ack_many); a Quarantine
    goes through the dispatcher's own Settler (the quarantine queue, the error store, the
    observers). Deliveries are taken over on a thread of the mover's own, never on the
    transport's receiving thread, which over STOMP also reads the receipts.
    """

    def __init__(
        self,
        transport: Transport,
        queues: Sequence[str],
        plan: Plan,
        *,
        selector: SelectorLike | None,
        error_store: ErrorStore,
        prefetch: int,
        name: str,
        routing: Routing = DEFAULT_ROUTING,
        observers: Sequence[DispatchObserver] = (),
        on_moved: Callable[[Sequence[Move]], None] | None = None,
    ) -> None:
        self._queues = tuple(dict.fromkeys(check_logical_queue(q) for q in queues))
        if not self._queues:
            raise ConfigError(f"a {name} needs at least one queue")
        if prefetch < 1:
            raise ConfigError(f"prefetch must be at least 1, got {prefetch}")
        self._transport = transport
        self._plan = plan
        self._selector = selector
        self._prefetch = prefetch
        self._name = name
        self._on_moved = on_moved
        self._strategy = strategy_for(transport.capabilities)
        self._settler = Settler(
            transport,
            error_store,
            settings=DispatchSettings(),
            strategy=self._strategy,
            routing=routing,
            observers=observers,
        )
        self._lock = threading.Lock()
        self._moved: dict[TenantId, int] = {}
        self._quarantined = 0
        self._inbox: queue_mod.SimpleQueue[Delivery] = queue_mod.SimpleQueue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._subscriptions: list[Subscription] = []

    @property
    def queues(self) -> tuple[str, ...]:
        return self._queues

    @property
    def moved(self) -> Mapping[TenantId, int]:
        """Messages moved so far, per tenant."""
        with self._lock:
            return dict(self._moved)

    @property
    def quarantined(self) -> int:
        """Messages moved to quarantine so far."""
        with self._lock:
            return self._quarantined

    def start(self) -> None:
        """Subscribe to every queue on the (connected) transport and start moving."""
        if self._thread is not None:
            return
        thread_name = "boost-" + self._name.replace(" ", "-")
        self._thread = threading.Thread(target=self._loop, name=thread_name, daemon=True)
        self._thread.start()
        self._subscriptions.extend(
            self._transport.subscribe_many(
                [
                    SubscribeRequest(queue, self._selector, self._prefetch, self._inbox.put)
                    for queue in self._queues
                ]
            )
        )

    def stop(self, timeout: float = 10.0, *, unsubscribe: bool = True) -> None:
        """Stop moving (the batch under way ends first, within timeout); what was not moved
        returns to its queue when the subscriptions end: here, or when the caller closes the
        transport (unsubscribe=False)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if unsubscribe:
            unsubscribe_all(self._transport, self._subscriptions)
        self._subscriptions.clear()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            batch = take_batch(self._inbox, 0.1)
            if not batch:
                continue
            try:
                self._move(batch)
            except Exception:
                # Left unacknowledged: they return to their queue when the subscription ends.
                log.exception(
                    "move_failed", mover=self._name, queue=batch[0].queue, count=len(batch)
                )

    def _move(self, batch: list[Delivery]) -> None:
        moves: list[Move] = []
        for delivery in batch:
            if not self._transport.is_live(delivery):
                continue  # the broker redelivers it after the reconnection
            planned = self._plan(delivery)
            if isinstance(planned, Quarantine):
                self._quarantine(delivery, planned)
            elif planned is not None:
                moves.append(planned)
        if not moves:
            return
        try:
            self._transport.send_then_ack_many(
                [(move.delivery, [Outgoing(move.target, move.message)]) for move in moves]
            )
        except NotConfirmedError:
            raise  # whether the broker took the batch is unknown: left to redelivery
        except Exception as exc:
            # One message the wire or the broker refuses must not hold the whole batch: move
            # them one by one, and dead-letter the ones that still fail. Where the forward is
            # not atomic, those the broker took are moved already (PartlyForwardedError).
            done = (
                {id(d) for d in exc.forwarded} if isinstance(exc, PartlyForwardedError) else set()
            )
            left = [move for move in moves if id(move.delivery) not in done]
            self._count(
                [move for move in moves if id(move.delivery) in done]
                + [move for move in left if self._move_one(move)]
            )
            return
        self._count(moves)

    def _move_one(self, move: Move) -> bool:
        if not self._transport.is_live(move.delivery):
            return False  # the broker redelivers it after the reconnection
        try:
            self._transport.send_then_ack(move.delivery, [Outgoing(move.target, move.message)])
        except NotConfirmedError:
            raise
        except Exception as exc:  # refused for this message: settled, never held for good
            if not self._transport.is_live(move.delivery):
                return False
            adopted = adopt(move.delivery)
            self._settler.settle(
                move.tenant,
                adopted.delivery,
                DeadLetter(error=ErrorInfo.of(exc), reason=DeadLetterReason.UNSETTLEABLE),
                message_id=adopted.message_id,
                attempt=self._strategy.attempt_of(adopted.delivery, adopted.attempt),
            )
            return False
        return True

    def _count(self, moves: Sequence[Move]) -> None:
        with self._lock:
            for move in moves:
                self._moved[move.tenant] = self._moved.get(move.tenant, 0) + 1
        if moves and self._on_moved is not None:
            self._on_moved(moves)

    def _quarantine(self, delivery: Delivery, outcome: Quarantine) -> None:
        """What the dispatcher does with a message without a valid tenant: the same Settler
        records it and moves it to the quarantine queue."""
        adopted = adopt(delivery)
        settled = self._settler.settle(
            None,
            adopted.delivery,
            outcome,
            message_id=adopted.message_id,
            attempt=self._strategy.attempt_of(adopted.delivery, adopted.attempt),
        )
        if settled == "quarantined":  # else left unacknowledged, reported by the Settler
            with self._lock:
                self._quarantined += 1


__all__ = [
    "MOVE_BATCH",
    "Move",
    "Plan",
    "QueueMover",
    "copy_of",
    "take_batch",
    "tenancy_violation",
    "unsubscribe_all",
]
