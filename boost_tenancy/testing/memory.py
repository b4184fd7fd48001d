"""An in-memory broker with queues, selectors, flow control, acks, redelivery and delayed
delivery, modelling ActiveMQ Classic or Artemis over STOMP where the toolkit depends on it."""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import WireMessage
from boost_tenancy.selectors import TENANT_PROPERTY, SelectorLike
from boost_tenancy.testing.broker_records import Consumer, Stored
from boost_tenancy.testing.broker_stats import artemis_queue_counts, classic_queue_stats
from boost_tenancy.testing.diverts import DivertModel, QueueCount
from boost_tenancy.testing.expiry import expired_copy, has_expired
from boost_tenancy.testing.routing_plugin import plugin_queues, plugin_target
from boost_tenancy.testing.sends import artemis_stores, scheduled_delay
from boost_tenancy.testing.wire import (
    MessageIds,
    Sent,
    as_sent,
    broker_dead_letter,
    check_modelled,
    diverted_copy,
    flow_control,
    message_headers,
    readdressed,
)
from boost_tenancy.transports.artemis_requests import ManagementError, Operation
from boost_tenancy.transports.base import Delivery, ListedQueue, OnDelivery, QueueStats
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import delivery_of

if TYPE_CHECKING:
    from boost_tenancy.testing.transport import InMemoryTransport


