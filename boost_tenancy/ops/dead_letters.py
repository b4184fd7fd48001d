"""Operator actions on dead letters: list a tenant's dead letters with their errors, re-drive them.

Both read DLQ.<physical queue> through the tenant's own selector, so an operator acting for one
tenant never touches another tenant's messages.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from boost_tenancy.errors import (
    DeadLettersNotFoundError,
    QueueStatsUnavailableError,
    TransportError,
)
from boost_tenancy.messages import (
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TEXT_PROPERTY,
    ERROR_TYPE_PROPERTY,
    check_queue_name,
)
from boost_tenancy.processing.inbound import adopt
from boost_tenancy.resilience.dead_letter import dead_letter_queue, redrive_copy, source_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, FailureRecord
from boost_tenancy.resilience.recorder import record_failure
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.selectors import TENANT_PROPERTY, tenant_selector
from boost_tenancy.tenancy import TenantId, belongs_to
from boost_tenancy.transports.base import (
    Delivery,
    Outgoing,
    Subscription,
    Transport,
    queue_stats_reader,
)

log = structlog.get_logger("boost_tenancy.ops")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterView:
    """One dead letter as an operator sees it, with every failure recorded for its message id."""

    message_id: str
    tenant: TenantId
    original_queue: str
    reason: str
    attempts: int
    error_type: str
    error: str
    body: str | bytes
    failures: tuple[FailureRecord, ...]


class _Collector:
    def __init__(self, limit: int, expected: int | None = None) -> None:
        self.items: list[Delivery] = []
        self.limit = limit
        self.expected = expected
        """What the broker said the queue held before reading began (queue_depth), if known."""
        self.lock = threading.Lock()
        self.last = time.monotonic()

    def __call__(self, delivery: Delivery) -> None:
        with self.lock:
            self.items.append(delivery)
            self.last = time.monotonic()

    def wait_idle(self, idle_s: float, max_s: float) -> list[Delivery]:
        """Return what arrived once nothing new came for idle_s, or as soon as the limit, or
        everything the queue held (expected), has come; max_s at most."""
        started = time.monotonic()
        enough = self.limit if self.expected is None else min(self.limit, self.expected)
        while True:
            with self.lock:
                done = (
                    len(self.items) >= enough
                    or time.monotonic() - self.last >= idle_s
                    or time.monotonic() - started >= max_s
                )
                if done:
                    return list(self.items)
            time.sleep(0.02)


def queue_depth(transport: Transport, queue: str) -> int | None:
    """How many messages the broker says queue holds (waiting and in flight; 0: no such queue),
    where the transport reads queue statistics; None where it cannot tell, and then the caller
    reads the queue until it is idle. A listing of an empty queue, or of one whose every message
    has come, saves that wait."""
    if not transport.capabilities.queue_statistics:
        return None
    try:
        stats = queue_stats_reader(transport).queue_stats([queue]).get(queue)
    except (TransportError, QueueStatsUnavailableError):
        return None
    return 0 if stats is None else stats.waiting + stats.in_flight


class DeadLetterAdmin:
    """Lists and re-drives one tenant's dead letters on a connected transport.

    queue names are logical; routing gives the tenant's broker queue, whose dead letters are in
    DLQ.<broker queue> (DLQ.tenant.<tenant>.<queue> for a per-tenant queue).
    """

    def __init__(
        self, transport: Transport, error_store: ErrorStore, *, routing: Routing = DEFAULT_ROUTING
    ) -> None:
        self._transport = transport
        self._store = error_store
        self._routing = routing

    def _read(
        self, tenant: TenantId, queue: str, *, limit: int, idle_s: float, max_s: float
    ) -> tuple[Subscription | None, list[Delivery]]:
        """The tenant's dead letters of queue, read until the queue is idle; with the broker's
        count of its own dead-letter queue, as soon as that many came, and not at all (no
        subscription) when that count is 0. None are acknowledged."""
        dead_letters = dead_letter_queue(self._routing.physical(queue, tenant))
        depth = queue_depth(self._transport, dead_letters)
        if depth == 0:
            return None, []
        collector = _Collector(limit, depth)
        collector.last = time.monotonic()
        subscription = self._transport.subscribe(
            dead_letters,
            selector=self._transport.capabilities.guard_selector(tenant_selector(tenant)),
            prefetch=limit,
            on_delivery=collector,
        )
        delivered = collector.wait_idle(idle_s, max_s)
        # The tenant guard, not only the broker's selector: a delivery of another tenant is left
        # unacknowledged (it returns to the queue on unsubscribe) and never shown or re-driven.
        mine = [d for d in delivered if belongs_to(d.properties.get(TENANT_PROPERTY), tenant)]
        if len(mine) < len(delivered):
            log.critical(
                "dead_letter_of_another_tenant_delivered",
                tenant=tenant.value,
                count=len(delivered) - len(mine),
            )
        return subscription, mine

    def _unsubscribe(self, subscription: Subscription | None) -> None:
        if subscription is not None:
            self._transport.unsubscribe(subscription)

    def list(
        self,
        tenant: TenantId | str,
        queue: str,
        *,
        limit: int = 500,
        idle_s: float = 3.0,
        max_s: float = 30.0,
    ) -> builtins.list[DeadLetterView]:
        """A tenant's dead letters of queue, oldest first; they stay in the dead-letter queue."""
        tenant_id = TenantId.parse(tenant)
        subscription, deliveries = self._read(
            tenant_id, queue, limit=limit, idle_s=idle_s, max_s=max_s
        )
        # Unacknowledged on purpose: unsubscribing returns them to the dead-letter queue.
        self._unsubscribe(subscription)
        views = []
        # Where a re-drive sends them: derived from the dead-letter queue's name, never from
        # what a message claims.
        original = source_queue(dead_letter_queue(self._routing.physical(queue, tenant_id)))
        for delivery in deliveries[:limit]:
            adopted = adopt(delivery, dead_letter=True)
            props = adopted.delivery.properties
            views.append(
                DeadLetterView(
                    message_id=adopted.message_id,
                    tenant=tenant_id,
                    original_queue=original,
                    reason=props.get(DEAD_LETTER_REASON_PROPERTY, ""),
                    attempts=adopted.attempt,
                    error_type=props.get(ERROR_TYPE_PROPERTY, ""),
                    error=props.get(ERROR_TEXT_PROPERTY, ""),
                    body=delivery.body,
                    failures=tuple(
                        self._store.failures(tenant=tenant_id, message_id=adopted.message_id)
                    ),
                )
            )
        return views

    def count(
        self, tenant: TenantId | str, queue: str, *, cap: int = 10_000, idle_s: float = 1.0
    ) -> int:
        """How many of a tenant's dead letters of queue wait (at most cap); they stay there."""
        tenant_id = TenantId.parse(tenant)
        subscription, deliveries = self._read(
            tenant_id, queue, limit=cap, idle_s=idle_s, max_s=60.0
        )
        self._unsubscribe(subscription)
        return len(deliveries)

    def redrive(
        self,
        tenant: TenantId | str,
        queue: str,
        *,
        message_ids: Collection[str] | None = None,
        limit: int = 500,
        idle_s: float = 3.0,
        max_s: float = 60.0,
    ) -> builtins.list[str]:
        """Send a tenant's dead letters back to their original queue with attempts reset.

        Only message_ids when given, and then all of them or none: an id not among the dead
        letters read raises DeadLettersNotFoundError before anything moves. Every re-drive is
        recorded in the error store. Returns the ids re-driven.
        """
        tenant_id = TenantId.parse(tenant)
        wanted = set(message_ids) if message_ids is not None else None
        dead_letters = dead_letter_queue(self._routing.physical(queue, tenant_id))
        # The only destination: the queue this dead-letter queue belongs to, derived from its
        # name. A boostOriginalQueue property could name any queue, another tenant's included.
        target = check_queue_name(source_queue(dead_letters))
        subscription, deliveries = self._read(
            tenant_id, queue, limit=limit, idle_s=idle_s, max_s=max_s
        )
        redriven: builtins.list[str] = []
        try:
            adopted_all = [(delivery, adopt(delivery, dead_letter=True)) for delivery in deliveries]
            if wanted is not None:
                # All or nothing: an id not found is a mistake to report before anything moves.
                missing = sorted(wanted - {adopted.message_id for _, adopted in adopted_all})
                if missing:
                    raise DeadLettersNotFoundError(dead_letters, missing, len(deliveries))
            for delivery, adopted in adopted_all:
                props = adopted.delivery.properties
                if wanted is not None and adopted.message_id not in wanted:
                    continue  # left unacknowledged: returns to the dead-letter queue
                self._transport.send_then_ack(
                    delivery, [Outgoing(target, redrive_copy(props, adopted.delivery))]
                )
                record_failure(
                    self._store,
                    FailureRecord(
                        tenant=tenant_id,
                        queue=self._routing.logical(target),
                        message_id=adopted.message_id,
                        correlation_id=adopted.delivery.correlation_id,
                        attempt=adopted.attempt,
                        outcome=FailureOutcome.REDRIVE,
                        error_type=props.get(ERROR_TYPE_PROPERTY, ""),
                        error_text="re-driven by an operator from " + dead_letters,
                        occurred_at=datetime.now(UTC),
                    ),
                )
                redriven.append(adopted.message_id)
        finally:
            self._unsubscribe(subscription)
        return redriven
