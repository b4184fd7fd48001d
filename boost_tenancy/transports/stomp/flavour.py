"""Which ActiveMQ is on the other end, decided once per connection from CONNECTED's server
header, and what the transport can promise and must ask for on it.
"""

from __future__ import annotations

import enum
from typing import Final

from boost_tenancy.transports.artemis_management import STOMP_LOSS_PLUGIN
from boost_tenancy.transports.capabilities import NeededPlugin, TransportCapabilities

ARTEMIS_SUBSCRIPTIONS_PER_CONNECTION: Final = 500
"""How many subscriptions the transport puts on one connection to Artemis: each SUBSCRIBE there
wakes every consumer of its connection (stomp/subscriptions.py)."""

REFUSAL_CLOSES_CONNECTION: Final = (
    "the broker closes the connection when it refuses a message: most likely this one, refused "
    "(a full address under address-full-policy FAIL, or no right to send there)"
)
"""Said of a send lost alone on a connection the broker closed after a refusal."""

MAX_CONSUMER_WINDOW: Final = 2**31 - 1
"""The largest consumer-window-size Artemis takes (a Java int)."""


def consumer_window_bytes(prefetch: int, bytes_per_message: int) -> int:
    """The Artemis consumer window, in bytes, that holds about prefetch messages of the expected
    size; never more than the broker takes."""
    return min(prefetch * bytes_per_message, MAX_CONSUMER_WINDOW)


class BrokerFlavour(enum.Enum):
    """The broker behind a STOMP connection, as far as the transport's behaviour differs."""

    CLASSIC = "ActiveMQ Classic"
    ARTEMIS = "ActiveMQ Artemis"
    OTHER = "other"
    """Not connected yet, or a server the toolkit does not know: the behaviour safe on any."""

    @classmethod
    def from_server(cls, server: str) -> BrokerFlavour:
        """The flavour a CONNECTED server header names ('ActiveMQ/5.17.2',
        'ActiveMQ-Artemis/2.44.0 ActiveMQ Artemis Messaging Engine')."""
        if server.startswith("ActiveMQ/"):
            return cls.CLASSIC
        if server.startswith("ActiveMQ-Artemis/"):
            return cls.ARTEMIS
        return cls.OTHER

    @property
    def capabilities(self) -> TransportCapabilities:
        return _CAPABILITIES[self]

    @property
    def length_on_every_message(self) -> bool:
        """Whether content-length is on every MESSAGE frame, text or not (Artemis), so that
        its presence does not mean bytes."""
        return self is BrokerFlavour.ARTEMIS

    @property
    def subscriptions_per_connection(self) -> int | None:
        """The most subscriptions one connection to this broker should carry; None: any number
        (Classic's cost of a SUBSCRIBE does not grow with those before it)."""
        return ARTEMIS_SUBSCRIPTIONS_PER_CONNECTION if self is BrokerFlavour.ARTEMIS else None

    @property
    def refusal_closes_connection(self) -> bool:
        """Whether the broker closes the connection after the ERROR of a frame it refused
        (Artemis 2.44, measured: a SEND to a full address under address-full-policy FAIL):
        then the transport's sends go on a connection that carries no subscription."""
        return self is BrokerFlavour.ARTEMIS

    def refused_with_its_connection(self, message: str) -> bool:
        """Whether an ERROR's message refuses its frame only because the connection is closing:
        Artemis 2.44 answers each frame that came after a refused one, before its close, with
        'AMQ339010 Connection is not valid.' (measured). Such a frame was not refused."""
        return self is BrokerFlavour.ARTEMIS and message.startswith("AMQ339010")

    def message_identity(self, message_id: str | None) -> str | None:
        """What names the message itself in a MESSAGE frame's message-id, the same on each of its
        deliveries: a message without a toolkit id gets its id derived from it.

        Artemis sends '<consumer id>,<message id>' (VersionedStompFrameHandler), whose first part
        changes with every subscription: read whole, one quarantined message had a new id at each
        `quarantine list`, and `quarantine redrive` could not find any. Classic's whole value
        names the message.
        """
        if self is BrokerFlavour.ARTEMIS and message_id is not None:
            _, comma, own = message_id.partition(",")
            if comma and own:
                return own
        return message_id

    def scheduled_send_headers(self, delay_ms: int, expires_at_ms: int | None) -> dict[str, str]:
        """What a delayed SEND of an expiring message needs to keep its absolute expiry.

        When Classic's scheduler fires it re-stamps the message: expiration becomes the firing
        time plus (expiration - JMSTimestamp) (SchedulerBroker.scheduledJob), so a retry copy
        delayed 300 ms came back 688 ms later to expire (seen on 5.17 here). It leaves a message
        stamped with timestamp 0 (JMS: no timestamp) as it is. Artemis's scheduled delivery
        puts the message back without touching its expiration (ScheduledDeliveryHandlerImpl).
        """
        if self is BrokerFlavour.CLASSIC and delay_ms > 0 and expires_at_ms is not None:
            return {"timestamp": "0"}
        return {}

    def prefetch_headers(self, prefetch: int, bytes_per_message: int) -> dict[str, str]:
        """The SUBSCRIBE headers that let about prefetch messages be unacknowledged at once.

        Artemis reads activemq.prefetchSize as consumer-window-size in bytes (prefetch 10 let
        one message through), so it is asked for a byte window instead; Classic counts messages.
        """
        if self is BrokerFlavour.ARTEMIS:
            window = consumer_window_bytes(prefetch, bytes_per_message)
            return {"consumer-window-size": str(window)}
        return {"activemq.prefetchSize": str(prefetch)}


_ARTEMIS_PLUGINS: Final = (
    NeededPlugin(
        STOMP_LOSS_PLUGIN,
        without_it="a connection lost without DISCONNECT (a killed worker) may leave messages it "
        "held given to no consumer until the broker restarts",
        see="docs/interop.md#a-lost-connections-messages-on-artemis",
    ),
)
"""What the STOMP transport needs on Artemis 2.44 beyond the broker itself."""

_CAPABILITIES: Final = {
    flavour: TransportCapabilities(
        server_side_selectors=True,
        native_delivery_count=False,  # neither broker exposes a delivery count over STOMP
        delayed_delivery=True,  # AMQ_SCHEDULED_DELAY, on Classic with schedulerSupport
        # Artemis ignores ACK inside a STOMP transaction (an ACK in an aborted transaction still
        # removes the message); Classic honours it.
        atomic_forward=flavour is BrokerFlavour.CLASSIC,
        atomic_batches=True,  # BEGIN/COMMIT cover SEND on both
        # Artemis counts its consumer window in bytes; an unknown broker promises nothing.
        prefetch_counts_messages=flavour is BrokerFlavour.CLASSIC,
        # Classic's statistics plugin, asked over STOMP (stomp/statistics.py); whether the broker
        # enables it shows only when asked. Artemis answers listQueues through its management
        # address (transports/artemis_queues.py).
        queue_statistics=flavour is not BrokerFlavour.OTHER,
        # The same plugin asked with a wildcard answers once per matching queue; Artemis's
        # listQueues filters by name.
        queue_listing=flavour is not BrokerFlavour.OTHER,
        # Artemis's exclusive diverts, made through its management address
        # (stomp/management.py); Classic routes at send time only from its configuration.
        send_time_routes=flavour is BrokerFlavour.ARTEMIS,
        broker_plugins_needed=_ARTEMIS_PLUGINS if flavour is BrokerFlavour.ARTEMIS else (),
    )
    for flavour in BrokerFlavour
}
