"""Transports: the small protocol the toolkit needs from a broker, and its implementations."""

from boost_tenancy.transports.base import (
    Delivery,
    OnDelivery,
    SubscribeRequest,
    Subscription,
    Transport,
    TransportCapabilities,
)

__all__ = [
    "Delivery",
    "OnDelivery",
    "SubscribeRequest",
    "Subscription",
    "Transport",
    "TransportCapabilities",
]
