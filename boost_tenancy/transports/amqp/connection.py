"""The AMQP connection's event handler: it owns every proton object and runs on the loop thread.

It opens the connection (SASL, TLS), reconnects with backoff, keeps one sender per address,
confirms sends by the broker's settlement, attaches receivers with their selector checked in the
broker's reply, gives credit as deliveries are settled, and runs transactions. AmqpTransport
(transport.py) is the thread-safe face of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import structlog
from proton import (
    Condition,
    Connection,
    Delivery,
    Described,
    Endpoint,
    Event,
    Handler,
    Link,
    Message,
    ProtonException,
    Receiver,
    Sender,
    SSLDomain,
    Terminus,
    symbol,
    ulong,
)
from proton.handlers import TransactionHandler

from boost_tenancy.errors import TransportError
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports import base
from boost_tenancy.transports.amqp.codec import body_of, correlation_of, properties_of
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.amqp.loop import EventLoop
from boost_tenancy.transports.amqp.settings import AmqpSettings
from boost_tenancy.transports.base import TransportCapabilities

log = structlog.get_logger("boost_tenancy.transports.amqp")

T = TypeVar("T")


def _given(value: T | None, what: str) -> T:
    """An event's part that proton types as optional but always sets for that event."""
    if value is None:
        raise TransportError(f"proton event without its {what}")
    return value


SELECTOR_FILTER: Final = symbol("apache.org:selector-filter:string")
"""The source filter that carries a JMS selector (Artemis; Qpid brokers)."""
QUEUE_CAPABILITY: Final = symbol("queue")
"""Terminus capability: the address is a queue (Artemis: anycast). Without it Artemis creates a
missing address as multicast and drops what is sent there (measured on 2.44)."""
_TRANSACTIONAL_STATE: Final = 0x34
_TRANSACTIONAL_OUTCOMES: Final = {
    ulong(0x24): Delivery.ACCEPTED,
    symbol("amqp:accepted:list"): Delivery.ACCEPTED,
    ulong(0x25): Delivery.REJECTED,
    symbol("amqp:rejected:list"): Delivery.REJECTED,
}


@dataclass(slots=True, eq=False)
class SubscriptionSpec:
    """A subscription as asked for; re-attached with the same id after a reconnection."""

    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: base.OnDelivery


@dataclass(frozen=True, slots=True)
class DeliveryToken:
    """The transport-private handle of a delivery: which connection and which of its
    deliveries. It holds no proton object: those are touched, and freed, on the loop thread
    only (a worker thread dropping the last reference to one raced the loop and stalled it)."""

    generation: int
    number: int
    subscription_id: str


@dataclass(slots=True, eq=False)
class _Attach:
    spec: SubscriptionSpec
    receiver: Receiver
    future: Future[None] | None
    """Resolved when the broker confirms the attach; None for a re-attach after reconnecting."""
    opened: bool = False


class _Timer(Handler):
    def __init__(self, callback: Callable[[], None]) -> None:
        super().__init__()
        self._callback = callback

    def on_timer_task(self, event: Event) -> None:
        self._callback()


