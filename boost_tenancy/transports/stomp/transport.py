"""StompTransport: the toolkit's Transport over STOMP 1.2 (stomp.py), for ActiveMQ Classic and
Artemis. Sends are confirmed by receipt, deliveries acknowledged one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from boost_tenancy.errors import NotConfirmedError, QueueStatsUnavailableError, TransportError
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports import artemis_queues
from boost_tenancy.transports.artemis_management import ManagedRoutes
from boost_tenancy.transports.artemis_requests import Runs
from boost_tenancy.transports.base import (
    Delivery,
    ListedQueue,
    OnDelivery,
    Outgoing,
    QueueStats,
    SubscribeRequest,
    Subscription,
)
from boost_tenancy.transports.capabilities import TransportCapabilities
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import TransportUrl
from boost_tenancy.transports.stomp.batch import StompBatch, new_transaction
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import encode_frame, send_frame
from boost_tenancy.transports.stomp.link import Link
from boost_tenancy.transports.stomp.management import management_session
from boost_tenancy.transports.stomp.receipts import new_receipt
from boost_tenancy.transports.stomp.sending import Sender, always
from boost_tenancy.transports.stomp.settings import StompSettings
from boost_tenancy.transports.stomp.statistics import ClassicStatistics
from boost_tenancy.transports.stomp.subscriptions import Line, StompSubscription, Subscriptions

T = TypeVar("T")


class StompTransport(ManagedRoutes):
    """Transport over STOMP 1.2; implements boost_tenancy.transports.base.Transport."""

    def __init__(self, settings: StompSettings | None = None) -> None:
        self._settings = settings or StompSettings()
        self._subscriptions = Subscriptions(self._settings)
        self._connection: StompConnection = self._subscriptions.primary.connection
        """The transport's own connection: every send, and the first subscriptions (none on
        Artemis: stomp/sending.py)."""
        self._sender = Sender(self._connection, self._settings)

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
        """The transport's connection, and every other one carrying subscriptions, is up."""
        return self._subscriptions.is_connected

    def is_open(self, subscription: Subscription) -> bool:
        """Subscribed on its connection, live (re-created there after a reconnection)."""
        return self._subscriptions.is_open(subscription)

    # -- lifecycle -------------------------------------------------------------------------------
    def connect(self) -> None:
        self._subscriptions.connect()

    def close(self) -> None:
        self._sender.close()
        self._subscriptions.close()

    # -- sending ---------------------------------------------------------------------------------
    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._send_confirmed([Outgoing(queue, message, delay_ms)], f"send to {queue!r}")

    def _send_confirmed(
        self, items: Sequence[Outgoing], what: str, wanted: Callable[[], bool] = always
    ) -> None:
        """Send items in order, all confirmed by one receipt on the last: a connection's frames
        are handled in order. A failure may leave a prefix stored. Sent again alone when lost
        with the connection as stomp/sending.py says, if wanted() still holds then."""
        for queue, _, _ in items:
            check_queue_name(queue)
        # All are encoded before the first is written: a MessageEncodeError leaves nothing
        # written and nothing awaited.
        head = [self._send_frame(q, m, delay_ms, {}) for q, m, delay_ms in items[:-1]]
        queue, message, delay_ms = items[-1]

        def frames_for(receipt: str) -> list[bytes]:
            return [*head, self._send_frame(queue, message, delay_ms, {"receipt": receipt})]

        self._sender.confirm(frames_for, what, {q for q, _, _ in items}, wanted=wanted)

    def _send_frame(
        self, queue: str, message: WireMessage, delay_ms: int, extra: Mapping[str, str]
    ) -> bytes:
        """send_frame, with what this broker needs to keep a delayed message's expiry."""
        kept = self.flavour.scheduled_send_headers(delay_ms, message.expires_at_ms)
        return send_frame(queue, message, delay_ms, {**kept, **extra} if kept else extra)

    def _transaction(
        self, items: Sequence[Outgoing], acks: tuple[Line, Link, Sequence[str]] | None
    ) -> None:
        """Send items (and ack deliveries of one connection) in one transaction, by receipt: on
        the connection that made those deliveries, else on the transport's own."""
        for queue, _, _ in items:
            check_queue_name(queue)
        tx = new_transaction()
        in_tx = {"transaction": tx}
        # Every SEND is encoded before BEGIN is written: a body that cannot be encoded fails
        # alone (MessageEncodeError), not as half a transaction on a healthy connection.
        sends = [self._send_frame(q, m, delay_ms, in_tx) for q, m, delay_ms in items]
        ack_ids = acks[2] if acks is not None else ()
        what = f"commit of {len(items)} message(s)"

        def frames_for(receipt: str) -> list[bytes]:
            return [
                encode_frame("BEGIN", in_tx),
                *sends,
                *(encode_frame("ACK", {"id": ack_id, "transaction": tx}) for ack_id in ack_ids),
                encode_frame("COMMIT", {"transaction": tx, "receipt": receipt}),
            ]

        if acks is None:
            # Nothing acknowledged: lost with the connection, it is sent again whole (a
            # transaction the connection's end cut short stored nothing).
            self._sender.confirm(frames_for, what, {q for q, _, _ in items})
            return
        line, link, _ = acks
        if line.connection.current().generation != link.generation:
            raise TransportError("delivery belongs to a lost connection")
        receipt = new_receipt()
        line.connection.confirm(link, frames_for(receipt), receipt, what)

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        if not items:
            return
        outgoing = [Outgoing(q, m) for q, m in items]
        if atomic:
            self._transaction(outgoing, None)
        else:
            self._send_confirmed(outgoing, f"batch of {len(items)} message(s)")

    def open_batch(self, *, atomic: bool = True) -> StompBatch:
        return StompBatch(self._sender, atomic=atomic)

    # -- consuming -------------------------------------------------------------------------------
    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> StompSubscription:
        [sub] = self.subscribe_many([SubscribeRequest(queue, selector, prefetch, on_delivery)])
        return sub

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[StompSubscription]:
        return self._subscriptions.subscribe_many(requests)

    def unsubscribe(self, subscription: object) -> None:
        self._subscriptions.unsubscribe(subscription)

    # -- settling --------------------------------------------------------------------------------
    def ack(self, delivery: Delivery) -> None:
        self._subscriptions.ack(delivery)

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        target = self._subscriptions.ack_target(delivery)
        if target is None:
            raise TransportError("delivery belongs to a lost connection; the broker redelivers it")
        line, link, ack_id = target
        if not items:
            self.ack(delivery)
        elif link.flavour.capabilities.atomic_forward:
            self._transaction(items, (line, link, [ack_id]))
        else:
            # At least once: every copy is confirmed before the ack goes out, so a connection
            # lost in between redelivers the original (a duplicate with the same boostMessageId),
            # never loses it. Artemis would ignore an ACK inside the transaction anyway.
            self._forward(line, link, items)
            self.ack(delivery)

    def send_then_ack_many(
        self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]
    ) -> list[Delivery]:
        by_line: dict[int, tuple[Line, Link, list[tuple[Delivery, Sequence[Outgoing], str]]]] = {}
        for delivery, items in moves:
            target = self._subscriptions.ack_target(delivery)
            if target is None:
                continue  # its connection is gone: the broker redelivers it
            line, link, ack_id = target
            by_line.setdefault(line.index, (line, link, []))[2].append((delivery, items, ack_id))
        done: list[Delivery] = []
        for line, link, live in by_line.values():
            copies = [item for _, items, _ in live for item in items]
            if link.flavour.capabilities.atomic_forward:
                # One transaction per connection: an ACK commits only on the connection that
                # received its message.
                self._transaction(copies, (line, link, [ack_id for _, _, ack_id in live]))
            else:
                if copies:
                    self._forward(line, link, copies)
                for delivery, _, _ in live:
                    self.ack(delivery)
            done.extend(delivery for delivery, _, _ in live)
        return done

    def _forward(self, line: Line, link: Link, copies: Sequence[Outgoing]) -> None:
        """Send the copies of deliveries of line's link, confirmed, while that link lives. When
        their fate is unknown the originals' connection is given up too: the broker redelivers
        them rather than holding them unacknowledged for good (the copies go on the transport's
        own connection, which on Artemis carries no subscription)."""
        try:
            self._send_confirmed(
                copies,
                f"forward of {len(copies)} message(s)",
                lambda: line.connection.live() is link,
            )
        except NotConfirmedError:
            line.connection.abandon(link, "a forward's copies went unconfirmed")
            raise

    def is_live(self, delivery: Delivery) -> bool:
        return self._subscriptions.ack_target(delivery) is not None

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
