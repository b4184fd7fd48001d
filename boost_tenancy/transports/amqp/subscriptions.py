"""An AMQP subscription as the transport asked for it, the handle its caller holds, and each
receiver attached for it on a connection, from its attach until it is closed or its connection
lost."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from proton import Receiver

from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports import base


@dataclass(frozen=True, slots=True)
class AmqpSubscription:
    """The handle subscribe() returns; re-attached with the same id after a reconnection."""

    id: str
    queue: str
    selector: SelectorLike | None


@dataclass(slots=True, eq=False)
class SubscriptionSpec:
    """A subscription as asked for; re-attached with the same id after a reconnection."""

    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: base.OnDelivery


@dataclass(slots=True, eq=False)
class Attach:
    """One receiver of a subscription, from its attach until it is closed or its connection
    lost."""

    spec: SubscriptionSpec
    receiver: Receiver
    future: Future[None] | None
    """Resolved when the broker confirms the attach; None for a re-attach after reconnecting."""
    opened: bool = False
    closed: bool = False
    """Closed here, or its connection lost: its deliveries can no longer be settled."""
    owed: int = 0
    """Credit to give back: deliveries settled since the receiver last got credit."""
