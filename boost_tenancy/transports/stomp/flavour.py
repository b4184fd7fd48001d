"""Which ActiveMQ is on the other end, decided once per connection from CONNECTED's server
header, and what the transport can promise on it.
"""

from __future__ import annotations

import enum

from boost_tenancy.transports.base import TransportCapabilities


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
        return TransportCapabilities(
            server_side_selectors=True,
            native_delivery_count=False,  # neither broker exposes a delivery count over STOMP
            delayed_delivery=True,  # AMQ_SCHEDULED_DELAY, on Classic with schedulerSupport
            # Artemis ignores ACK inside a STOMP transaction (BROKERS.md); Classic honours it.
            atomic_forward=self is BrokerFlavour.CLASSIC,
        )
