"""An AMQP batch: sends collected until commit, then sent as one (AmqpTransport.open_batch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from boost_tenancy.messages import WireMessage, check_queue_name


class BatchSender(Protocol):
    """What a batch commits through: AmqpTransport.send_batch."""

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        """Send items, in one transaction when atomic."""


@dataclass(slots=True)
class AmqpBatch:
    """Sends collected until commit: nothing reaches the broker before it, so abort stores
    nothing. Committed in one transaction when atomic, else as confirmed sends."""

    transport: BatchSender
    atomic: bool
    items: list[tuple[str, WireMessage]] = field(default_factory=list)

    def add(self, queue: str, message: WireMessage) -> None:
        self.items.append((check_queue_name(queue), message))

    def commit(self) -> None:
        items, self.items = self.items, []
        self.transport.send_batch(items, atomic=self.atomic)

    def abort(self) -> None:
        self.items.clear()


__all__ = ["AmqpBatch", "BatchSender"]