@dataclass(slots=True, eq=False)
class _TransactionWork:
    """One transaction: the sends and the deliveries to accept in it, and who waits."""

    sends: Sequence[tuple[str, Message]]
    accepts: Sequence[DeliveryToken]
    future: Future[None]
    connection: Connection
    done: bool = False

    def finish(self, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        resolve(self.future, error)


class _TransactionHandler(TransactionHandler):
    """proton's transaction callbacks for one _TransactionWork."""

    def __init__(self, engine: AmqpConnection, work: _TransactionWork) -> None:
        super().__init__()
        self._engine = engine
        self._work = work

    def on_transaction_declared(self, event: Event) -> None:
        self._engine._run_transaction(event.transaction, self._work)

    def on_transaction_declare_failed(self, event: Event) -> None:
        self._work.finish(TransportError("the broker refused to start a transaction"))

    def on_transaction_committed(self, event: Event) -> None:
        self._work.finish()

    def on_transaction_commit_failed(self, event: Event) -> None:
        self._work.finish(TransportError("the broker refused to commit the transaction"))

    def on_transaction_aborted(self, event: Event) -> None:
        self._work.finish(TransportError("the transaction was rolled back"))

    def on_link_remote_close(self, event: Event) -> None:
        condition = _describe(_given(event.link, "link").remote_condition)
        self._work.finish(
            TransportError(f"the broker closed its transaction coordinator: {condition}")
        )


def _describe(condition: Condition | None) -> str:
    if condition is None:
        return "no reason given"
    return f"{condition.name}: {condition.description}" if condition.description else condition.name


class AmqpConnection(Handler):
    """Every proton object of one transport, on the loop thread only.

    Attributes read from other threads (generation, is_open, flavour) are plain values swapped
    whole, never partly written.
    """

    def __init__(self, settings: AmqpSettings, name: str = "amqp-transport") -> None:
        super().__init__()
        self.settings = settings
        self.loop = EventLoop(self, name, on_failure=self.loop_failed)
        self.generation = 0
        self.is_open = False
        self.flavour = AmqpFlavour.OTHER
        self.capabilities: TransportCapabilities = AmqpFlavour.OTHER.capabilities()
        self.remote_product = ""
        self._conn: Connection | None = None
        self._closing = False
        self._reason = ""
        self._first_open: Future[None] = Future()
        self._closed: Future[None] = Future()
        self._delay = settings.reconnect_initial_s
        self._senders: dict[str, Sender] = {}
        self._confirms: dict[Delivery, Future[None]] = {}
        self._held: dict[tuple[int, int], Delivery] = {}
        """Deliveries handed on and not settled yet, by (generation, number)."""
        self._numbers = itertools.count(1)
        self._subscriptions: dict[str, SubscriptionSpec] = {}
        self._attaches: dict[Link, _Attach] = {}
        self._receiver_of: dict[str, Link] = {}
        self._waiting_for_open: list[Callable[[], None]] = []
        self._ids = itertools.count(1)

    # -- the loop's tasks -----------------------------------------------------------------------
    def on_boost_tasks(self, event: Event) -> None:
        self.loop.run_tasks()

    def on_unhandled(self, method: str, *args: Any) -> None:
        pass

    # -- opening and losing the connection ------------------------------------------------------
    def start(self) -> Future[None]:
        """Start the loop and the first connection attempt; the future resolves when the broker
        has opened the connection, or fails with the reason it could not."""
        self.loop.start()
        self.loop.post(self._open_connection)
        return self._first_open

    def _ssl_domain(self) -> SSLDomain | None:
        s = self.settings
        if not s.tls:
            return None
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if s.ca_file is not None:
            domain.set_trusted_ca_db(s.ca_file)
        if s.cert_file is not None and s.key_file is not None:
            domain.set_credentials(s.cert_file, s.key_file, s.key_password)
        if s.verify_host:
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, s.ca_file)
        else:
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER, s.ca_file)
        return domain

    def _open_connection(self) -> None:
        if self._closing:
            return
        s = self.settings
        self._reason = ""
        try:
            conn = self.loop.container.connect(
                url=s.url,
                reconnect=False,
                heartbeat=s.heartbeat_s,
                ssl_domain=self._ssl_domain(),
                user=s.username,
                password=s.password,
                allowed_mechs="PLAIN" if s.username is not None else "ANONYMOUS",
                allow_insecure_mechs=True,
                virtual_host=s.vhost,
                sni=s.host if s.tls else None,
            )
        except (ProtonException, OSError) as exc:
            self._lost(None, f"cannot connect to {s.url}: {exc}")
            return
        self._conn = conn
        self.loop.container.schedule(
            s.connect_timeout_s, _Timer(lambda: self._connect_timed_out(conn))
        )

    def _connect_timed_out(self, conn: Connection) -> None:
        if conn == self._conn and not self.is_open:
            self._reason = f"no open frame within {self.settings.connect_timeout_s} s"
            conn.close()
            if conn.transport is not None:
                conn.transport.close_tail()
                conn.transport.close_head()
            self._lost(conn, self._reason)

    def on_connection_remote_open(self, event: Event) -> None:
        conn = _given(event.connection, "connection")
        if conn != self._conn:
            return
        properties = conn.remote_properties or {}
        offered = [str(c) for c in (conn.remote_offered_capabilities or ())]
        self.flavour = AmqpFlavour.from_open(properties)
        self.capabilities = self.flavour.capabilities(offered)
        self.remote_product = f"{properties.get('product', '?')}/{properties.get('version', '?')}"
        self._senders = {}
        self._delay = self.settings.reconnect_initial_s
        self.generation += 1
        self.is_open = True
        log.debug("amqp_connected", broker=self.remote_product, generation=self.generation)
        for spec in self._subscriptions.values():
            self._attach(spec, None)
        waiting, self._waiting_for_open = self._waiting_for_open, []
        resolve(self._first_open)
        for task in waiting:
            task()

    def on_connection_remote_close(self, event: Event) -> None:
        conn = _given(event.connection, "connection")
        if conn == self._conn:
            self._reason = _describe(conn.remote_condition)
        conn.close()

    def on_transport_error(self, event: Event) -> None:
        condition = _given(event.transport, "transport").condition
        if event.connection == self._conn and condition is not None:
            self._reason = _describe(condition)

    def on_transport_closed(self, event: Event) -> None:
        self._lost(event.connection, self._reason or "the connection was closed")

    def _lost(self, conn: Connection | None, reason: str) -> None:
        """The connection is gone: fail what waits on it, and reconnect unless closing."""
        if conn is not None and conn != self._conn:
            return
        was_open = self.is_open
        self._conn = None
        self.is_open = False
        error = TransportError(f"AMQP connection to {self.settings.url} lost: {reason}")
        self._fail_waiting(error)
        self._receiver_of = {}
        self._senders = {}
        if not self._first_open.done():
            resolve(
                self._first_open,
                TransportError(
                    f"cannot connect to the AMQP broker at {self.settings.url}: {reason}"
                ),
            )
            return
        if self._closing:
            resolve(self._closed)
            return
        if was_open:
            log.warning("amqp_connection_lost", reason=reason, generation=self.generation)
        delay, self._delay = self._delay, min(self._delay * 2, self.settings.reconnect_max_s)
        self.loop.container.schedule(delay, _Timer(self._open_connection))

    def _fail_waiting(self, error: TransportError) -> None:
        """Fail every send and attach waiting on the connection, and forget its deliveries:
        the broker takes them back."""
        confirms, self._confirms = self._confirms, {}
        for future in confirms.values():
            resolve(future, error)
        attaches, self._attaches = self._attaches, {}
        for attach in attaches.values():
            if attach.future is not None:
                resolve(attach.future, error)
        self._held = {}

    def loop_failed(self, exc: BaseException) -> None:
        """The loop thread is ending on an error (EventLoop's on_failure): nothing will run
        again, so everything waiting fails now and the transport reads as closed."""
        self.is_open = False
        self._closing = True
        self._conn = None
        self._fail_waiting(TransportError(f"the AMQP event loop failed: {exc!r}"))
        waiting, self._waiting_for_open = self._waiting_for_open, []
        for task in waiting:
            task()  # they see is_open False and fail
        resolve(self._first_open, TransportError(f"the AMQP event loop failed: {exc!r}"))
        resolve(self._closed)

    def abandon(self, reason: str) -> None:
        """Give up the current connection now and reconnect: its deliveries are stale at once
        (the broker takes them back) and every subscription is attached anew.

        The socket is dropped without a close frame: a connection given up is presumed broken,
        and a close handshake could wait on it. The broker sees a failed client, which Artemis
        counts in the delivery count of what was unsettled (a clean close is not counted)."""
        conn = self._conn
        if conn is None:
            return
        transport = conn.transport
        if transport is not None:
            transport.close_head()
            transport.close_tail()
        conn.close()
        self._lost(conn, reason)

    def when_open(self, task: Callable[[], None]) -> None:
        """Run task now if the connection is open, else once it is (or fail it when closing)."""
        if self.is_open:
            task()
        else:
            self._waiting_for_open.append(task)

    def close(self) -> Future[None]:
        """Close the connection cleanly (unsettled deliveries go back uncounted); the future
        resolves once the socket is closed."""
        self._closing = True
        waiting, self._waiting_for_open = self._waiting_for_open, []
        for task in waiting:
            task()  # they see is_open False and _closing, and fail
        if self._conn is None:
            resolve(self._closed)
        else:
            self._conn.close()
        return self._closed

    def force_close(self) -> None:
        """End the socket without waiting for the broker's close frame (it stopped answering)."""
        conn = self._conn
        if conn is not None and conn.transport is not None:
            conn.transport.close_tail()
            conn.transport.close_head()

    @property
    def closing(self) -> bool:
        return self._closing

    # -- sending --------------------------------------------------------------------------------
    def _sender(self, queue: str) -> Sender:
        address = self.flavour.address(queue)
        sender = self._senders.get(address)
        if sender is None or sender.state & Endpoint.LOCAL_CLOSED:
            sender = self.loop.container.create_sender(
                self._live_connection(), target=address, name=f"boost-send-{next(self._ids)}"
            )
            sender.target.capabilities.put_object(QUEUE_CAPABILITY)
            self._senders[address] = sender
        return sender

    def send(self, items: Sequence[tuple[str, Message]], future: Future[None]) -> None:
        """Send items in order; future resolves when the broker has accepted every one."""
        self._send(items, future, None)

    def _send(
        self, items: Sequence[tuple[str, Message]], future: Future[None], transaction: Any
    ) -> None:
        """Send items, in transaction when one is given, and resolve future once the broker has
        settled every transfer with accepted (inside a transaction: transactional-state with
        accepted, which Artemis answers each transactional transfer with once it is routed)."""
        pending: list[Delivery] = []
        for queue, message in items:
            sender = self._sender(queue)
            if transaction is None:
                sent = sender.send(message)
            else:
                sent = transaction.send(sender, message)
            if not isinstance(sent, Delivery):
                raise TransportError("proton returned no delivery for a sent message")
            pending.append(sent)
        if not pending:
            resolve(future)
            return
        confirms: list[Future[None]] = [Future() for _ in pending]
        all_of(confirms, future)
        self._confirms.update(zip(pending, confirms, strict=True))

    def on_delivery(self, event: Event) -> None:
        delivery = _given(event.delivery, "delivery")
        link = _given(event.link, "link")
        if link.is_sender:
            self._outgoing_update(delivery)
        elif delivery.readable and not delivery.partial:
            self._incoming(link, delivery)

    def _outgoing_update(self, delivery: Delivery) -> None:
        if not delivery.updated and not delivery.settled:
            return
        future = self._confirms.pop(delivery, None)
        state = _outcome(delivery)
        if future is not None:
            if state == Delivery.ACCEPTED:
                resolve(future)
            elif state == Delivery.REJECTED:
                reason = _describe(delivery.remote.condition)
                resolve(future, TransportError(f"the broker rejected the message: {reason}"))
            else:
                resolve(
                    future, TransportError(f"the broker did not take the message (outcome {state})")
                )
        if delivery.settled:  # settled by the broker: forget it here too
            delivery.settle()

    # -- consuming ------------------------------------------------------------------------------
    def subscribe(self, specs: Sequence[SubscriptionSpec], futures: Sequence[Future[None]]) -> None:
        for spec, future in zip(specs, futures, strict=True):
            self._subscriptions[spec.id] = spec
            self._attach(spec, future)

    def _live_connection(self) -> Connection:
        if self._conn is None or not self.is_open:
            raise TransportError(f"the AMQP connection to {self.settings.url} is not open")
        return self._conn

    def _attach(self, spec: SubscriptionSpec, future: Future[None] | None) -> None:
        if spec.selector is not None and not self.capabilities.server_side_selectors:
            self._subscriptions.pop(spec.id, None)
            error = TransportError(
                f"refusing to subscribe to {spec.queue!r} with a selector: {self.remote_product} "
                "does not apply JMS selectors (RabbitMQ 3.10 echoes the filter and delivers every "
                "message). Use per-tenant queues (BOOST_ROUTING=per_tenant) on this broker."
            )
            if future is not None:
                resolve(future, error)
            else:
                log.error("amqp_subscription_refused", queue=spec.queue, error=str(error))
            return
        # A session of its own, ended with the subscription: see unsubscribe().
        session = self._live_connection().session()
        session.open()
        receiver = session.receiver(f"boost-{spec.id}")
        receiver.source.address = self.flavour.address(spec.queue)
        receiver.source.capabilities.put_object(QUEUE_CAPABILITY)
        if spec.selector is not None:
            filters = receiver.source.filter
            filters.put_map()
            filters.enter()
            filters.put_symbol(symbol("selector"))
            filters.put_object(Described(SELECTOR_FILTER, spec.selector.render()))
            filters.exit()
        receiver.open()
        self._attaches[receiver] = _Attach(spec, receiver, future)
        self._receiver_of[spec.id] = receiver

    def on_link_remote_open(self, event: Event) -> None:
        link = _given(event.link, "link")
        attach = self._attaches.get(link) if link.is_receiver else None
        if attach is None or attach.opened:
            return
        if link.remote_source is None or link.remote_source.address is None:
            return  # a refusal: the detach that follows carries the reason
        problem = self._selector_problem(attach)
        if problem is not None:
            self._attaches.pop(link, None)
            self._receiver_of.pop(attach.spec.id, None)
            self._subscriptions.pop(attach.spec.id, None)
            link.close()
            error = TransportError(problem)
            if attach.future is not None:
                resolve(attach.future, error)
            else:
                log.error("amqp_subscription_refused", queue=attach.spec.queue, error=problem)
            return
        attach.opened = True
        link.flow(attach.spec.prefetch)
        if attach.future is not None:
            resolve(attach.future)

    def _selector_problem(self, attach: _Attach) -> str | None:
        """Why the broker's attach reply does not prove the selector is applied, or None.

        Fail closed: a broker that accepts a filter it does not apply delivers every tenant's
        messages. The reply must carry the filter back, unchanged."""
        selector = attach.spec.selector
        if selector is None:
            return None
        echoed = _selector_of(attach.receiver.remote_source)
        if echoed == selector.render():
            return None
        what = "no selector filter" if echoed is None else f"the filter {echoed!r}"
        return (
            f"refusing to consume {attach.spec.queue!r}: the broker's attach reply carries {what} "
            f"instead of {selector.render()!r}, so it may deliver other tenants' messages"
        )

    def on_link_remote_close(self, event: Event) -> None:
        link: Link = _given(event.link, "link")
        reason = _describe(link.remote_condition)
        link.close()
        if link.is_sender:
            for address, sender in list(self._senders.items()):
                if sender == link:
                    del self._senders[address]
            error = TransportError(f"the broker closed the sending link: {reason}")
            for delivery in [d for d in self._confirms if d.link == link]:
                resolve(self._confirms.pop(delivery), error)
            return
        attach = self._attaches.pop(link, None)
        if attach is None:
            return
        self._receiver_of.pop(attach.spec.id, None)
        if attach.future is not None and not attach.future.done():
            self._subscriptions.pop(attach.spec.id, None)
            resolve(
                attach.future,
                TransportError(
                    f"the broker refused the subscription to {attach.spec.queue!r}: {reason}"
                ),
            )
        elif attach.spec.id in self._subscriptions and self._conn is not None:
            # A consumer the broker ended would never receive again, and nothing would say so:
            # drop the connection so that reconnecting attaches every subscription anew.
            log.warning("amqp_receiver_closed_by_broker", queue=attach.spec.queue, reason=reason)
            self.abandon(f"the broker closed the receiver of {attach.spec.queue!r}: {reason}")

    def on_session_remote_close(self, event: Event) -> None:
        _given(event.session, "session").close()

    def unsubscribe(self, subscription_id: str) -> None:
        self._subscriptions.pop(subscription_id, None)
        receiver = self._receiver_of.pop(subscription_id, None)
        if receiver is not None:
            self._attaches.pop(receiver, None)
            self._held = {key: d for key, d in self._held.items() if d.link != receiver}
            # The receiver's own session ends with it: RabbitMQ keeps a detached link's
            # unsettled messages until the session ends (its 0-9-1 core does not requeue on a
            # cancel, measured), Artemis takes them back at the detach. Neither counts them.
            receiver.close()
            receiver.session.close()

    def _incoming(self, link: Link, delivery: Delivery) -> None:
        attach = self._attaches.get(link)
        try:
            message = Message()
            message.decode(link.recv(delivery.pending))
        except Exception as exc:  # whatever the bytes do, the loop must go on
            link.advance()
            # Bytes no AMQP decoder reads can never be handled: rejected (Artemis: to the
            # dead-letter address), with the reason, instead of stalling the link.
            delivery.local.condition = Condition("amqp:decode-error", f"undecodable message: {exc}")
            delivery.update(Delivery.REJECTED)
            delivery.settle()
            link.flow(1)
            log.error(
                "amqp_undecodable_message",
                queue=attach.spec.queue if attach else None,
                error=str(exc),
            )
            return
        link.advance()
        if attach is None:
            return  # unsubscribed meanwhile: unsettled, the broker takes it back with the link
        count = int(message.delivery_count or 0)
        spec = attach.spec
        token = DeliveryToken(self.generation, next(self._numbers), spec.id)
        self._held[token.generation, token.number] = delivery
        attach.spec.on_delivery(
            base.Delivery(
                queue=spec.queue,
                body=body_of(message),
                properties=properties_of(message),
                correlation_id=correlation_of(message),
                redelivered=self.flavour.redelivered(count, bool(message.first_acquirer)),
                subscription_id=spec.id,
                delivery_count=count if self.capabilities.native_delivery_count else None,
                broker_message_id=None if message.id is None else str(message.id),
                token=token,
            )
        )

    # -- settling -------------------------------------------------------------------------------
    def _live(self, token: DeliveryToken) -> Delivery | None:
        """The proton delivery of token while it can still be settled, else None."""
        if not self.is_open or token.generation != self.generation:
            return None
        delivery = self._held.get((token.generation, token.number))
        if delivery is None or delivery.link.state & Endpoint.LOCAL_CLOSED:
            return None
        return delivery

    def is_live(self, token: DeliveryToken) -> bool:
        return self._live(token) is not None

    def _take(self, token: DeliveryToken) -> Delivery:
        """Remove token's delivery to settle it, giving its link one credit back."""
        delivery = self._held.pop((token.generation, token.number))
        delivery.link.flow(1)
        return delivery

    def accept(self, tokens: Sequence[DeliveryToken]) -> None:
        """Accept and settle deliveries still live; stale ones are redelivered by the broker."""
        for token in tokens:
            if self.is_live(token):
                delivery = self._take(token)
                delivery.update(Delivery.ACCEPTED)
                delivery.settle()

    def transaction(
        self,
        sends: Sequence[tuple[str, Message]],
        accepts: Sequence[DeliveryToken],
        future: Future[None],
    ) -> None:
        """Send and accept in one transaction; future resolves when it is committed."""
        if any(not self.is_live(token) for token in accepts):
            resolve(future, TransportError("a delivery belongs to a lost connection"))
            return
        conn = self._live_connection()
        work = _TransactionWork(sends, accepts, future, conn)
        self.loop.container.declare_transaction(
            conn, handler=_TransactionHandler(self, work), settle_before_discharge=True
        )

    def _run_transaction(self, transaction: Any, work: _TransactionWork) -> None:
        """Send the copies in the transaction and discharge only when the broker has taken every
        one: the coordinator link has credit at once while a new sender waits for its attach, so
        a discharge sent straight away overtakes the transfers, which the broker then refuses
        for an unknown transaction (found by the Artemis model in the contract suite)."""
        if work.connection != self._conn:
            work.finish(TransportError("the connection was lost before the transaction began"))
            return
        sent: Future[None] = Future()
        sent.add_done_callback(lambda done: self._discharge(transaction, work, done.exception()))
        self._send(work.sends, sent, transaction)

    def _discharge(
        self, transaction: Any, work: _TransactionWork, error: BaseException | None
    ) -> None:
        if work.done:
            return
        if error is None and any(not self.is_live(token) for token in work.accepts):
            error = TransportError("a delivery belongs to a lost connection")
        if error is not None:
            if work.connection == self._conn:
                transaction.abort()
            work.finish(error)
            return
        for token in work.accepts:
            transaction.accept(self._take(token))  # settled at once, applied by the commit
        transaction.commit()


