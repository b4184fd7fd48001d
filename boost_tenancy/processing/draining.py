"""The runner's subscriptions, one per (tenant, queue), and draining one of them at run time.

A drained (tenant, queue) takes no new delivery: what the broker still sends it is left
unacknowledged, so the broker keeps the message; what the runner already took is handled and
settled as usual, and once none is left the subscription ends (Transport.unsubscribe), which
gives the unacknowledged ones back to the queue. Resuming subscribes it again. Which pairs are
held comes from a QueueStateSource (ops/queue_states.py reads the operators' states), on its own
thread: a delivery's path only reads a set under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

import structlog

from boost_tenancy.errors import TransportError
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Delivery, SubscribeRequest, Subscription, Transport

log = structlog.get_logger("boost_tenancy.processing.draining")

QueueKey = tuple[TenantId, str]
"""(tenant, logical queue): one subscription of a runner."""

ApplyHeld = Callable[[Collection[QueueKey]], None]
"""Told the pairs that must not be consumed now; every other pair is consumed."""


class QueueStateSource(Protocol):
    """Where a runner learns which of its (tenant, queue) pairs are drained or deleted."""

    def first_read(self) -> Collection[QueueKey]:
        """The held pairs as known at start (a bounded read; none known: empty)."""
        ...

    def start(self, apply: ApplyHeld) -> None:
        """Call apply with the held pairs from a thread of its own, again and again, until stop.
        A failed read keeps the last pairs known."""
        ...

    def stop(self) -> None: ...


class QueueDrains:
    """The runner's subscriptions by (tenant, queue): opened, drained, ended and opened again.

    request_of builds a pair's SubscribeRequest (its on_delivery is wrapped here, to count what
    the runner takes and to leave alone what arrives while the pair is held).
    """

    def __init__(
        self, transport: Transport, request_of: Callable[[QueueKey], SubscribeRequest]
    ) -> None:
        self._transport = transport
        self._request_of = request_of
        self._lock = threading.Lock()
        self._keys: set[QueueKey] = set()
        self._subscriptions: dict[QueueKey, Subscription] = {}
        self._held: set[QueueKey] = set()
        self._taken: dict[QueueKey, int] = {}
        self._owner: dict[int, QueueKey] = {}
        """id() of a delivery taken and not settled yet -> its pair (it lives until settled)."""

    def open(self, keys: Sequence[QueueKey], held: Collection[QueueKey] = ()) -> None:
        """Subscribe every pair of keys, those in held aside (they stay held until released)."""
        with self._lock:
            self._keys.update(keys)
            self._held.update(k for k in keys if k in held)
        wanted = [k for k in keys if k not in held]
        opened = self._transport.subscribe_many([self._guarded(k) for k in wanted])
        with self._lock:
            self._subscriptions.update(zip(wanted, opened, strict=True))
        for key in keys:
            if key in held:
                log.info("queue_held_at_start", tenant=key[0].value, queue=key[1])

    def _guarded(self, key: QueueKey) -> SubscribeRequest:
        request = self._request_of(key)
        inner = request.on_delivery

        def on_delivery(delivery: Delivery) -> None:
            with self._lock:
                if key in self._held:
                    # Unacknowledged: the broker keeps it and takes it back on unsubscribe.
                    return
                self._taken[key] = self._taken.get(key, 0) + 1
                self._owner[id(delivery)] = key
            inner(delivery)

        return SubscribeRequest(request.queue, request.selector, request.prefetch, on_delivery)

    def settled(self, delivery: Delivery) -> None:
        """A worker is done with delivery (settled, or left for the broker to redeliver)."""
        with self._lock:
            key = self._owner.pop(id(delivery), None)
            if key is None:
                return
            self._taken[key] -= 1
            ended = self._take_idle(key)
        self._end(ended)

    def held(self) -> frozenset[QueueKey]:
        """The pairs held now (drained or draining)."""
        with self._lock:
            return frozenset(self._held)

    def subscribed(self) -> frozenset[QueueKey]:
        """The pairs with a subscription now."""
        with self._lock:
            return frozenset(self._subscriptions)

    def serving(self) -> tuple[int, list[Subscription]]:
        """How many pairs should be subscribed now (those not held), and the subscriptions
        there are: what readiness compares."""
        with self._lock:
            return len(self._keys - self._held), list(self._subscriptions.values())

    def taken(self, key: QueueKey) -> int:
        """Deliveries of the pair taken and not settled yet."""
        with self._lock:
            return self._taken.get(key, 0)

    def apply(self, held: Collection[QueueKey]) -> None:
        """Hold exactly the pairs in held (of those this runner serves), release the others."""
        ending: list[tuple[QueueKey, Subscription]] = []
        reopen: list[QueueKey] = []
        with self._lock:
            for key in self._keys:
                if key in held and key not in self._held:
                    self._held.add(key)
                    log.info("queue_draining", tenant=key[0].value, queue=key[1])
                elif key not in held and key in self._held:
                    self._held.discard(key)
                    log.info("queue_resumed", tenant=key[0].value, queue=key[1])
                if key in self._held:
                    ending.extend(self._take_idle(key))
                elif key not in self._subscriptions:
                    reopen.append(key)
        self._end(ending)
        for key in reopen:
            self._reopen(key)

    def _take_idle(self, key: QueueKey) -> list[tuple[QueueKey, Subscription]]:
        """The pair's subscription, taken out, when it is held and nothing it took is pending;
        under the lock."""
        if key not in self._held or self._taken.get(key, 0) > 0:
            return []
        subscription = self._subscriptions.pop(key, None)
        return [] if subscription is None else [(key, subscription)]

    def _end(self, ending: Iterable[tuple[QueueKey, Subscription]]) -> None:
        for key, subscription in ending:
            try:
                self._transport.unsubscribe(subscription)
            except TransportError as exc:
                # The subscription is forgotten by the transport either way: a reconnection does
                # not open it again, and the broker takes its deliveries back with the connection.
                log.warning("queue_unsubscribe_failed", tenant=key[0].value, error=str(exc))
            log.info("queue_drained", tenant=key[0].value, queue=key[1])

    def _reopen(self, key: QueueKey) -> None:
        request = self._guarded(key)
        try:
            subscription = self._transport.subscribe(
                request.queue,
                selector=request.selector,
                prefetch=request.prefetch,
                on_delivery=request.on_delivery,
            )
        except TransportError as exc:
            # Tried again on the next apply: the pair is neither held nor subscribed.
            log.warning("queue_resubscribe_failed", tenant=key[0].value, error=str(exc))
            return
        with self._lock:
            if key in self._held or key in self._subscriptions:
                extra: Subscription | None = subscription  # held again meanwhile
            else:
                self._subscriptions[key] = subscription
                extra = None
        if extra is not None:
            self._end([(key, extra)])
        else:
            log.info("queue_subscribed_again", tenant=key[0].value, queue=key[1])


__all__ = ["ApplyHeld", "QueueDrains", "QueueKey", "QueueStateSource"]
