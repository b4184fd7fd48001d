"""What the in-memory broker keeps: a message stored on a queue, and a consumer with the
messages it holds in flight under its flow control."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from boost_tenancy.selectors import SelectorLike
from boost_tenancy.testing.wire import FlowControl, Sent
from boost_tenancy.transports.base import OnDelivery

if TYPE_CHECKING:
    from boost_tenancy.testing.transport import InMemoryTransport


@dataclass(slots=True)
class Stored:
    """A message on a queue: in order of seq, visible from available_at."""

    seq: int
    queue: str
    sent: Sent
    available_at: float
    redelivered: bool = False
    deliveries: int = 0

    def __lt__(self, other: Stored) -> bool:
        return self.seq < other.seq


@dataclass(slots=True, eq=False)
class Consumer:
    """One subscription on the broker, as one connection (generation) opened it."""

    id: str
    queue: str
    selector: SelectorLike | None
    flow: FlowControl
    on_delivery: OnDelivery
    connection: InMemoryTransport
    generation: int
    number: int = 0
    """The broker's own number for it, new for each subscription (Artemis's consumer id)."""
    in_flight: dict[int, Stored] = field(default_factory=dict)
    in_flight_bytes: int = 0

    def accepts(self, stored: Stored) -> bool:
        if not self.flow.has_room(len(self.in_flight), self.in_flight_bytes):
            return False
        return self.selector is None or self.selector.matches(stored.sent.message.properties)

    def take(self, seq: int) -> Stored | None:
        stored = self.in_flight.pop(seq, None)
        if stored is not None:
            self.in_flight_bytes -= stored.sent.size
        return stored