class InMemoryBroker:
    """Queues shared by any number of InMemoryTransport connections (testing/transport.py).

    The contract suite in tests/contract runs against both models and the real broker, so unit
    tests can run without one.

    flavour: BrokerFlavour.CLASSIC (the default) or ARTEMIS; transports connected to it report
    that flavour's capabilities and get its behaviour: on Artemis every MESSAGE carries
    content-length, flow control counts bytes and forwarding is not atomic.
    max_delivery_attempts: Artemis only; a message whose consumer's connection failed that many
    times with it unacknowledged (InMemoryTransport.drop_connection) is moved to
    dead_letter_address with _AMQ_ORIG_QUEUE, _AMQ_ORIG_ADDRESS, _AMQ_ORIG_MESSAGE_ID. None
    never moves one.
    A message whose expiry (WireMessage.expires_at_ms, against wall_clock in epoch seconds)
    has passed is never delivered: when it would be, Classic moves a persistent one to
    ActiveMQ.DLQ and drops a non-persistent one; Artemis moves it to expiry_address, or drops
    it when that is None (testing/expiry.py).
    Artemis's exclusive diverts, made through its management operations (run): a message
    stored to a diverted queue that matches a divert's filter is stored in its target instead,
    as a copy carrying _AMQ_ORIG_ADDRESS, _AMQ_ORIG_QUEUE (the divert's name) and
    _AMQ_ORIG_MESSAGE_ID; one that matches none stays on the queue it was sent to.
    tenant_routed_queues: Classic only, the queues of the project's tenant routing plugin
    (brokers/classic): a message sent to one of them whose tenantUUID is a valid tenant id is
    stored in tenant.<tenant>.<queue> instead, with original-destination /queue/<queue> unless
    it has one; any other stays where it was sent. ["*"] routes every queue with a shared queue
    name but those of tenant_shared_queues (exact names, or a prefix ending in ".*").
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        flavour: BrokerFlavour = BrokerFlavour.CLASSIC,
        max_delivery_attempts: int | None = None,
        dead_letter_address: str = "DLA",
        wall_clock: Callable[[], float] = time.time,
        expiry_address: str | None = None,
        tenant_routed_queues: Iterable[str] = (),
        tenant_shared_queues: Iterable[str] = (),
    ) -> None:
        self.flavour = check_modelled(flavour)
        self._tenant_routed = plugin_queues(tenant_routed_queues, tenant_shared_queues)
        if self._tenant_routed and flavour is not BrokerFlavour.CLASSIC:
            raise ConfigError(
                "tenant_routed_queues models the project's Classic plugin; Artemis routes at "
                "send time with the runners' diverts"
            )
        self._clock = clock
        self._wall_clock = wall_clock
        self._expiry_address = expiry_address if flavour is BrokerFlavour.ARTEMIS else None
        self._max_deliveries = max_delivery_attempts if flavour is BrokerFlavour.ARTEMIS else None
        self._dead_letter_address = dead_letter_address
        self._ids = MessageIds(flavour)
        self._consumer_numbers = itertools.count(87_000)
        self._cond = threading.Condition()
        self._queues: dict[str, list[Stored]] = {}
        self._consumers: list[Consumer] = []
        self._seq = itertools.count(1)
        self._transactions = itertools.count(1)
        self.lost_to_stale_transactions = 0
        """Artemis: sends dropped because they carried a `transaction` header of an earlier
        transaction (store)."""
        self.dropped_as_duplicates = 0
        """Artemis: sends dropped because their address had seen their _AMQ_DUPL_ID (store)."""
        self._duplicate_ids: set[tuple[str, str]] = set()
        self._rr = itertools.count()
        self._diverts = DivertModel(
            self._queues.__contains__, self._make_queue, self._artemis_queue_counts
        )
        self._closed = False
        self._thread = threading.Thread(
            target=self._dispatch_loop, name="memory-broker", daemon=True
        )
        self._thread.start()

    # -- producer side -------------------------------------------------------------------------
    def put(
        self, queue: str, message: WireMessage, *, delay_ms: int = 0, jms: bool = False
    ) -> None:
        """Store a message; with a delay it becomes visible only after delay_ms.

        jms=True stores it as a Java JMS producer sends it: a TextMessage (str body) or a
        BytesMessage (bytes body) without the content-type the STOMP transport adds.
        """
        self.store([(queue, as_sent(message, jms=jms), delay_ms)])

    def put_many(self, items: Sequence[tuple[str, WireMessage, int]]) -> None:
        """Store several messages at once (a committed transaction)."""
        self.store([(queue, as_sent(message), delay_ms) for queue, message, delay_ms in items])

    def store(self, items: Sequence[tuple[str, Sent, int]], *, transaction: bool = False) -> None:
        """Store messages as sent; an AMQ_SCHEDULED_DELAY property delays one like a header.

        transaction: the messages were sent in a transaction (BEGIN, SEND, COMMIT). Artemis
        keeps the SEND's `transaction` header as a property of each, and files a later SEND that
        carries such a header under that transaction, which nobody commits: the message is
        never stored although its receipt came (shared BROKERS.md, 2026-11-28)."""
        with self._cond:
            now = self._clock()
            if self.flavour is BrokerFlavour.ARTEMIS:
                tx = f"tx-{next(self._transactions)}" if transaction else None
                items, lost, duplicates = artemis_stores(items, tx, self._duplicate_ids)
                self.lost_to_stale_transactions += lost
                self.dropped_as_duplicates += duplicates
            for queue, sent, delay_ms in items:
                delay = delay_ms or scheduled_delay(sent.message.properties)
                seq = next(self._seq)
                for target, routed in self._diverted(queue, sent, seq):
                    self._insert(Stored(seq, target, routed, now + delay / 1000.0))
            self._cond.notify_all()

    def run(self, ops: Sequence[Operation]) -> list[object]:
        """Artemis only: its broker control for the management operations the toolkit asks
        (transports/artemis_management.py), as testing/diverts.py models them."""
        if self.flavour is not BrokerFlavour.ARTEMIS:
            raise ManagementError(f"{self.flavour.value} has no management address")
        with self._cond:
            return [self._diverts.operate(op.name, op.params, op.resource) for op in ops]

    def diverts(self, queue: str) -> dict[str, str]:
        """The diverts on queue's address: target queue by divert name."""
        with self._cond:
            return self._diverts.of(queue)

    def _diverted(self, queue: str, sent: Sent, seq: int) -> list[tuple[str, Sent]]:
        """Where a message sent to queue is stored: its tenant's queue where the Classic plugin
        routes queue; a copy in the target of every exclusive divert whose filter matches; else
        queue itself."""
        if self._tenant_routed.routes(queue):
            target = plugin_target(queue, sent.message.properties.get(TENANT_PROPERTY))
            return [(queue, sent)] if target is None else [(target, readdressed(sent, queue))]
        diverted = self._diverts.route(queue, sent.message.properties)
        if diverted is None:
            return [(queue, sent)]
        return [
            (target, diverted_copy(sent, address=queue, divert=name, message_id=str(seq)))
            for name, target in diverted
        ]

    def _make_queue(self, name: str) -> None:
        self._queues.setdefault(name, [])

    def _insert(self, stored: Stored) -> None:
        bisect.insort(self._queues.setdefault(stored.queue, []), stored)

    # -- inspection for tests ------------------------------------------------------------------
    def messages(self, queue: str) -> list[WireMessage]:
        """Messages held in queue, in order, including scheduled and in-flight ones."""
        with self._cond:
            held = list(self._queues.get(queue, []))
            for consumer in self._consumers:
                held.extend(s for s in consumer.in_flight.values() if s.queue == queue)
            return [s.sent.message for s in sorted(held)]

    def depth(self, queue: str) -> int:
        """How many messages queue holds, in flight included."""
        return len(self.messages(queue))

    def queue_stats(self, queues: Sequence[str]) -> dict[str, QueueStats | None]:
        """What Classic's statistics plugin reports of each queue (InMemoryTransport.queue_stats):
        None for a queue never sent to nor subscribed to; scheduled messages are in no count,
        and their number is not told (Classic's scheduler serves the whole broker)."""
        with self._cond:
            return classic_queue_stats(self._queues, self._consumers, queues, self._clock())

    def _artemis_queue_counts(self) -> list[QueueCount]:
        """Every queue as Artemis's listQueues counts it (called with the lock held)."""
        return artemis_queue_counts(self._queues, self._consumers, self._clock())

    def list_queues(self, prefixes: Sequence[str]) -> list[ListedQueue]:
        """What Classic's statistics plugin answers for prefix + ">" (InMemoryTransport's
        list_queues): every queue sent to or subscribed to under a prefix, with its consumers."""
        with self._cond:
            names = sorted(q for q in self._queues if any(q.startswith(p) for p in prefixes))
            consumers = {q: sum(1 for c in self._consumers if c.queue == q) for q in names}
        stats = self.queue_stats(names)
        return [
            ListedQueue(name=q, stats=s, consumers=consumers[q])
            for q in names
            if (s := stats[q]) is not None
        ]

    # -- consumer side (used by InMemoryTransport) ---------------------------------------------
    def subscribe(
        self,
        connection: InMemoryTransport,
        generation: int,
        sub: tuple[str, str, SelectorLike | None, OnDelivery],
        headers: Mapping[str, str],
    ) -> Consumer:
        """A consumer for (id, queue, selector, on_delivery), its flow control read from the
        SUBSCRIBE headers as this flavour reads them."""
        sub_id, queue, selector, on_delivery = sub
        consumer = Consumer(
            sub_id,
            queue,
            selector,
            flow_control(self.flavour, headers),
            on_delivery,
            connection,
            generation,
            number=next(self._consumer_numbers),
        )
        with self._cond:
            # A consumer creates its queue, as on both brokers.
            self._queues.setdefault(queue, [])
            self._consumers.append(consumer)
            self._cond.notify_all()
        return consumer

    def unsubscribe(self, consumer: Consumer, *, failed: bool = False) -> None:
        """Remove a consumer; what it holds unacknowledged goes back, marked redelivered.

        failed: its connection was lost. Artemis counts a delivery only then (a clean close
        does not), and moves a message counted max_delivery_attempts times to its dead-letter
        address.
        """
        with self._cond:
            if consumer in self._consumers:
                self._consumers.remove(consumer)
            for stored in consumer.in_flight.values():
                stored.redelivered = True
                if not failed:
                    stored.deliveries -= 1
                elif self._max_deliveries is not None and stored.deliveries >= self._max_deliveries:
                    self._dead_letter(stored)
                    continue
                self._insert(stored)
            consumer.in_flight.clear()
            consumer.in_flight_bytes = 0
            self._cond.notify_all()

    def _dead_letter(self, stored: Stored) -> None:
        sent = broker_dead_letter(stored.sent, queue=stored.queue, message_id=str(stored.seq))
        queue = self._dead_letter_address
        self._insert(Stored(next(self._seq), queue, sent, self._clock()))

    def _expire(self, stored: Stored, wall_ms: int) -> None:
        moved = expired_copy(
            self.flavour,
            stored.sent,
            queue=stored.queue,
            message_id=str(stored.seq),
            now_ms=wall_ms,
            expiry_address=self._expiry_address,
        )
        if moved is not None:
            queue, sent = moved
            self._insert(Stored(next(self._seq), queue, sent, self._clock()))

    def ack(self, consumer: Consumer, seq: int) -> bool:
        """Forget an in-flight message; False when the consumer does not hold it."""
        with self._cond:
            if consumer.take(seq) is None:
                return False
            self._cond.notify_all()
            return True

    def forward(self, consumer: Consumer, seq: int, items: Sequence[tuple[str, Sent, int]]) -> bool:
        """Store items and forget an in-flight message in one step (a transaction with its ACK);
        False, with nothing stored, when the consumer does not hold it."""
        with self._cond:
            if seq not in consumer.in_flight:
                return False
            consumer.take(seq)
            self.store(items)
            return True

    def holds(self, consumer: Consumer, seq: int) -> bool:
        with self._cond:
            return seq in consumer.in_flight

    def close(self) -> None:
        """Stop the dispatcher thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _pick(self, now: float) -> tuple[list[tuple[Consumer, Delivery]], float | None]:
        """Assign ready messages to consumers with room; return the next scheduled time."""
        handed: list[tuple[Consumer, Delivery]] = []
        next_due: float | None = None
        wall_ms = int(self._wall_clock() * 1000)
        # A snapshot: an expired message moved elsewhere may create its queue.
        for queue, stored_list in list(self._queues.items()):
            consumers = [c for c in self._consumers if c.queue == queue]
            if not consumers:
                continue
            remaining: list[Stored] = []
            for stored in stored_list:
                if stored.available_at > now:
                    due = stored.available_at
                    next_due = due if next_due is None else min(next_due, due)
                    remaining.append(stored)
                    continue
                if has_expired(stored.sent, wall_ms):
                    self._expire(stored, wall_ms)
                    next_due = now  # its copy may be deliverable at once
                    continue
                start = next(self._rr) % len(consumers)
                ordered = consumers[start:] + consumers[:start]
                target = next((c for c in ordered if c.accepts(stored)), None)
                if target is None:
                    remaining.append(stored)
                    continue
                target.in_flight[stored.seq] = stored
                target.in_flight_bytes += stored.sent.size
                stored.deliveries += 1
                handed.append((target, self._delivery(target, stored)))
            self._queues[queue] = remaining
        return handed, next_due

    def _delivery(self, consumer: Consumer, stored: Stored) -> Delivery:
        """The Delivery the STOMP transport would make of this flavour's MESSAGE frame."""
        headers = message_headers(
            self.flavour,
            stored.sent,
            queue=stored.queue,
            subscription_id=consumer.id,
            ids=self._ids.next(stored.seq, consumer.number),
            redelivered=stored.redelivered,
        )
        token = (consumer, stored.seq, consumer.generation)
        return delivery_of(
            headers,
            stored.sent.body,
            subscription_id=consumer.id,
            token=token,
            flavour=self.flavour,
        )

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
            for consumer, delivery in handed:
                consumer.on_delivery(delivery)
