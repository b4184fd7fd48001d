"""Request-reply with the tenant kept: TenantRequester sends a request of one tenant and waits for
its reply, which the handler sends with ctx.reply(...).

A request carries its reply queue (the boostReplyTo property, a logical queue reply.<name>) and
its own message id as its correlation id. The handler's ctx.reply publishes to that queue as the
request's tenant, so the routing puts the reply in that tenant's reply queue
(tenant.<tenant>.reply.<name>), which the requester reads for that tenant alone; a message there
claiming another tenant is quarantined, never given to a caller. A reply that comes after its
request timed out is acknowledged and logged: the caller has been told (RequestTimeoutError).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import structlog

from boost_tenancy.codec import decode
from boost_tenancy.errors import ConfigError, RequestTimeoutError
from boost_tenancy.header_values import new_id
from boost_tenancy.messages import (
    REPLY_QUEUE_PREFIX,
    REPLY_TO_PROPERTY,
    Body,
    MessageBody,
)
from boost_tenancy.producer import TenantProducer
from boost_tenancy.resilience.dead_letter import (
    DeadLetterReason,
    dead_letter_copy,
    quarantine_queue,
)
from boost_tenancy.routing import DEFAULT_ROUTING, Routing, Topology, check_logical_queue
from boost_tenancy.selectors import TENANT_PROPERTY, tenant_selector
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Delivery, Outgoing, Subscription, Transport

log = structlog.get_logger("boost_tenancy.requests")


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply as the requester received it: its tenant is the request's, checked."""

    tenant: TenantId
    body: Body
    properties: Mapping[str, str]
    correlation_id: str

    @property
    def data(self) -> object:
        """The body decoded as JSON (text bodies; bytes are decoded as UTF-8 first)."""
        text = self.body.decode() if isinstance(self.body, bytes) else self.body
        return decode(text)


