"""The AMQP connection's event handler: it owns every proton object and runs on the loop thread;
it opens the connection, reconnects with backoff, closes it and takes the transport's requests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Final

import structlog
from proton import Connection, Endpoint, Event, Handler, ProtonException

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.amqp.encoding import EncodedMessage
from boost_tenancy.transports.amqp.events import describe, given
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.amqp.link_events import LinkEvents
from boost_tenancy.transports.amqp.loop import EventLoop
from boost_tenancy.transports.amqp.receiving import DeliveryToken, Receiving
from boost_tenancy.transports.amqp.sending import Sending
from boost_tenancy.transports.amqp.settings import AmqpSettings
from boost_tenancy.transports.amqp.subscriptions import SubscriptionSpec
from boost_tenancy.transports.amqp.transactions import Transactions
from boost_tenancy.transports.amqp.waiters import resolve
from boost_tenancy.transports.capabilities import TransportCapabilities
from boost_tenancy.transports.lost_sends import ConnectionLostError
from boost_tenancy.transports.reachability import tcp_failure, unresolvable

log = structlog.get_logger("boost_tenancy.transports.amqp")


class AmqpConnection(LinkEvents, Handler):
    """Every proton object of one transport, on the loop thread only.

    It opens the connection (SASL, TLS), reconnects with backoff through the failover list of
    addresses and routes proton's events to its parts: sending.py (senders, confirmations),
    receiving.py (receivers, deliveries, credit) and transactions.py. AmqpTransport
    (transport.py) is the thread-safe face of it.

    Attributes read from other threads (generation, is_open, flavour, capabilities) are plain
    values swapped whole, never partly written.
    """

    def __init__(self, settings: AmqpSettings, name: str = "amqp-transport") -> None:
        super().__init__()
        self.settings = settings
        self.receiving = Receiving(self)
        self.sending = Sending(self)
        self.loop = EventLoop(
            self,
            name,
            on_failure=self.loop_failed,
            delivery_shortcut=self.delivered,
            connect_failed=self.connect_failed,
        )
        self.generation = 0
        self.is_open = False
        self.flavour = AmqpFlavour.OTHER
        self.capabilities: TransportCapabilities = AmqpFlavour.OTHER.capabilities()
        self.remote_product = ""
        self.transactions = Transactions(self)
        self._conn: Connection | None = None
        self._closing = False
        self._reason = ""
        self._first_open: Future[None] = Future()
        self._vhost_probe: Any = None
        """The session that proves a virtual host before the first connection counts as open."""
        self._closed: Future[None] = Future()
        self._delay = settings.reconnect_initial_s
        self._waiting_for_open: dict[Callable[[], None], None] = {}
        """Tasks to run once the connection is open, in order (a dict: one a caller gave up on
        is forgotten at once, forget_waiting)."""
        self._address = 0
        """Index in settings.addresses of the broker connected to, or to try next."""
        self._first_errors: list[str] = []

    @property
    def url(self) -> str:
        """The address of the broker connected to, or to be tried next."""
        return self.settings.url_of(self._address)

    @property
    def connection(self) -> Connection | None:
        """The current connection, opening or open; None between connections."""
        return self._conn

    def live_connection(self) -> Connection:
        if self._conn is None or not self.is_open:
            raise TransportError(f"the AMQP connection to {self.url} is not open")
        return self._conn

    # -- the loop's passes ----------------------------------------------------------------------
    def on_reactor_quiesced(self, event: Event) -> None:
        # The last call of a pass before the loop waits: what other threads posted meanwhile
        # runs now, without a wake-up of its own, then credit and deliveries go out together.
        self.loop.run_tasks_before_waiting()
        self.receiving.pass_ended()

    def on_unhandled(self, method: str, *args: Any) -> None:
        pass

    # -- opening and losing the connection ------------------------------------------------------
    def start(self) -> Future[None]:
        """Start the loop and the first connection attempt; the future resolves when the broker
        has opened the connection, or fails with the reason it could not."""
        self.loop.start()
        self.loop.post(self._open_connection)
        return self._first_open

    def _open_connection(self) -> None:
        if self._closing:
            return
        s = self.settings
        self._reason = ""
        url = self.url
        # proton's event loop itself fails on a host that does not resolve: asked first.
        if (unknown := unresolvable(s.addresses[self._address][0])) is not None:
            self._lost(None, unknown)
            return
        try:
            conn = self.loop.container.connect(
                url=url,
                reconnect=False,
                ssl_domain=s.ssl_domain(),
                sni=s.addresses[self._address][0] if s.tls is not None else None,
                **s.login_options(),
            )
        except (ProtonException, OSError) as exc:
            self._lost(None, f"cannot connect to {url}: {exc}")
            return
        self._conn = conn
        self.loop.schedule(s.connect_timeout_s, lambda: self._connect_timed_out(conn))

    def connect_failed(self, exc: OSError) -> bool:
        """proton raised exc while it connected the socket of the attempt under way (the
        EventLoop's connect_failed): the attempt ends here, as one refused does, and True says
        so. With no attempt under way, the error is none of a connection's: False."""
        conn = self._conn
        if conn is None or self.is_open or conn.transport is None:
            return False
        self._reason = f"cannot connect to {self.url}: {exc}"
        transport = conn.transport
        # What proton sets just after its connect, and its IOHandler reads when the transport
        # closes: no socket was ever selected for it.
        transport._selectable = None
        transport.close_tail()
        transport.close_head()
        return True

    def _connect_timed_out(self, conn: Connection) -> None:
        if conn == self._conn and not self.is_open:
            self._reason = (
                f"no open frame within {self.settings.connect_timeout_s} s (is it an AMQP 1.0 "
                "port? a STOMP or OpenWire port never answers the AMQP header)"
            )
            conn.close()
            if conn.transport is not None:
                conn.transport.close_tail()
                conn.transport.close_head()
            self._lost(conn, self._reason)

    def on_connection_remote_open(self, event: Event) -> None:
        conn = given(event.connection, "connection")
        if conn != self._conn:
            return
        if conn.state & Endpoint.REMOTE_CLOSED:
            # Opened and closed in the same breath (RabbitMQ refusing a login or a virtual host
            # sends open, then close with the reason): no connection; the close says why.
            return
        properties = conn.remote_properties or {}
        offered = [str(c) for c in (conn.remote_offered_capabilities or ())]
        self.flavour = AmqpFlavour.from_open(properties)
        self.capabilities = self.flavour.capabilities(offered)
        self.remote_product = f"{properties.get('product', '?')}/{properties.get('version', '?')}"
        vhost = self.settings.vhost
        if vhost is not None and not self.flavour.virtual_hosts:
            # Never ignored: a broker without virtual hosts would put everything in its one.
            self._reason = (
                f"the URL names the virtual host {vhost!r}, and {self.remote_product} has no "
                f"virtual hosts: remove /{vhost} from the URL"
            )
            self.abandon(self._reason)
            return
        if vhost is not None and not self._first_open.done():
            # RabbitMQ opens a connection to any virtual host and refuses one it does not have
            # (or the user may not use) only when a session begins (measured on 3.10): the
            # first connection is open once a session of its own was.
            probe = conn.session()
            probe.handler = self
            probe.open()
            self._vhost_probe = probe
            return
        self._opened()

    def on_session_remote_open(self, event: Event) -> None:
        session = event.session
        if session is None or self._vhost_probe is None or session != self._vhost_probe:
            return
        self._vhost_probe = None
        session.close()
        if self._conn is not None and session.connection == self._conn:
            self._opened()

    def _opened(self) -> None:
        """The connection is usable: the parts attach anew and what waited for it runs."""
        self.sending.forget_senders()
        self._delay = self.settings.reconnect_initial_s
        self.generation += 1
        self.is_open = True
        log.debug(
            "amqp_connected", broker=self.remote_product, generation=self.generation, url=self.url
        )
        self.receiving.attach_all()
        waiting, self._waiting_for_open = self._waiting_for_open, {}
        resolve(self._first_open)
        for task in waiting:
            task()

    def on_connection_remote_close(self, event: Event) -> None:
        conn = given(event.connection, "connection")
        if conn == self._conn:
            self._reason = describe(conn.remote_condition)
            if self.settings.vhost is not None and not self.is_open:
                self._reason += (
                    f" (the URL names the virtual host {self.settings.vhost!r}: does it exist, "
                    "and may the user use it?)"
                )
        conn.close()

    def on_transport_error(self, event: Event) -> None:
        condition = given(event.transport, "transport").condition
        if event.connection == self._conn and condition is not None:
            self._reason = describe(condition)

    def on_transport_closed(self, event: Event) -> None:
        self._lost(event.connection, self._reason or "the connection was closed")

    def _lost(self, conn: Connection | None, reason: str) -> None:
        """The connection is gone: fail what waits on it, and reconnect unless closing."""
        if conn is not None and conn != self._conn:
            return
        was_open = self.is_open
        self._conn = None
        self.is_open = False
        url = self.url
        self._fail_waiting(ConnectionLostError(f"AMQP connection to {url} lost: {reason}"))
        count = len(self.settings.addresses)
        if not self._first_open.done() and not was_open and "pythonio" in reason:
            # proton's own words ("proton.pythonio: Connection refused to all addresses") name
            # neither the address nor the cause: ask TCP once, briefly, before the first open.
            host, port = self.settings.addresses[self._address]
            reason = tcp_failure(host, port, _PROBE_TIMEOUT_S) or reason
        if not was_open and count > 1:
            # A failed attempt: the next one goes to the next broker of the list.
            self._address = (self._address + 1) % count
        if not self._first_open.done():
            self._first_errors.append(f"{url}: {reason}")
            if len(self._first_errors) < count and not self._closing:
                self.loop.post(self._open_connection)
                return
            resolve(
                self._first_open,
                TransportError(
                    f"cannot connect to the AMQP broker at {'; '.join(self._first_errors)}"
                ),
            )
            return
        if self._closing:
            resolve(self._closed)
            return
        if was_open:
            log.warning("amqp_connection_lost", reason=reason, generation=self.generation, url=url)
        delay, self._delay = self._delay, min(self._delay * 2, self.settings.reconnect_max_s)
        self.loop.schedule(delay, self._open_connection)

    def _fail_waiting(self, error: TransportError) -> None:
        """Fail every send, transaction and attach waiting on the connection, and forget its
        deliveries: the broker takes them back."""
        self.sending.fail_all(error)
        self.sending.forget_senders()
        self.transactions.connection_lost(error)
        self.receiving.connection_lost(error)

    @property
    def last_reason(self) -> str:
        """Why the latest connection ended (the broker's condition, a timeout), or empty."""
        return self._reason

    def loop_failed(self, exc: BaseException) -> None:
        """The loop thread is ending on an error (EventLoop's on_failure): nothing will run
        again, so everything waiting fails now and the transport reads as closed."""
        self.is_open = False
        self._closing = True
        self._conn = None
        self._fail_waiting(TransportError(f"the AMQP event loop failed: {exc!r}"))
        waiting, self._waiting_for_open = self._waiting_for_open, {}
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
        """Run task now if the connection is open, else once it is. It runs now too, to fail,
        when the connection is closing or its loop has ended (nothing would run it later), and
        when reconnect_wait_s is 0 (fail at once)."""
        if self.is_open or self._closing or self.settings.reconnect_wait_s <= 0:
            task()
        else:
            self._waiting_for_open[task] = None

    def forget_waiting(self, task: Callable[[], None]) -> None:
        """The caller of task gave up waiting: it holds what it would have sent, and must not stay
        for as long as the connection stays lost."""
        self._waiting_for_open.pop(task, None)

    def close(self) -> Future[None]:
        """Close the connection cleanly (unsettled deliveries go back uncounted); the future
        resolves once the socket is closed."""
        self._closing = True
        waiting, self._waiting_for_open = self._waiting_for_open, {}
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

    # -- what the transport asks for ------------------------------------------------------------
    def send(
        self,
        items: Sequence[tuple[str, EncodedMessage]],
        future: Future[None],
        *,
        as_queue: bool = True,
    ) -> None:
        """Send items in order; future resolves when the broker has accepted every one.
        as_queue=False: to a node that is no queue (Artemis's management address)."""
        self.sending.send(items, future, as_queue=as_queue)

    def subscribe(self, specs: Sequence[SubscriptionSpec], futures: Sequence[Future[None]]) -> None:
        self.receiving.subscribe(specs, futures)

    def unsubscribe(self, subscription_id: str) -> None:
        self.receiving.unsubscribe(subscription_id)

    def is_live(self, token: DeliveryToken) -> bool:
        return self.receiving.is_live(token)

    def accept(self, tokens: Sequence[DeliveryToken]) -> None:
        """Accept and settle deliveries still live; stale ones are redelivered by the broker."""
        self.receiving.accept(tokens)

    def transaction(
        self,
        sends: Sequence[tuple[str, EncodedMessage]],
        accepts: Sequence[DeliveryToken],
        future: Future[None],
    ) -> None:
        """Send and accept in one transaction; future resolves when it is committed."""
        self.transactions.start(sends, accepts, future)


_PROBE_TIMEOUT_S: Final = 2.0
"""How long the first open's failure waits for a TCP answer to name its cause."""

__all__ = ["AmqpConnection"]
