"""An in-process AMQP 1.0 broker that behaves as ActiveMQ Artemis 2.44 or RabbitMQ 3.10
(rabbitmq_amqp1_0) do over AMQP 1.0, so the AMQP transport can be tested without a real broker."""

from boost_tenancy.testing.amqp_peer.peer import AmqpPeer, PeerError
from boost_tenancy.testing.amqp_peer.profiles import PeerFlavour
from boost_tenancy.testing.amqp_peer.wire import _settle as _settle

__all__ = ["AmqpPeer", "PeerError", "PeerFlavour"]
