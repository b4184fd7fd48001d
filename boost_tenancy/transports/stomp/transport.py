"""StompTransport: the toolkit's Transport over STOMP 1.2 (stomp.py), for ActiveMQ Classic and
Artemis. Sends are confirmed by receipt, deliveries acknowledged one by one.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from boost_tenancy.errors import ConfigError, QueueStatsUnavailableError, TransportError
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports import artemis_queues
from boost_tenancy.transports.artemis_management import ManagedRoutes, Runs
from boost_tenancy.transports.base import (
    Delivery,
    ListedQueue,
    OnDelivery,
    Outgoing,
    QueueStats,
    SubscribeRequest,
    Subscription,
    TransportCapabilities,
)
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import TransportUrl
from boost_tenancy.transports.stomp.acks import AckToken, AckWriter
from boost_tenancy.transports.stomp.batch import StompBatch
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import (
    QUEUE_PREFIX,
    delivery_of,
    encode_frame,
    send_frame,
)
from boost_tenancy.transports.stomp.link import Link
from boost_tenancy.transports.stomp.management import management_session
from boost_tenancy.transports.stomp.receipts import new_receipt
from boost_tenancy.transports.stomp.settings import StompSettings
from boost_tenancy.transports.stomp.statistics import ClassicStatistics

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StompSubscription:
    """A subscription; the transport re-creates it with the same id after a reconnection."""

    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: OnDelivery


class StompTransport(ManagedRoutes):
    """Transport over STOMP 1.2; implements boost_tenancy.transports.base.Transport."""

    def __init__(self, settings: StompSettings | None = None) -> None:
        self._settings = settings or StompSettings()
        self._connection = StompConnection(
            self._settings, on_open=self._resubscribe, on_message=self._on_message
        )
        self._acks = AckWriter(self._connection)
        self._lock = threading.Lock()
        self._subscriptions: dict[str, StompSubscription] = {}
        self._subscribed_on: dict[str, int] = {}
        """Subscription id -> generation of the connection it was last created on."""
        self._ids = itertools.count(1)

    # -- properties ------------------------------------------------------------------------------
    @property
    def flavour(self) -> BrokerFlavour:
        """The broker, decided on CONNECTED from its server header; OTHER before connecting."""
        return self._connection.flavour

    @property
    def capabilities(self) -> TransportCapabilities:
        return self._connection.flavour.capabilities

    @property
    def server(self) -> str:
        """The broker's CONNECTED server header, e.g. 'ActiveMQ/5.17.2'."""
        return self._connection.server

    @property
    def is_classic(self) -> bool:
        return self._connection.flavour is BrokerFlavour.CLASSIC

    @property
    def is_connected(self) -> bool:
        return self._connection.is_connected

    def is_open(self, subscription: Subscription) -> bool:
        """Subscribed on the live connection (re-created there after a reconnection)."""
        link = self._connection.live()
        with self._lock:
            return link is not None and self._subscribed_on.get(subscription.id) == link.generation

    # -- lifecycle -------------------------------------------------------------------------------
    def connect(self) -> None:
        self._acks.start()
        self._connection.connect()

    def close(self) -> None:
        # Bounded by the connect timeout, not the receipt timeout: closing happens on SIGTERM,
        # and a broker that stopped reading must not hold the process beyond its grace period.
        # Acknowledgements not written are redelivered messages, never lost ones.
        self._acks.flush(
            min(self._settings.receipt_timeout_s, self._settings.connect_timeout_s), stop=True
        )
        with self._lock:
            self._subscriptions.clear()
            self._subscribed_on.clear()
        self._connection.close()

    # -- sending ---------------------------------------------------------------------------------
    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._send_confirmed([Outgoing(queue, message, delay_ms)], f"send to {queue!r}")

    def _send_confirmed(self, items: Sequence[Outgoing], what: str) -> None:
        """Send items in order, all confirmed by one receipt on the last: a connection's frames
        are handled in order. A failure may leave a prefix stored."""
        for queue, _, _ in items:
            check_queue_name(queue)
        # All are encoded before the first is written: a MessageEncodeError leaves nothing
        # written and nothing awaited.
        receipt = new_receipt()
        last = len(items) - 1
        frames = [
            self._send_frame(q, m, delay_ms, {"receipt": receipt} if i == last else {})
            for i, (q, m, delay_ms) in enumerate(items)
        ]
        link = self._connection.current()
        self._connection.confirm(link, frames, receipt, what)

    def _send_frame(
        self, queue: str, message: WireMessage, delay_ms: int, extra: Mapping[str, str]
    ) -> bytes:
        """send_frame, with what this broker needs to keep a delayed message's expiry."""
        kept = self.flavour.scheduled_send_headers(delay_ms, message.expires_at_ms)
        return send_frame(queue, message, delay_ms, {**kept, **extra} if kept else extra)

    def _transaction(
        self, items: Sequence[Outgoing], acks: tuple[Link, Sequence[str]] | None
    ) -> None:
        """Send items (and ack deliveries of one connection) in one transaction, by receipt."""
        for queue, _, _ in items:
            check_queue_name(queue)
        tx = f"tx-{uuid.uuid4().hex}"
        in_tx = {"transaction": tx}
        # Every SEND is encoded before BEGIN is written: a body that cannot be encoded fails
        # alone (MessageEncodeError), not as half a transaction on a healthy connection.
        sends = [self._send_frame(q, m, delay_ms, in_tx) for q, m, delay_ms in items]
        link = self._connection.current()
        if acks is not None and acks[0].generation != link.generation:
            raise TransportError("delivery belongs to a lost connection")
        receipt = new_receipt()

        def frames() -> Iterator[bytes]:
            yield encode_frame("BEGIN", in_tx)
            yield from sends
            for ack_id in acks[1] if acks is not None else ():
                yield encode_frame("ACK", {"id": ack_id, "transaction": tx})
            yield encode_frame("COMMIT", {"transaction": tx, "receipt": receipt})

        self._connection.confirm(link, frames(), receipt, f"commit of {len(items)} message(s)")

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        if not items:
            return
        outgoing = [Outgoing(q, m) for q, m in items]
        if atomic:
            self._transaction(outgoing, None)
        else:
            self._send_confirmed(outgoing, f"batch of {len(items)} message(s)")

    def open_batch(self, *, atomic: bool = True) -> StompBatch:
        return StompBatch(
            self._connection, lambda items: self.send_batch(items, atomic=False), atomic=atomic
        )

    # -- consuming -------------------------------------------------------------------------------
    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> StompSubscription:
        [sub] = self.subscribe_many([SubscribeRequest(queue, selector, prefetch, on_delivery)])
        return sub

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[StompSubscription]:
        subs = []
        for request in requests:
            if request.prefetch < 1:
                raise ConfigError(f"prefetch must be at least 1, got {request.prefetch}")
            subs.append(
                StompSubscription(
                    f"sub-{next(self._ids)}",
                    check_queue_name(request.queue),
                    request.selector,
                    request.prefetch,
                    request.on_delivery,
                )
            )
        with self._lock:
            for sub in subs:
                self._subscriptions[sub.id] = sub
            link = self._connection.live()
            if link is None:
                return subs  # created on (re)connection
            self._mark_subscribed(subs, link)
        self._subscribe_on(link, subs)
        return subs

    def _resubscribe(self, link: Link) -> None:
        """Re-create every subscription on a new connection (StompConnection's on_open)."""
        with self._lock:
            missing = [
                sub
                for sub in self._subscriptions.values()
                if self._subscribed_on.get(sub.id) != link.generation
            ]
            self._mark_subscribed(missing, link)
        try:
            self._subscribe_on(link, missing)
        except Exception as exc:
            # A subscription not re-created would never consume again on this connection, and
            # nothing would say so: unmark them and drop the connection, so that the reconnect
            # loop tries the whole connection again.
            with self._lock:
                for sub in missing:
                    if self._subscribed_on.get(sub.id) == link.generation:
                        del self._subscribed_on[sub.id]
            self._connection.abandon(link, f"re-subscribing failed: {exc}")
            raise

    def _mark_subscribed(self, subs: Sequence[StompSubscription], link: Link) -> None:
        # Under self._lock: whoever marks a subscription for a connection creates it there, so
        # a subscribe racing a reconnection creates it once, not twice or never.
        for sub in subs:
            self._subscribed_on[sub.id] = link.generation

    def _subscribe_on(self, link: Link, subs: Sequence[StompSubscription]) -> None:
        """Send every SUBSCRIBE first, then await the receipts: one round trip, not one each."""
        receipts = self._connection.receipts
        waiting = []
        for sub in subs:
            pending = receipts.expect(link.generation)
            # The connection's own flavour: a reconnection may reach another broker.
            headers = link.flavour.prefetch_headers(
                sub.prefetch, self._settings.artemis_window_bytes
            )
            headers["receipt"] = pending.id
            if sub.selector is not None:
                headers["selector"] = sub.selector.render()
            try:
                link.subscribe(QUEUE_PREFIX + sub.queue, sub.id, headers)
            except Exception as exc:
                receipts.discard(pending)
                raise TransportError(f"subscribe to {sub.queue!r} failed: {exc}") from exc
            waiting.append((pending, sub))
        for pending, sub in waiting:
            receipts.wait(pending, f"subscribe to {sub.queue!r}")

    def unsubscribe(self, subscription: object) -> None:
        sub_id = str(getattr(subscription, "id", ""))
        # Acknowledgements queued for its deliveries go out first: after UNSUBSCRIBE the broker
        # would take an unacknowledged message back (a re-driven dead letter, a moved backlog).
        self._acks.flush(min(self._settings.receipt_timeout_s, self._settings.connect_timeout_s))
        with self._lock:
            sub = self._subscriptions.pop(sub_id, None)
            self._subscribed_on.pop(sub_id, None)
        link = self._connection.live()
        if sub is not None and link is not None:
            try:
                link.unsubscribe(sub.id)
            except Exception as exc:
                raise TransportError(f"unsubscribe from {sub.queue!r} failed: {exc}") from exc

    def _on_message(self, generation: int, headers: Mapping[str, str], body: bytes) -> None:
        sub = self._subscriptions.get(headers.get("subscription", ""))
        if sub is None:
            return  # unsubscribed meanwhile: unacknowledged, so the broker redelivers it
        # The ack value is echoed back exactly as received (Artemis: '87061,87067').
        ack_id = headers.get("ack") or headers.get("message-id", "")
        sub.on_delivery(
            delivery_of(
                headers,
                body,
                subscription_id=sub.id,
                token=(generation, ack_id),
                flavour=self._connection.flavour,
            )
        )

    # -- settling --------------------------------------------------------------------------------
    @staticmethod
    def _token(delivery: Delivery) -> AckToken:
        token = delivery.token
        if not (isinstance(token, tuple) and len(token) == 2):
            raise TransportError("delivery was not made by this STOMP transport")
        return token[0], str(token[1])

    def _ack_target(self, delivery: Delivery) -> tuple[Link, str] | None:
        """The live connection that made delivery and its ack id; None once it is lost."""
        generation, ack_id = self._token(delivery)
        link = self._connection.live()
        if link is None or link.generation != generation:
            return None
        return link, ack_id

    def ack(self, delivery: Delivery) -> None:
        # The ack thread writes every acknowledgement waiting in one socket write; close()
        # flushes them first.
        self._acks.put(self._token(delivery))

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        target = self._ack_target(delivery)
        if target is None:
            raise TransportError("delivery belongs to a lost connection; the broker redelivers it")
        if not items:
            self.ack(delivery)
        elif target[0].flavour.capabilities.atomic_forward:
            self._transaction(items, (target[0], [target[1]]))
        else:
            # At least once: every copy is confirmed before the ack goes out, so a connection
            # lost in between redelivers the original (a duplicate with the same boostMessageId),
            # never loses it. Artemis would ignore an ACK inside the transaction anyway.
            self._send_confirmed(items, f"forward of {len(items)} message(s)")
            self.ack(delivery)

    def send_then_ack_many(
        self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]
    ) -> list[Delivery]:
        live = []
        for delivery, items in moves:
            target = self._ack_target(delivery)
            if target is None:
                continue  # its connection is gone: the broker redelivers it
            live.append((delivery, items, target))
        if not live:
            return []
        link = live[0][2][0]
        if not link.flavour.capabilities.atomic_forward:
            copies = [item for _, items, _ in live for item in items]
            if copies:
                self._send_confirmed(copies, f"forward of {len(copies)} message(s)")
            for delivery, _, _ in live:
                self.ack(delivery)
            return [delivery for delivery, _, _ in live]
        if any(target[0].generation != link.generation for _, _, target in live):
            raise TransportError("deliveries of different connections cannot share a transaction")
        self._transaction(
            [item for _, items, _ in live for item in items],
            (link, [target[1] for _, _, target in live]),
        )
        return [delivery for delivery, _, _ in live]

    def is_live(self, delivery: Delivery) -> bool:
        return self._ack_target(delivery) is not None

    # -- statistics ------------------------------------------------------------------------------
    def queue_stats(self, queues: Sequence[str]) -> dict[str, QueueStats | None]:
        """Counts of the named queues (QueueStatsReader), where capabilities.queue_statistics;
        asked on a connection of their own (stomp/statistics.py)."""
        if not self.capabilities.queue_statistics:
            raise QueueStatsUnavailableError(
                f"{self.flavour.value} gives no queue statistics over STOMP"
            )
        if self.flavour is BrokerFlavour.ARTEMIS:
            return self.management_session(
                lambda session: artemis_queues.queue_stats(session, queues)
            )
        return ClassicStatistics(self._settings).queue_stats(queues)

    def list_queues(self, prefixes: Sequence[str]) -> list[ListedQueue]:
        """Every queue under the prefixes (QueueLister), where capabilities.queue_listing."""
        if not self.capabilities.queue_listing:
            raise QueueStatsUnavailableError(f"{self.flavour.value} lists no queues over STOMP")
        if self.flavour is BrokerFlavour.ARTEMIS:
            return self.management_session(
                lambda session: artemis_queues.list_queues(session, prefixes)
            )
        return ClassicStatistics(self._settings).list_queues(prefixes)

    def management_session(self, work: Callable[[Runs], T]) -> T:
        """Artemis's management operations (ManagedRoutes: its exclusive diverts; its queue
        counts); asked on a connection of their own (stomp/management.py)."""
        if self.flavour is not BrokerFlavour.ARTEMIS:
            raise TransportError(f"{self.flavour.value} has no management address")
        return management_session(self._settings, work)


def transport_from_url(url: TransportUrl, options: ConnectOptions | None) -> StompTransport:
    """The registry's factory for stomp:// URLs (see ConnectionSettings.from_url)."""
    return StompTransport(StompSettings.from_url(url, options))
