"""An in-memory broker with queues, selectors, prefetch, acks, redelivery and delayed delivery.

It behaves like ActiveMQ over STOMP where the toolkit depends on it (the contract suite in
tests/contract runs against both), so unit tests can run without a broker.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage, check_queue_name, wire_body, wire_safe
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports.base import (
    Delivery,
    OnDelivery,
    Outgoing,
    SubscribeRequest,
    TransportCapabilities,
)

MEMORY_CAPABILITIES = TransportCapabilities(
    server_side_selectors=True,
    native_delivery_count=False,
    delayed_delivery=True,
    atomic_forward=True,
)


def _on_wire(message: WireMessage) -> WireMessage:
    """The message as it would come back from a STOMP broker: headers made wire-safe (as the
    STOMP transport encodes them); a body the wire cannot carry raises MessageEncodeError."""
    wire_body(message.body)
    properties = {wire_safe(k): wire_safe(v) for k, v in message.properties.items()}
    correlation = message.correlation_id
    return WireMessage(
        body=message.body,
        properties=properties,
        correlation_id=None if correlation is None else wire_safe(correlation),
        persistent=message.persistent,
    )


@dataclass(slots=True)
class _Stored:
    seq: int
    queue: str
    message: WireMessage
    available_at: float
    redelivered: bool = False

    def __lt__(self, other: _Stored) -> bool:
        return self.seq < other.seq


@dataclass(slots=True, eq=False)
class _Consumer:
    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: OnDelivery
    connection: InMemoryTransport
    in_flight: dict[int, _Stored] = field(default_factory=dict)

    def accepts(self, stored: _Stored) -> bool:
        return self.selector is None or self.selector.matches(stored.message.properties)


class InMemoryBroker:
    """Queues shared by any number of InMemoryTransport connections."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._queues: dict[str, list[_Stored]] = {}
        self._consumers: list[_Consumer] = []
        self._seq = itertools.count(1)
        self._rr = itertools.count()
        self._closed = False
        self._thread = threading.Thread(
            target=self._dispatch_loop, name="memory-broker", daemon=True
        )
        self._thread.start()

    # -- producer side -------------------------------------------------------------------------
    def put(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        """Store a message; with a delay it becomes visible only after delay_ms."""
        self.put_many([(queue, message, delay_ms)])

    def put_many(self, items: Sequence[tuple[str, WireMessage, int]]) -> None:
        """Store several messages at once (a committed transaction)."""
        items = [(queue, _on_wire(message), delay_ms) for queue, message, delay_ms in items]
        with self._cond:
            now = self._clock()
            for queue, message, delay_ms in items:
                stored = _Stored(next(self._seq), queue, message, now + delay_ms / 1000.0)
                bisect.insort(self._queues.setdefault(queue, []), stored)
            self._cond.notify_all()

    # -- inspection for tests ------------------------------------------------------------------
    def messages(self, queue: str) -> list[WireMessage]:
        """Messages held in queue, in order, including scheduled and in-flight ones."""
        with self._cond:
            held = list(self._queues.get(queue, []))
            for consumer in self._consumers:
                held.extend(s for s in consumer.in_flight.values() if s.queue == queue)
            return [s.message for s in sorted(held)]

    def depth(self, queue: str) -> int:
        """How many messages queue holds, in flight included."""
        return len(self.messages(queue))

    # -- consumer side (used by InMemoryTransport) ---------------------------------------------
    def _add_consumer(self, consumer: _Consumer) -> None:
        with self._cond:
            self._consumers.append(consumer)
            self._cond.notify_all()

    def _remove_consumer(self, consumer: _Consumer) -> None:
        with self._cond:
            if consumer in self._consumers:
                self._consumers.remove(consumer)
            for stored in consumer.in_flight.values():
                stored.redelivered = True
                bisect.insort(self._queues.setdefault(stored.queue, []), stored)
            consumer.in_flight.clear()
            self._cond.notify_all()

    def _ack(self, consumer: _Consumer, seq: int) -> bool:
        with self._cond:
            if consumer.in_flight.pop(seq, None) is None:
                return False
            self._cond.notify_all()
            return True

    def _forward(self, consumer: _Consumer, seq: int, items: Sequence[Outgoing]) -> bool:
        items = [Outgoing(q, _on_wire(m), d) for q, m, d in items]
        with self._cond:
            if seq not in consumer.in_flight:
                return False
            del consumer.in_flight[seq]
            now = self._clock()
            for queue, message, delay_ms in items:
                stored = _Stored(next(self._seq), queue, message, now + delay_ms / 1000.0)
                bisect.insort(self._queues.setdefault(queue, []), stored)
            self._cond.notify_all()
            return True

    def close(self) -> None:
        """Stop the dispatcher thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _pick(self, now: float) -> tuple[list[tuple[_Consumer, _Stored]], float | None]:
        """Assign ready messages to consumers with room; return the next scheduled time."""
        handed: list[tuple[_Consumer, _Stored]] = []
        next_due: float | None = None
        for queue, stored_list in self._queues.items():
            consumers = [c for c in self._consumers if c.queue == queue]
            if not consumers:
                continue
            remaining: list[_Stored] = []
            for stored in stored_list:
                if stored.available_at > now:
                    next_due = (
                        stored.available_at
                        if next_due is None
                        else min(next_due, stored.available_at)
                    )
                    remaining.append(stored)
                    continue
                start = next(self._rr)
                ordered = consumers[start % len(consumers) :] + consumers[: start % len(consumers)]
                target = next(
                    (c for c in ordered if len(c.in_flight) < c.prefetch and c.accepts(stored)),
                    None,
                )
                if target is None:
                    remaining.append(stored)
                    continue
                target.in_flight[stored.seq] = stored
                handed.append((target, stored))
            self._queues[queue] = remaining
        return handed, next_due

    def _dispatch_loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                handed, next_due = self._pick(self._clock())
                if not handed:
                    timeout = None if next_due is None else max(0.0, next_due - self._clock())
                    self._cond.wait(timeout if timeout is None else min(timeout, 0.5))
                    continue
            for consumer, stored in handed:
                consumer.connection._deliver(consumer, stored)


@dataclass(slots=True)
class _MemoryBatch:
    transport: InMemoryTransport
    items: list[tuple[str, WireMessage]] = field(default_factory=list)

    def add(self, queue: str, message: WireMessage) -> None:
        self.items.append((check_queue_name(queue), message))

    def commit(self) -> None:
        self.transport.send_batch(self.items)

    def abort(self) -> None:
        self.items.clear()


@dataclass(frozen=True, slots=True)
class _MemorySubscription:
    id: str
    queue: str
    selector: SelectorLike | None


class InMemoryTransport:
    """One connection to an InMemoryBroker; implements the Transport protocol."""

    def __init__(self, broker: InMemoryBroker) -> None:
        self._broker = broker
        self._lock = threading.Lock()
        self._connected = False
        self._generation = 0
        self._consumers: dict[str, _Consumer] = {}
        self._ids = itertools.count(1)

    @property
    def capabilities(self) -> TransportCapabilities:
        return MEMORY_CAPABILITIES

    def connect(self) -> None:
        with self._lock:
            self._connected = True
            self._generation += 1

    def close(self) -> None:
        with self._lock:
            self._connected = False
            consumers = list(self._consumers.values())
            self._consumers.clear()
        for consumer in consumers:
            self._broker._remove_consumer(consumer)

    def _require_connected(self) -> None:
        if not self._connected:
            raise TransportError("in-memory transport is not connected")

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._require_connected()
        self._broker.put(check_queue_name(queue), message, delay_ms=delay_ms)

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        self._require_connected()
        self._broker.put_many([(check_queue_name(q), m, 0) for q, m in items])

    def open_batch(self, *, atomic: bool = True) -> _MemoryBatch:
        self._require_connected()
        return _MemoryBatch(self)

    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> _MemorySubscription:
        self._require_connected()
        consumer = _Consumer(
            id=f"sub-{next(self._ids)}",
            queue=check_queue_name(queue),
            selector=selector,
            prefetch=max(1, prefetch),
            on_delivery=on_delivery,
            connection=self,
        )
        with self._lock:
            self._consumers[consumer.id] = consumer
        self._broker._add_consumer(consumer)
        return _MemorySubscription(consumer.id, consumer.queue, selector)

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[_MemorySubscription]:
        return [
            self.subscribe(
                r.queue, selector=r.selector, prefetch=r.prefetch, on_delivery=r.on_delivery
            )
            for r in requests
        ]

    def unsubscribe(self, subscription: object) -> None:
        sub_id = getattr(subscription, "id", None)
        with self._lock:
            consumer = self._consumers.pop(str(sub_id), None)
        if consumer is not None:
            self._broker._remove_consumer(consumer)

    def _deliver(self, consumer: _Consumer, stored: _Stored) -> None:
        delivery = Delivery(
            queue=stored.queue,
            body=stored.message.body,
            properties=dict(stored.message.properties),
            correlation_id=stored.message.correlation_id,
            redelivered=stored.redelivered,
            subscription_id=consumer.id,
            broker_message_id=f"mem-{stored.seq}",
            token=(consumer, stored.seq, self._generation),
        )
        consumer.on_delivery(delivery)

    def _token(self, delivery: Delivery) -> tuple[_Consumer, int, int]:
        token = delivery.token
        if not (isinstance(token, tuple) and len(token) == 3):
            raise TransportError("delivery was not made by this in-memory transport")
        consumer, seq, generation = token
        return consumer, seq, generation

    def ack(self, delivery: Delivery) -> None:
        consumer, seq, _ = self._token(delivery)
        self._broker._ack(consumer, seq)

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        consumer, seq, _ = self._token(delivery)
        checked = [Outgoing(check_queue_name(q), m, d) for q, m, d in items]
        if not self._broker._forward(consumer, seq, checked):
            raise TransportError(f"delivery from {delivery.queue!r} is no longer in flight")

    def send_then_ack_many(self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]) -> None:
        for delivery, items in moves:
            self.send_then_ack(delivery, items)

    def is_live(self, delivery: Delivery) -> bool:
        consumer, seq, generation = self._token(delivery)
        return self._connected and generation == self._generation and seq in consumer.in_flight
