"""The AMQP 1.0 transport (python-qpid-proton) for ActiveMQ Artemis and other AMQP 1.0 brokers.

Text goes out as an amqp-value string (a JMS TextMessage), bytes as a data section; senders
name their target a queue (Artemis would otherwise drop messages to a new address as
multicast); receivers carry the tenant selector as a source filter and refuse to consume when
the broker's reply does not prove it applies it; the attempt includes the broker's delivery
count; forwarding is one transaction where the broker has them (Artemis).
"""

from boost_tenancy.transports.amqp.batch import AmqpBatch
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.amqp.settings import AmqpSettings
from boost_tenancy.transports.amqp.subscriptions import AmqpSubscription
from boost_tenancy.transports.amqp.transport import AmqpTransport, transport_from_url

__all__ = [
    "AmqpBatch",
    "AmqpFlavour",
    "AmqpSettings",
    "AmqpSubscription",
    "AmqpTransport",
    "transport_from_url",
]