def _selector_of(source: Terminus | None) -> str | None:
    """The JMS selector in a source's filter map, or None."""
    if source is None:
        return None
    data = source.filter
    data.rewind()
    if not data.next():
        return None
    filters = data.get_object()
    if not isinstance(filters, dict):
        return None
    for value in filters.values():
        if isinstance(value, Described) and value.descriptor == SELECTOR_FILTER:
            return str(value.value)
    return None


def _outcome(delivery: Delivery) -> int:
    """The outcome the broker gave a sent delivery; inside a transaction it is carried by the
    transactional state (accepted 0x24, rejected 0x25)."""
    state: int = delivery.remote_state
    if state != _TRANSACTIONAL_STATE:
        return state
    data = delivery.remote.data or []
    outcome = data[1] if len(data) > 1 else None
    descriptor = outcome.descriptor if isinstance(outcome, Described) else None
    return _TRANSACTIONAL_OUTCOMES.get(descriptor, state)


def resolve(future: Future[None], error: BaseException | None = None) -> None:
    """Resolve future unless its waiter gave up (cancelled it) or it is resolved already."""
    try:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


def all_of(futures: Sequence[Future[None]], done: Future[None]) -> None:
    """Resolve done when every future has, or with the first failure."""
    remaining = [len(futures)]

    def one_done(one: Future[None]) -> None:
        error = one.exception()
        if error is not None:
            resolve(done, error)
            return
        remaining[0] -= 1
        if remaining[0] == 0:
            resolve(done)

    for future in futures:
        future.add_done_callback(one_done)
