"""InMemoryTransport: one connection to an InMemoryBroker, implementing the Transport protocol
with the capabilities and behaviour of the broker's flavour.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from boost_tenancy.errors import QueueStatsUnavailableError, TransportError
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.testing.broker_records import Consumer
from boost_tenancy.testing.memory import InMemoryBroker
from boost_tenancy.testing.wire import Sent, as_sent
from boost_tenancy.transports import artemis_queues
from boost_tenancy.transports.artemis_management import ManagedRoutes
from boost_tenancy.transports.artemis_requests import Runs
from boost_tenancy.transports.base import (
    Delivery,
    ListedQueue,
    OnDelivery,
    Outgoing,
    PartlyForwardedError,
    QueueStats,
    SubscribeRequest,
    Subscription,
    check_queue_prefix,
)
from boost_tenancy.transports.capabilities import TransportCapabilities
from boost_tenancy.transports.options import DEFAULT_ARTEMIS_WINDOW_BYTES
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

T = TypeVar("T")


@dataclass(slots=True)
class _MemoryBatch:
    transport: InMemoryTransport
    atomic: bool
    items: list[tuple[str, WireMessage]] = field(default_factory=list)

    def add(self, queue: str, message: WireMessage) -> None:
        self.items.append((check_queue_name(queue), message))

    def commit(self) -> None:
        self.transport.send_batch(self.items, atomic=self.atomic)

    def abort(self) -> None:
        self.items.clear()


@dataclass(frozen=True, slots=True)
class _MemorySubscription:
    id: str
    queue: str
    selector: SelectorLike | None


@dataclass(frozen=True, slots=True)
class _Request:
    """What a subscription was opened with, to open it again on a new connection."""

    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: OnDelivery


class InMemoryTransport(ManagedRoutes):
    """One connection to an InMemoryBroker; implements the Transport protocol.

    artemis_window_bytes: the expected message size the STOMP transport's settings give (the
    Artemis consumer window is prefetch times it); ignored on Classic.
    """

    def __init__(
        self, broker: InMemoryBroker, *, artemis_window_bytes: int = DEFAULT_ARTEMIS_WINDOW_BYTES
    ) -> None:
        self._broker = broker
        self._window_bytes = artemis_window_bytes
        self._lock = threading.Lock()
        self._connected = False
        self._generation = 0
        self._requests: dict[str, _Request] = {}
        self._consumers: dict[str, Consumer] = {}
        self._ids = itertools.count(1)
        self._drops_before_ack = 0

    @property
    def capabilities(self) -> TransportCapabilities:
        return self._broker.flavour.capabilities

    @property
    def is_connected(self) -> bool:
        return self._connected

    def is_open(self, subscription: Subscription) -> bool:
        """Consuming on this connection: opened and not unsubscribed or lost."""
        with self._lock:
            return self._connected and subscription.id in self._consumers

    def connect(self) -> None:
        with self._lock:
            self._connected = True
            self._generation += 1

    def close(self) -> None:
        with self._lock:
            self._connected = False
            consumers = list(self._consumers.values())
            self._consumers.clear()
            self._requests.clear()
        for consumer in consumers:
            self._broker.unsubscribe(consumer)

    # -- connection loss, for tests --------------------------------------------------------------
    def drop_connection(self) -> None:
        """Lose the connection and come back at once, as the STOMP transport reconnects: what
        was unacknowledged returns to its queue marked redelivered, deliveries made before are
        no longer live, and every subscription is opened again with the same id."""
        with self._lock:
            self._require_connected()
            self._generation += 1
            old = list(self._consumers.values())
            requests = list(self._requests.values())
        for consumer in old:
            self._broker.unsubscribe(consumer, failed=True)
        with self._lock:
            self._consumers = {r.id: self._open(r) for r in requests}

    def drop_connection_before_next_ack(self, times: int = 1) -> None:
        """Make the next non-atomic send_then_ack lose the connection after its copies are
        stored and before its ack: the original comes back, the copies stay (a duplicate).
        Where forwarding is atomic (Classic) there is no such moment and nothing happens."""
        with self._lock:
            self._drops_before_ack += times

    # -- sending ---------------------------------------------------------------------------------
    def _require_connected(self) -> None:
        if not self._connected:
            raise TransportError("in-memory transport is not connected")

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._require_connected()
        self._broker.store([(check_queue_name(queue), as_sent(message), delay_ms)])

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        self._require_connected()
        self._broker.store(_as_sent([Outgoing(q, m) for q, m in items]), transaction=atomic)

    def open_batch(self, *, atomic: bool = True) -> _MemoryBatch:
        self._require_connected()
        return _MemoryBatch(self, atomic)

    # -- consuming -------------------------------------------------------------------------------
    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> _MemorySubscription:
        self._require_connected()
        request = _Request(
            f"sub-{next(self._ids)}", check_queue_name(queue), selector, prefetch, on_delivery
        )
        with self._lock:  # so a drop_connection meanwhile cannot leave it on the old connection
            self._requests[request.id] = request
            self._consumers[request.id] = self._open(request)
        return _MemorySubscription(request.id, request.queue, selector)

    def _open(self, request: _Request) -> Consumer:
        """Open request on the broker for the current connection; under self._lock."""
        # The SUBSCRIBE headers the STOMP transport sends on this flavour, read by the broker.
        headers = self._broker.flavour.prefetch_headers(
            max(1, request.prefetch), self._window_bytes
        )
        sub = (request.id, request.queue, request.selector, request.on_delivery)
        return self._broker.subscribe(self, self._generation, sub, headers)

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[_MemorySubscription]:
        return [
            self.subscribe(
                r.queue, selector=r.selector, prefetch=r.prefetch, on_delivery=r.on_delivery
            )
            for r in requests
        ]

    def unsubscribe(self, subscription: object) -> None:
        sub_id = str(getattr(subscription, "id", None))
        with self._lock:
            self._requests.pop(sub_id, None)
            consumer = self._consumers.pop(sub_id, None)
        if consumer is not None:
            self._broker.unsubscribe(consumer)

    # -- settling --------------------------------------------------------------------------------
    def _token(self, delivery: Delivery) -> tuple[Consumer, int, int]:
        token = delivery.token
        if not (isinstance(token, tuple) and len(token) == 3):
            raise TransportError("delivery was not made by this in-memory transport")
        consumer, seq, generation = token
        return consumer, seq, generation

    def ack(self, delivery: Delivery) -> None:
        consumer, seq, _ = self._token(delivery)
        self._broker.ack(consumer, seq)

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        consumer, seq, _ = self._token(delivery)
        sent = _as_sent([Outgoing(check_queue_name(q), m, d) for q, m, d in items])
        if not self.is_live(delivery):
            raise TransportError(f"delivery from {delivery.queue!r} is no longer in flight")
        if self.capabilities.atomic_forward:
            if not self._broker.forward(consumer, seq, sent):
                raise TransportError(f"delivery from {delivery.queue!r} is no longer in flight")
            return
        # Artemis: the copies are confirmed, then the ack goes out on its own.
        if sent:
            self._broker.store(sent)
        with self._lock:
            drop = self._drops_before_ack > 0
            if drop:
                self._drops_before_ack -= 1
        if drop:
            self.drop_connection()
            return
        self._broker.ack(consumer, seq)

    def send_then_ack_many(
        self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]
    ) -> list[Delivery]:
        moved: list[Delivery] = []
        for delivery, items in moves:
            if self.is_live(delivery):
                try:
                    self.send_then_ack(delivery, items)
                except TransportError as exc:
                    if not moved:
                        raise
                    # The ones before are moved and acknowledged, as a broker without atomic
                    # forward leaves them (AmqpTransport on RabbitMQ): named, not moved again.
                    raise PartlyForwardedError(str(exc), moved) from exc
                moved.append(delivery)
        return moved

    def is_live(self, delivery: Delivery) -> bool:
        consumer, seq, generation = self._token(delivery)
        return (
            self._connected and generation == self._generation and self._broker.holds(consumer, seq)
        )

    # -- statistics ------------------------------------------------------------------------------
    def queue_stats(self, queues: Sequence[str]) -> dict[str, QueueStats | None]:
        """The counts Classic's statistics plugin reports, or Artemis's listQueues through its
        management operations (QueueStatsReader)."""
        self._require_connected()
        if not self.capabilities.queue_statistics:
            raise QueueStatsUnavailableError(
                f"{self._broker.flavour.value} gives no queue statistics over STOMP"
            )
        names = [check_queue_name(q) for q in queues]
        if self._broker.flavour is BrokerFlavour.ARTEMIS:
            return self.management_session(
                lambda session: artemis_queues.queue_stats(session, names)
            )
        return self._broker.queue_stats(names)

    def list_queues(self, prefixes: Sequence[str]) -> list[ListedQueue]:
        """Every queue under the prefixes, as Classic's plugin or Artemis's listQueues lists them
        (QueueLister)."""
        self._require_connected()
        if not self.capabilities.queue_listing:
            raise QueueStatsUnavailableError(
                f"{self._broker.flavour.value} lists no queues over STOMP"
            )
        checked = [check_queue_prefix(p) for p in prefixes]
        if self._broker.flavour is BrokerFlavour.ARTEMIS:
            return self.management_session(lambda s: artemis_queues.list_queues(s, checked))
        return self._broker.list_queues(checked)

    # -- routes at send time (Artemis) ------------------------------------------------------------
    def management_session(self, work: Callable[[Runs], T]) -> T:
        """Artemis's management operations (its exclusive diverts, its queue counts) on the
        model; refused on the Classic model, which has no management address."""
        self._require_connected()
        if self._broker.flavour is not BrokerFlavour.ARTEMIS:
            raise TransportError(f"{self._broker.flavour.value} has no management address")
        return work(self._broker)


def _as_sent(items: Sequence[Outgoing]) -> list[tuple[str, Sent, int]]:
    """Every item as sent, or MessageEncodeError before any is stored."""
    return [(queue, as_sent(message), delay_ms) for queue, message, delay_ms in items]
