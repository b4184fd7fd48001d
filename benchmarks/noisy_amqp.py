"""The AMQP 1.0 clients of bench_noisy_neighbour.py, for a BOOST_BROKER_URL of amqp:// (the local
RabbitMQ with rabbitmq_amqp1_0, or Artemis's AMQP acceptor).

The tenants' runners and the per_tenant rows' TenantProducer use the transport the toolkit's
registry opens for the URL. The routed rows' producer sends as a JMS service over AMQP 1.0 does
(Qpid JMS, a TextMessage, synchronous persistent sends): plain python-qpid-proton, a
proton.utils BlockingSender to the shared queue, each message durable with the tenantUUID
application property and the JSON text the STOMP producer sends, each send returning once the
broker settled it. Its links attach as the transport's do (bench_amqp.QueueCapability: a queue,
durable where the broker declares queues durable only so), so both attach to the same queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bench_amqp import QueueCapability
from proton import Connection, Event, Message, byte, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection, BlockingSender

from boost_tenancy.transports.amqp import AmqpFlavour, AmqpSettings
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import open_transport, parse_transport_url

TOPOLOGIES: Final = ("routed", "per_tenant")
"""What runs over AMQP 1.0: the rows on the broker of BOOST_BROKER_URL whose tenants keep apart
without selectors (RabbitMQ applies none)."""
STOMP_ONLY: Final = (
    "broker_routes, plugin and artemis_* start a broker of the benchmark's own and speak STOMP "
    "to it; shared keeps tenants apart by selector, which RabbitMQ's AMQP 1.0 plugin does not "
    "apply"
)
JMS_ANNOTATIONS: Final = {
    symbol("x-opt-jms-msg-type"): byte(5),  # a TextMessage
    symbol("x-opt-jms-dest"): byte(0),  # sent to a queue
}
"""The message annotations Qpid JMS puts on a TextMessage sent to a queue."""
DRAIN_CREDIT: Final = 1000
DRAIN_LIMIT_S: Final = 300.0
"""The longest a drain may run: a backlog of the benchmark's takes seconds."""


def broker_properties(conn: Connection | None) -> Mapping[object, object]:
    """The properties of the broker's open frame (product, version)."""
    properties = None if conn is None else conn.remote_properties
    return properties or {}


def blocking_connection(settings: AmqpSettings) -> tuple[BlockingConnection, AmqpFlavour]:
    """A proton.utils connection whose waits, sends included, last up to confirm_timeout_s; and
    the broker it reached (which decides a queue's address)."""
    conn = BlockingConnection(
        settings.url, timeout=settings.confirm_timeout_s, **settings.login_options()
    )
    return conn, AmqpFlavour.from_open(broker_properties(conn.conn))


class JmsStyleSender:
    """Sends the way a JMS service over AMQP 1.0 does: a durable TextMessage of JSON to the
    shared queue with the tenantUUID property, each send awaited; no toolkit code on the way."""

    def __init__(self, settings: AmqpSettings) -> None:
        self._settings = settings
        self._conn, self._flavour = blocking_connection(settings)
        self._links: dict[str, BlockingSender] = {}

    def _link(self, queue: str) -> BlockingSender:
        link = self._links.get(queue)
        if link is None:
            link = self._conn.create_sender(
                self._flavour.address(queue),
                options=QueueCapability(self._flavour.durable_terminus),
            )
            self._links[queue] = link
        return link

    def send(self, queue: str, tenant: str, body: dict[str, Any]) -> None:
        message = Message(
            body=json.dumps(body),
            durable=True,
            properties={"tenantUUID": tenant},
            annotations=JMS_ANNOTATIONS,
        )
        # Returns once the broker settled it; rejected or released raises SendException.
        self._link(queue).send(message, timeout=self._settings.confirm_timeout_s)

    def send_many(self, queue: str, tenant: str, bodies: Sequence[dict[str, Any]]) -> None:
        for body in bodies:
            self.send(queue, tenant, body)  # each one settled before the next is sent

    def close(self) -> None:
        self._conn.close()


