"""Transports: the small protocol the toolkit needs from a broker, its implementations, and the
registry that picks one by URL (stomp://...)."""

from importlib import import_module
from typing import TYPE_CHECKING

from boost_tenancy.transports.base import (
    Delivery,
    OnDelivery,
    SubscribeRequest,
    Subscription,
    Transport,
)
from boost_tenancy.transports.capabilities import TransportCapabilities
from boost_tenancy.transports.registry import (
    TransportFactory,
    TransportUrl,
    open_transport,
    register_transport,
)

if TYPE_CHECKING:
    from boost_tenancy.transports.stomp import StompSettings, StompTransport


if not TYPE_CHECKING:  # the type checker reads the imports above, and refuses any other name

    def __getattr__(name: str) -> object:
        """The STOMP transport's names, imported when first asked for: a process that speaks AMQP
        only never loads the STOMP client library."""
        if name in ("StompSettings", "StompTransport"):
            return getattr(import_module(f"{__name__}.stomp"), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Delivery",
    "OnDelivery",
    "StompSettings",
    "StompTransport",
    "SubscribeRequest",
    "Subscription",
    "Transport",
    "TransportCapabilities",
    "TransportFactory",
    "TransportUrl",
    "open_transport",
    "register_transport",
]