class TenantRequester:
    """Sends requests through a connected transport and waits for their replies.

    name: the reply queue's name (reply.<name>); give each process its own, stable one (a
    service and an instance: its queues outlive the process on brokers that keep empty queues).
    Thread-safe: any number of threads may wait for their replies at once.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        name: str | None = None,
        routing: Routing = DEFAULT_ROUTING,
        prefetch: int = 10,
    ) -> None:
        self.reply_queue = check_logical_queue(
            f"{REPLY_QUEUE_PREFIX}{name or uuid.uuid4().hex[:12]}"
        )
        self._transport = transport
        self._routing = routing
        self._prefetch = prefetch
        self._producer = TenantProducer(transport, routing=routing)
        self._lock = threading.Lock()
        """Guards _pending and _subscriptions; never held while the broker is waited for."""
        self._subscribing = threading.Lock()
        self._pending: dict[str, tuple[TenantId, Future[Reply]]] = {}
        self._subscriptions: dict[TenantId, Subscription] = {}
        # Replies are settled on a thread of the requester's own: a transport's receiving thread
        # must not wait for the broker (an acknowledgement, a quarantine copy).
        self._arrived: queue.SimpleQueue[tuple[TenantId, Delivery] | None] = queue.SimpleQueue()
        self._settler = threading.Thread(
            target=self._settle_replies, name="boost-requester", daemon=True
        )
        self._settler.start()

    def request(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        timeout: float = 30.0,
        properties: Mapping[str, str] | None = None,
    ) -> Reply:
        """Send a request of tenant to queue and return its reply; RequestTimeoutError when
        none came within timeout seconds."""
        tenant_id = TenantId.parse(tenant)
        self._reading(tenant_id)
        request_id = new_id()
        waiting: Future[Reply] = Future()
        with self._lock:
            self._pending[request_id] = (tenant_id, waiting)
        try:
            self._producer.send(
                queue,
                tenant_id,
                body,
                message_id=request_id,
                correlation_id=request_id,
                properties={**(properties or {}), REPLY_TO_PROPERTY: self.reply_queue},
            )
            try:
                return waiting.result(timeout)
            except FutureTimeout:
                raise RequestTimeoutError(
                    f"no reply from {queue!r} for tenant {tenant_id.value} within {timeout:g} s "
                    f"(request {request_id}, replies to {self.reply_queue})"
                ) from None
        finally:
            with self._lock:
                self._pending.pop(request_id, None)

    async def arequest(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        timeout: float = 30.0,
        properties: Mapping[str, str] | None = None,
    ) -> Reply:
        """request() for a coroutine: the send and the wait run off the event loop."""
        return await asyncio.to_thread(
            self.request, queue, tenant, body, timeout=timeout, properties=properties
        )

    def close(self) -> None:
        """Stop reading the reply queues (what waits in them stays); the transport stays open."""
        with self._lock:
            subscriptions, self._subscriptions = list(self._subscriptions.values()), {}
        for subscription in subscriptions:
            self._transport.unsubscribe(subscription)
        self._arrived.put(None)
        self._settler.join(5)

    def _reading(self, tenant: TenantId) -> None:
        """Subscribe to tenant's reply queue once, before its first request is sent."""
        with self._subscribing:
            with self._lock:
                if tenant in self._subscriptions:
                    return
            shared = self._routing.topology(self.reply_queue) is Topology.SHARED
            subscription = self._transport.subscribe(
                self._routing.physical(self.reply_queue, tenant),
                selector=tenant_selector(tenant) if shared else None,
                prefetch=self._prefetch,
                on_delivery=lambda delivery: self._arrived.put((tenant, delivery)),
            )
            with self._lock:
                self._subscriptions[tenant] = subscription

    def _settle_replies(self) -> None:
        while (arrived := self._arrived.get()) is not None:
            tenant, delivery = arrived
            try:
                self._replied(tenant, delivery)
            except Exception:  # the broker gets it back (unacknowledged) when the link ends
                log.exception("reply_not_settled", tenant=tenant.value)

    def _replied(self, tenant: TenantId, delivery: Delivery) -> None:
        claimed = delivery.properties.get(TENANT_PROPERTY)
        if claimed != tenant.value:
            self._quarantine(tenant, delivery, claimed)
            return
        correlation = delivery.correlation_id or ""
        with self._lock:
            waiting = self._pending.get(correlation)
        if waiting is None or waiting[0] != tenant:
            log.warning(
                "reply_without_request",
                tenant=tenant.value,
                correlation_id=correlation,
                hint="its request timed out, or it answers another requester's",
            )
            self._transport.ack(delivery)
            return
        self._transport.ack(delivery)
        waiting[1].set_result(Reply(tenant, delivery.body, dict(delivery.properties), correlation))

    def _quarantine(self, tenant: TenantId, delivery: Delivery, claimed: str | None) -> None:
        """A message in tenant's reply queue claiming another tenant (or none) goes to the reply
        queue's quarantine with the reason, and is never given to a caller."""
        where = self._routing.physical(self.reply_queue, tenant)
        reason = f"a reply in {where} names tenant {claimed!r}, not {tenant.value!r}"
        # The copy every quarantine makes (the Settler's too): the error in its header-safe
        # form (the claimed value is untrusted text), the queue it came from, no expiry.
        copy = dead_letter_copy(
            delivery,
            reason=DeadLetterReason.TENANCY_VIOLATION,
            error_type="TenancyViolation",
            error_text=reason,
            attempt=1,
        )
        log.error("reply_quarantined", tenant=tenant.value, claimed=claimed, queue=where)
        self._transport.send_then_ack(delivery, [Outgoing(quarantine_queue(where), copy)])


def check_reply_queue(value: str | None) -> str:
    """The reply queue a request names, if it is one (reply.<name>); ConfigError otherwise."""
    if value is None:
        raise ConfigError(f"the message names no reply queue (no {REPLY_TO_PROPERTY} property)")
    if not value.startswith(REPLY_QUEUE_PREFIX):
        raise ConfigError(
            f"{REPLY_TO_PROPERTY} {value[:80]!r} is not a reply queue (reply.<name>): a "
            "request may not direct its reply to another queue"
        )
    return check_logical_queue(value)


__all__ = ["Reply", "TenantRequester", "check_reply_queue"]
