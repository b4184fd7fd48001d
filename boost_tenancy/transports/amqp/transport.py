"""AmqpTransport: the toolkit's Transport over AMQP 1.0 (python-qpid-proton), for Artemis and
any AMQP 1.0 broker. Sends are encoded on the calling thread and confirmed by the broker's
accepted outcome; deliveries are accepted one by one, credit given back once per loop pass.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from boost_tenancy.errors import (
    BoostTenancyError,
    ConfigError,
    NotConfirmedError,
    QueueStatsUnavailableError,
    TransportError,
)
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports import artemis_queues
from boost_tenancy.transports.amqp import calls
from boost_tenancy.transports.amqp.batch import AmqpBatch
from boost_tenancy.transports.amqp.connection import AmqpConnection
from boost_tenancy.transports.amqp.encoding import EncodedMessage, encode_message
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.amqp.management import AmqpManagementSession
from boost_tenancy.transports.amqp.publisher import Publisher
from boost_tenancy.transports.amqp.receiving import DeliveryToken
from boost_tenancy.transports.amqp.settings import AmqpSettings
from boost_tenancy.transports.amqp.subscriptions import AmqpSubscription, SubscriptionSpec
from boost_tenancy.transports.amqp.waiters import all_of
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
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import TransportUrl

T = TypeVar("T")


class AmqpTransport(ManagedRoutes):
    """Transport over AMQP 1.0; implements boost_tenancy.transports.base.Transport."""

    def __init__(self, settings: AmqpSettings | None = None) -> None:
        self._settings = settings or AmqpSettings()
        self._engine = AmqpConnection(self._settings)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._publisher: Publisher | None = None
        """The connection of what this transport sends, where a refusal ends the connection
        (AmqpFlavour.refused_send_ends_connection); None: sends share the subscriptions' one."""
        self._started = False
        self._stopped = False

    # -- properties ------------------------------------------------------------------------------
    @property
    def flavour(self) -> AmqpFlavour:
        """The broker, decided from its open frame; OTHER before connecting."""
        return self._engine.flavour

    @property
    def capabilities(self) -> TransportCapabilities:
        return self._engine.capabilities

    @property
    def server(self) -> str:
        """The broker's product and version from its open frame, e.g. 'RabbitMQ/3.10.8'."""
        return self._engine.remote_product

    @property
    def is_connected(self) -> bool:
        return self._engine.is_open

    def is_open(self, subscription: Subscription) -> bool:
        """Its receiver attached on the open connection and confirmed by the broker."""
        return self._engine.is_open and self._engine.receiving.is_attached(subscription.id)

    # -- lifecycle -------------------------------------------------------------------------------
    def connect(self) -> None:
        with self._lock:
            if self._stopped:
                raise TransportError("this AmqpTransport was closed; make a new one")
            if self._started:
                return  # connected already (the runner connects what it is given)
            self._started = True
        try:
            calls.open_connection(self._engine)
            if self._engine.flavour.refused_send_ends_connection:
                # Its refusal of one message would end the connection every subscription of
                # every tenant is on: what this transport sends goes on one of its own.
                self._publisher = Publisher(self._settings)
                self._publisher.open()
        except TransportError:
            self.close()
            raise

    def close(self) -> None:
        """Close cleanly: what was not accepted goes back to its queue, uncounted."""
        with self._lock:
            if not self._started or self._stopped:
                return
            self._stopped = True
        if self._publisher is not None:
            self._publisher.stop()
        calls.stop(self._engine)

    def _when_open(self, what: str, work: Callable[[Future[None]], None]) -> None:
        calls.when_open(self._engine, what, work)

    # -- sending ---------------------------------------------------------------------------------
    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        self._send_confirmed([Outgoing(queue, message, delay_ms)], f"send to {queue!r}")

    def _encode(self, items: Sequence[Outgoing]) -> list[tuple[str, EncodedMessage]]:
        """Every item checked and encoded before anything is sent: a MessageEncodeError leaves
        nothing written."""
        self._check_delays(items)
        return [(check_queue_name(q), encode_message(m, delay_ms)) for q, m, delay_ms in items]

    def _check_delays(self, items: Sequence[Outgoing]) -> None:
        cannot_delay = self._engine.is_open and not self.capabilities.delayed_delivery
        if cannot_delay and any(delay_ms > 0 for _, _, delay_ms in items):
            raise TransportError(
                f"{self.server} does not delay messages (no DELAYED_DELIVERY); "
                "a delayed send would arrive at once"
            )

    def _send_confirmed(self, items: Sequence[Outgoing], what: str) -> None:
        self.send_encoded(self._encode(items), what)

    def send_encoded(
        self, items: Sequence[tuple[str, EncodedMessage]], what: str, *, as_queue: bool = True
    ) -> None:
        """Send messages already encoded, confirmed by the broker as every send is; as_queue=
        False sends to a node that is no queue (management requests, amqp/management.py)."""
        [error] = self._send_each(what, [items], as_queue=as_queue)
        if error is not None:
            raise error

    def _send_each(
        self,
        what: str,
        groups: Sequence[Sequence[tuple[str, EncodedMessage]]],
        *,
        as_queue: bool = True,
        originals: Sequence[DeliveryToken] = (),
    ) -> list[BaseException | None]:
        """Each group sent and confirmed on its own, on the publisher's connection if any;
        originals: each group's delivery, whose loss makes sending its group again needless."""
        if self._publisher is not None:
            wanted = (
                (lambda index: self._token_is_live(originals[index]))
                if originals
                else (lambda _index: True)
            )
            return self._publisher.send_each(what, groups, as_queue=as_queue, wanted=wanted)
        return calls.send_each(self._engine, what, groups, as_queue=as_queue)

    def _transaction(self, items: Sequence[Outgoing], accepts: Sequence[DeliveryToken]) -> None:
        encoded = self._encode(items)
        what = f"transaction of {len(items)} message(s)"
        self._when_open(what, lambda done: self._engine.transaction(encoded, accepts, done))

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        if not items:
            return
        outgoing = [Outgoing(q, m) for q, m in items]
        if not atomic:
            self._send_confirmed(outgoing, f"batch of {len(items)} message(s)")
            return
        self._require_atomic_batches()
        self._transaction(outgoing, [])

    def _require_atomic_batches(self) -> None:
        if self._engine.is_open and not self.capabilities.atomic_batches:
            raise ConfigError(
                f"{self.server} has no transactions, so an atomic batch cannot be all or none; "
                "send with atomic=False (re-send with the same message ids after a failure)"
            )

    def open_batch(self, *, atomic: bool = True) -> AmqpBatch:
        if atomic:
            self._require_atomic_batches()
        return AmqpBatch(self, atomic)

    # -- consuming -------------------------------------------------------------------------------
    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> AmqpSubscription:
        [sub] = self.subscribe_many([SubscribeRequest(queue, selector, prefetch, on_delivery)])
        return sub

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[AmqpSubscription]:
        specs = []
        for request in requests:
            if request.prefetch < 1:
                raise ConfigError(f"prefetch must be at least 1, got {request.prefetch}")
            specs.append(
                SubscriptionSpec(
                    f"sub-{next(self._ids)}",
                    check_queue_name(request.queue),
                    request.selector,
                    request.prefetch,
                    request.on_delivery,
                )
            )
        if not specs:
            return []

        def attach(done: Future[None]) -> None:
            # Every attach goes out first, then all replies are awaited: one round trip.
            futures: list[Future[None]] = [Future() for _ in specs]
            all_of(futures, done)
            self._engine.subscribe(specs, futures)

        what = f"subscribe to {', '.join(sorted({s.queue for s in specs}))}"
        try:
            self._when_open(what, attach)
        except BoostTenancyError:
            ids = [spec.id for spec in specs]
            self._engine.loop.post(lambda: self._forget(ids))
            raise
        return [AmqpSubscription(s.id, s.queue, s.selector) for s in specs]

    def _forget(self, subscription_ids: Sequence[str]) -> None:
        for sub_id in subscription_ids:
            self._engine.unsubscribe(sub_id)

    def unsubscribe(self, subscription: object) -> None:
        sub_id = str(getattr(subscription, "id", ""))
        # Posted after every accept already asked for: they reach the broker before the detach.
        done = self._engine.loop.submit(lambda: self._engine.unsubscribe(sub_id))
        try:
            done.result(self._settings.confirm_timeout_s)
        except FutureTimeout:
            raise TransportError("unsubscribe: the AMQP loop did not answer") from None

    # -- settling --------------------------------------------------------------------------------
    @staticmethod
    def _token(delivery: Delivery) -> DeliveryToken:
        token = delivery.token
        if not isinstance(token, DeliveryToken):
            raise TransportError("delivery was not made by this AMQP transport")
        return token

    def ack(self, delivery: Delivery) -> None:
        self._accept([self._token(delivery)])

    def _accept(self, tokens: list[DeliveryToken]) -> None:
        # Looked up when the task runs (the contract suite's lose_connection_before_next_ack
        # replaces the engine's accept).
        engine = self._engine
        engine.loop.post(lambda: engine.accept(tokens))

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        if items:
            self.send_then_ack_many([(delivery, items)], _raise_if_lost=True)
            return
        # Nothing to send (a handler that published nothing): a plain accept, which is atomic
        # on its own, on every broker.
        token = self._token(delivery)
        if not self._token_is_live(token):
            raise TransportError("delivery belongs to a lost connection; the broker redelivers it")
        self._accept([token])

    def send_then_ack_many(
        self,
        moves: Sequence[tuple[Delivery, Sequence[Outgoing]]],
        *,
        _raise_if_lost: bool = False,
    ) -> list[Delivery]:
        kept = [(d, items) for d, items in moves if self.is_live(d)]
        if not kept:
            if _raise_if_lost and moves:
                raise TransportError(
                    "delivery belongs to a lost connection; the broker redelivers it"
                )
            return []
        moved = [d for d, _ in kept]
        copies = [item for _, items in kept for item in items]
        tokens = [self._token(d) for d in moved]
        if not copies:
            self._accept(tokens)
            return moved
        if self.capabilities.atomic_forward:
            self._transaction(copies, tokens)
            return moved
        # At least once: a delivery's copies are confirmed before it is accepted, so a connection
        # lost in between redelivers an original (a duplicate with the same boostMessageId),
        # never loses one. Each delivery's copies are confirmed on their own (all sent in one
        # pass): one the broker refuses leaves its own original alone unaccepted, and the caller
        # moving the rest again moves only those (a retry of the whole batch stored the others
        # twice).
        encoded = [self._encode(items) for _, items in kept]
        try:
            errors = self._send_each(
                f"forward of {len(copies)} message(s)", encoded, originals=tokens
            )
        except NotConfirmedError:
            if self._publisher is not None:
                # The originals' connection is given up too, as the publisher's was: the broker
                # redelivers them rather than holding them unacknowledged for good.
                engine = self._engine
                engine.loop.post(lambda: engine.abandon("a forward's copies went unconfirmed"))
            raise
        self._accept([token for token, error in zip(tokens, errors, strict=True) if error is None])
        forwarded = [d for d, error in zip(moved, errors, strict=True) if error is None]
        first = next((error for error in errors if error is not None), None)
        if first is not None and not forwarded:
            raise first  # nothing moved: the batch may be tried again whole
        if first is not None:
            raise PartlyForwardedError(
                f"forward of {len(moved)} message(s): {len(moved) - len(forwarded)} refused, "
                f"the first: {first}",
                forwarded,
            )
        return moved

    # -- queue counts and routes at send time (Artemis) --------------------------------------------
    def queue_stats(self, queues: Sequence[str]) -> dict[str, QueueStats | None]:
        """Counts of the named queues (QueueStatsReader), where capabilities.queue_statistics:
        Artemis's listQueues, asked on this connection."""
        if not self.capabilities.queue_statistics:
            raise QueueStatsUnavailableError(
                f"{self.server or 'the broker'} gives no queue statistics over AMQP"
            )
        names = [check_queue_name(q) for q in queues]
        return self.management_session(lambda session: artemis_queues.queue_stats(session, names))

    def list_queues(self, prefixes: Sequence[str]) -> list[ListedQueue]:
        """Every queue under the prefixes (QueueLister), where capabilities.queue_listing."""
        if not self.capabilities.queue_listing:
            raise QueueStatsUnavailableError(f"{self.server or 'the broker'} lists no queues")
        checked = [check_queue_prefix(p) for p in prefixes]
        return self.management_session(lambda session: artemis_queues.list_queues(session, checked))

    def management_session(self, work: Callable[[Runs], T]) -> T:
        """Artemis's management operations (ManagedRoutes: its exclusive diverts; its queue
        counts), asked on this connection (amqp/management.py)."""
        if not (self.capabilities.send_time_routes or self.capabilities.queue_statistics):
            raise TransportError(f"{self.server or 'the broker'} has no management address")
        session = AmqpManagementSession(self, self._settings.confirm_timeout_s)
        try:
            return work(session)
        finally:
            session.close()  # logs, rather than raises over, what it cannot undo

    def is_live(self, delivery: Delivery) -> bool:
        return self._token_is_live(self._token(delivery))

    def _token_is_live(self, token: DeliveryToken) -> bool:
        # Read from another thread: the connection's generation and state are plain values;
        # whether the delivery is still unsettled is known on the loop, which drops a stale one.
        engine = self._engine
        return engine.is_open and token.generation == engine.generation


def transport_from_url(url: TransportUrl, options: ConnectOptions | None) -> AmqpTransport:
    """The registry's factory for amqp:// and amqps:// URLs (see ConnectionSettings.from_url)."""
    return AmqpTransport(AmqpSettings.from_url(url, options))
