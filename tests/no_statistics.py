"""A transport whose broker reports no queue counts (RabbitMQ's AMQP 1.0, an unknown STOMP
server), made from an in-memory one: for the tests of what refuses to run without them."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from boost_tenancy.testing import InMemoryTransport

T = TypeVar("T", bound=InMemoryTransport)


def without_statistics(transport: T) -> T:
    """transport, declaring neither queue_statistics nor queue_listing from now on."""
    declared = dataclasses.replace(
        transport.capabilities, queue_statistics=False, queue_listing=False
    )
    transport.__class__ = type(
        f"{type(transport).__name__}WithoutStatistics",
        (type(transport),),
        {"capabilities": property(lambda _self: declared)},
    )
    return transport
