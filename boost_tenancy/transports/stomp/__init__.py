"""The STOMP 1.2 transport (stomp.py) for ActiveMQ Classic and Artemis.

It sends text bodies without content-length (so Java consumers get a TextMessage) and with a
text content-type (so they stay text on Artemis), confirms every send by receipt, consumes with
client-individual acks in the broker's prefetch unit, and reconnects and resubscribes by itself.
"""

from boost_tenancy.transports.stomp.backoff import reconnect_delay
from boost_tenancy.transports.stomp.batch import StompBatch
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import encode_frame
from boost_tenancy.transports.stomp.settings import StompSettings
from boost_tenancy.transports.stomp.subscriptions import StompSubscription
from boost_tenancy.transports.stomp.transport import StompTransport, transport_from_url

__all__ = [
    "BrokerFlavour",
    "StompBatch",
    "StompSettings",
    "StompSubscription",
    "StompTransport",
    "encode_frame",
    "reconnect_delay",
    "transport_from_url",
]