class Drainer(MessagingHandler):
    """Accepts whatever arrives from the queues until none has for idle_s; counts it. Fails
    when the broker refuses the connection, a session or a link, or when draining has not ended
    within DRAIN_LIMIT_S."""

    def __init__(self, settings: AmqpSettings, queues: Sequence[str], idle_s: float) -> None:
        super().__init__(prefetch=DRAIN_CREDIT, auto_accept=True)
        self.settings = settings
        self.queues = list(queues)
        self.idle_s = idle_s
        self.count = 0
        self.problems: list[str] = []
        self._began = self._last = 0.0
        self._opened = False
        self._conn: Connection | None = None
        self._container: Container | None = None

    def on_start(self, event: Event) -> None:
        self._began = time.monotonic()
        self._container = event.container
        self._conn = event.container.connect(
            url=self.settings.url, reconnect=False, **self.settings.login_options()
        )
        event.container.schedule(0.1, self)

    def on_connection_opened(self, event: Event) -> None:
        conn = self._conn
        if conn is None:
            return
        flavour = AmqpFlavour.from_open(broker_properties(conn))
        for name in self.queues:
            event.container.create_receiver(
                conn,
                source=flavour.address(name),
                options=QueueCapability(flavour.durable_terminus),
            )
        self._opened = True
        self._last = time.monotonic()

    def on_message(self, event: Event) -> None:
        self.count += 1
        self._last = time.monotonic()

    def on_timer_task(self, event: Event) -> None:
        if self._conn is None:
            return
        now = time.monotonic()
        if self._opened and now - self._last >= self.idle_s:
            self._close()
        elif not self._opened and now - self._began >= self.settings.confirm_timeout_s:
            self._fail(f"no connection within {self.settings.confirm_timeout_s:g} s")
        elif now - self._began >= DRAIN_LIMIT_S:
            self._fail(f"still receiving after {DRAIN_LIMIT_S:g} s")
        else:
            event.container.schedule(0.1, self)

    def on_transport_error(self, event: Event) -> None:
        condition = None if event.transport is None else event.transport.condition
        self._fail(f"transport error: {condition.description if condition else 'unknown'}")

    def on_connection_error(self, event: Event) -> None:
        conn = event.connection
        self._fail(f"connection error: {None if conn is None else conn.remote_condition}")

    def on_session_error(self, event: Event) -> None:
        session = event.session
        self._fail(f"session error: {None if session is None else session.remote_condition}")

    def on_link_error(self, event: Event) -> None:
        link = event.link
        self._fail(f"link error: {None if link is None else link.remote_condition}")

    def _fail(self, text: str) -> None:
        """Ends the run at once: a broker that never answers the close must not hold it."""
        self.problems.append(text)
        self._close()
        if self._container is not None:
            self._container.stop()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def run(self) -> int:
        Container(self).run()
        if self.problems:
            raise RuntimeError(
                f"draining {', '.join(self.queues)}: {self.count} taken, then "
                + "; ".join(self.problems[:3])
            )
        return self.count


@dataclass(frozen=True, slots=True)
class AmqpClients:
    """The clients of a scenario on an AMQP 1.0 broker (bench_noisy_neighbour.BrokerClients)."""

    url: str = field(repr=False)
    """BOOST_BROKER_URL, amqp:// (the raw clients connect without TLS); may hold a password:
    shown only redacted."""
    options: ConnectOptions
    """What the URL does not name (AppSettings.broker)."""

    @property
    def protocol(self) -> str:
        return "AMQP 1.0"

    @property
    def topologies(self) -> tuple[str, ...]:
        return TOPOLOGIES

    @property
    def settings(self) -> AmqpSettings:
        """What the transport makes of the URL; the raw clients connect with the same."""
        return AmqpSettings.from_url(parse_transport_url(self.url), self.options)

    def transport(self) -> Transport:
        """The transport the toolkit's registry opens for the URL (an AmqpTransport)."""
        return open_transport(self.url, self.options)

    def java_style_sender(self, *, nodelay: bool = False) -> JmsStyleSender:
        """nodelay concerns the STOMP producer's socket; proton's connection is left as is."""
        return JmsStyleSender(self.settings)

    def drain(self, queues: Sequence[str], idle_s: float = 1.0) -> int:
        """Accept whatever is left on queues until none arrives for idle_s; returns how many."""
        return Drainer(self.settings, queues, idle_s).run()

    def describe(self) -> str:
        """The broker and the producers, for the header."""
        conn, flavour = blocking_connection(self.settings)
        try:
            properties = broker_properties(conn.conn)
        finally:
            conn.close()
        product = " ".join(
            str(properties[key]) for key in ("product", "version") if key in properties
        )
        return (
            f"over AMQP 1.0: {product or flavour.value} at "
            f"{parse_transport_url(self.url).redacted}; "
            "the routed rows' producer is plain python-qpid-proton (BlockingSender, durable, "
            "each send settled before the next), the per_tenant rows' TenantProducer on the "
            "toolkit's AMQP transport"
        )


__all__ = ["STOMP_ONLY", "TOPOLOGIES", "AmqpClients", "Drainer", "JmsStyleSender"]
