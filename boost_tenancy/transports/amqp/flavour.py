"""Which AMQP 1.0 broker is on the other end, decided once per connection from its open frame,
and what the transport can promise and must do differently on it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from typing import Final

from boost_tenancy.transports.capabilities import TransportCapabilities

RABBITMQ_QUEUE_PREFIX: Final = "/queue/"
"""RabbitMQ 3.x's AMQP 1.0 plugin names a queue /queue/NAME."""
DELAYED_DELIVERY: Final = "DELAYED_DELIVERY"
"""The connection capability a broker offers when it honours x-opt-delivery-delay (Artemis)."""
REFUSAL_ENDS_CONNECTION: Final = (
    "RabbitMQ 3.x ends the connection when it refuses a message: a queue at its max-length "
    "with overflow reject-publish, or a queue that is unavailable"
)
"""What a lost sending connection most likely was on such a broker (a send error names it)."""


class AmqpFlavour(enum.Enum):
    """The broker behind an AMQP connection, as far as the transport's behaviour differs."""

    ARTEMIS = "ActiveMQ Artemis"
    RABBITMQ = "RabbitMQ"
    OTHER = "other"
    """Not connected yet, or a broker the toolkit does not know: nothing is taken on trust."""

    @classmethod
    def from_open(cls, properties: Mapping[object, object] | None) -> AmqpFlavour:
        """The flavour an open frame's properties name (product 'apache-activemq-artemis',
        product 'RabbitMQ')."""
        product = str((properties or {}).get("product", ""))
        if product == "apache-activemq-artemis":
            return cls.ARTEMIS
        if product == "RabbitMQ":
            return cls.RABBITMQ
        return cls.OTHER

    def capabilities(self, offered: Collection[str] = ()) -> TransportCapabilities:
        """What the transport promises on this broker; offered: the open frame's capabilities.

        Artemis (documented, and measured on 2.44): selectors as a source filter, a delivery
        count in the header, transactions over sends and dispositions, delayed delivery.
        RabbitMQ 3.10 (measured here): it echoes a selector filter without applying it, keeps
        delivery-count at 0, refuses transactions and ignores x-opt-delivery-delay. Another
        broker gets delayed delivery only when it offers DELAYED_DELIVERY, and nothing else on
        trust: a selector it might not apply would leak tenants.
        """
        artemis = self is AmqpFlavour.ARTEMIS
        return TransportCapabilities(
            server_side_selectors=artemis,
            native_delivery_count=artemis,
            delayed_delivery=artemis or DELAYED_DELIVERY in offered,
            atomic_forward=artemis,
            atomic_batches=artemis,
            prefetch_counts_messages=True,  # link credit counts messages on every broker
            # RabbitMQ 3.10 reports queues over HTTP only; Artemis answers listQueues through
            # its management address (transports/artemis_queues.py).
            queue_statistics=artemis,
            queue_listing=artemis,
            # Artemis's exclusive diverts, made through its management address
            # (amqp/management.py).
            send_time_routes=artemis,
        )

    def address(self, queue: str) -> str:
        """The node address of a queue: the queue's name, /queue/NAME on RabbitMQ."""
        if self is AmqpFlavour.RABBITMQ:
            return RABBITMQ_QUEUE_PREFIX + queue
        return queue

    @property
    def virtual_hosts(self) -> bool:
        """Whether the broker has virtual hosts that the URL's path can select (RabbitMQ);
        elsewhere a virtual host in the URL is refused, not ignored."""
        return self is AmqpFlavour.RABBITMQ

    @property
    def durable_terminus(self) -> bool:
        """Whether a link to a queue must say its terminus is durable for the queue to be.
        RabbitMQ's AMQP 1.0 plugin declares the queue a link names durable only when the link's
        terminus durability is not none (rabbit_amqp1_0_link_util:durable/1), and proton's
        default is none: every queue the toolkit made there was transient, and a restart of the
        broker dropped what it held. Artemis's queues are durable by its address settings."""
        return self is AmqpFlavour.RABBITMQ

    @property
    def withholds_credit_when_full(self) -> bool:
        """Whether the broker gives a sender no credit while its address refuses messages
        (Artemis: full under address-full-policy FAIL or BLOCK; ARTEMIS-5645, measured on
        2.44.0), so that a message waiting that long for credit is refused."""
        return self is AmqpFlavour.ARTEMIS

    @property
    def refused_send_ends_connection(self) -> bool:
        """Whether the broker's refusal of one message ends the whole connection instead of
        settling that message rejected. RabbitMQ 3.x's AMQP 1.0 plugin has no clause for the
        negative confirm its queues give a message they refuse (rabbitmq-server#2839): its
        session process crashes and the connection ends, measured on 3.10.8 with a queue at
        max-length and overflow reject-publish. Every delivery on that connection goes back to
        the broker, so the transport sends on a connection of its own there."""
        return self is AmqpFlavour.RABBITMQ

    def queue_of(self, address: str | None) -> str:
        """The queue an address names (the inverse of address())."""
        text = address or ""
        if self is AmqpFlavour.RABBITMQ:
            return text.removeprefix(RABBITMQ_QUEUE_PREFIX)
        return text

    def redelivered(self, delivery_count: int, first_acquirer: bool) -> bool:
        """Whether a message was delivered before: RabbitMQ keeps delivery-count at 0 and says
        so by first-acquirer false; Artemis counts, and leaves first-acquirer unset."""
        if self is AmqpFlavour.RABBITMQ:
            return not first_acquirer
        return delivery_count > 0
