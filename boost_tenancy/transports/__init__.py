"""Transports: the small protocol the toolkit needs from a broker, its implementations, and the
registry that picks one by URL (stomp://...)."""

from boost_tenancy.transports.base import (
    Delivery,
    OnDelivery,
    SubscribeRequest,
    Subscription,
    Transport,
    TransportCapabilities,
)
from boost_tenancy.transports.registry import (
    TransportFactory,
    TransportUrl,
    open_transport,
    register_transport,
)

__all__ = [
    "Delivery",
    "OnDelivery",
    "SubscribeRequest",
    "Subscription",
    "Transport",
    "TransportCapabilities",
    "TransportFactory",
    "TransportUrl",
    "open_transport",
    "register_transport",
]
