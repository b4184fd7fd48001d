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

from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TEXT_PROPERTY,
    ERROR_TYPE_PROPERTY,
    MESSAGE_ID_PROPERTY,
    ORIGINAL_QUEUE_PROPERTY,
    check_queue_name,
)
from boost_tenancy.resilience.dead_letter import dead_letter_queue, redrive_copy
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, FailureRecord
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Delivery, Transport


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
    def __init__(self, limit: int) -> None:
        self.items: list[Delivery] = []
        self.limit = limit
        self.lock = threading.Lock()
        self.last = time.monotonic()

    def __call__(self, delivery: Delivery) -> None:
        with self.lock:
            self.items.append(delivery)
            self.last = time.monotonic()

    def wait_idle(self, idle_s: float, max_s: float) -> list[Delivery]:
        """Return what arrived once nothing new came for idle_s (or the limit or max_s is hit)."""
        started = time.monotonic()
        while True:
            with self.lock:
                done = (
                    len(self.items) >= self.limit
                    or time.monotonic() - self.last >= idle_s
                    or time.monotonic() - started >= max_s
                )
                if done:
                    return list(self.items)
            time.sleep(0.02)


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
    ) -> tuple[object, list[Delivery]]:
        collector = _Collector(limit)
        collector.last = time.monotonic()
        subscription = self._transport.subscribe(
            dead_letter_queue(self._routing.physical(queue, tenant)),
            selector=tenant_selector(tenant),
            prefetch=limit,
            on_delivery=collector,
        )
        return subscription, collector.wait_idle(idle_s, max_s)

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
        self._transport.unsubscribe(subscription)  # type: ignore[arg-type]
        views = []
        for delivery in deliveries[:limit]:
            props = delivery.properties
            message_id = props.get(MESSAGE_ID_PROPERTY, "")
            views.append(
                DeadLetterView(
                    message_id=message_id,
                    tenant=tenant_id,
                    original_queue=props.get(
                        ORIGINAL_QUEUE_PROPERTY, self._routing.physical(queue, tenant_id)
                    ),
                    reason=props.get(DEAD_LETTER_REASON_PROPERTY, ""),
                    attempts=int(props.get(ATTEMPT_PROPERTY, "1") or 1),
                    error_type=props.get(ERROR_TYPE_PROPERTY, ""),
                    error=props.get(ERROR_TEXT_PROPERTY, ""),
                    body=delivery.body,
                    failures=tuple(
                        self._store.failures(tenant=tenant_id, message_id=message_id)
                        if message_id
                        else ()
                    ),
                )
            )
        return views

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

        Only message_ids when given; every re-drive is recorded in the error store. Returns the
        ids re-driven.
        """
        tenant_id = TenantId.parse(tenant)
        wanted = set(message_ids) if message_ids is not None else None
        physical = self._routing.physical(queue, tenant_id)
        subscription, deliveries = self._read(
            tenant_id, queue, limit=limit, idle_s=idle_s, max_s=max_s
        )
        redriven: builtins.list[str] = []
        try:
            for delivery in deliveries:
                props = delivery.properties
                message_id = props.get(MESSAGE_ID_PROPERTY, "")
                if wanted is not None and message_id not in wanted:
                    continue  # left unacknowledged: returns to the dead-letter queue
                target = props.get(ORIGINAL_QUEUE_PROPERTY, physical)
                if target != physical and self._routing.logical(target) != target:
                    # A per-tenant queue other than this one: the property is not to be trusted
                    # to move a message into some tenant's own queue. Left in the DLQ.
                    continue
                self._store.record(
                    FailureRecord(
                        tenant=tenant_id,
                        queue=self._routing.logical(target),
                        message_id=message_id or "unknown",
                        correlation_id=delivery.correlation_id,
                        attempt=int(props.get(ATTEMPT_PROPERTY, "1") or 1),
                        outcome=FailureOutcome.REDRIVE,
                        error_type=props.get(ERROR_TYPE_PROPERTY, ""),
                        error_text="re-driven by an operator from " + dead_letter_queue(physical),
                        occurred_at=datetime.now(UTC),
                    )
                )
                self._transport.forward(
                    delivery, [(check_queue_name(target), redrive_copy(props, delivery), 0)]
                )
                redriven.append(message_id)
        finally:
            self._transport.unsubscribe(subscription)  # type: ignore[arg-type]
        return redriven
