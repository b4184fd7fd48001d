"""Sends lost with their connection, the gate that lets one be sent again alone, and the queues
that refused a message.

Where a broker ends a connection when it refuses one message on it (RabbitMQ 3.x over AMQP,
Artemis over STOMP), every send under way there fails with the connection, and only one of them
may be the refused one. Each is sent again with no other send under way on its connection: one
refused again is refused, the rest are stored (a send whose confirmation the loss took may be
stored twice, with the same boostMessageId). A send that was the only one on its connection
from its start to its end needs no second try to be told apart.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.options import ConnectOptions


class ConnectionLostError(TransportError):
    """What waited on a connection failed because the connection was lost: whether the broker
    took a send of it is unknown (the broker did not refuse it, as far as the transport saw)."""


def connection_wait_s(options: ConnectOptions) -> float:
    """How long a send waits for its connection: at least connect_timeout_s, even where the
    caller fails at once while the broker is away (reconnect_wait_s 0). Another tenant's
    refused message ends the sending connection while the subscriptions' stays, and failing at
    once would fail sends that would go through a moment later."""
    return max(options.reconnect_wait_s, options.connect_timeout_s)


@dataclasses.dataclass(slots=True)
class Stay:
    """One shared hold of a SendGate: whether no other holder was there when it began, and how
    many holds had begun then; once it ends, whether it was alone throughout."""

    first: bool
    mark: int
    alone: bool = False


class SendGate:
    """Any number of shared holders at once, or one exclusive holder alone; an exclusive one
    waiting goes before shared ones that come after it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._shared = 0
        self._begun = 0
        """Shared holds begun so far."""
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[Stay]:
        with self._changed:
            while self._exclusive or self._waiting:
                self._changed.wait()
            stay = Stay(first=self._shared == 0, mark=self._begun)
            self._shared += 1
            self._begun += 1
        try:
            yield stay
        finally:
            with self._changed:
                self._shared -= 1
                stay.alone = stay.first and self._begun == stay.mark + 1
                if not self._shared:
                    self._changed.notify_all()

    @contextmanager
    def exclusive(self, deadline: float) -> Iterator[None]:
        """Held alone; TimeoutError when that cannot be by deadline (time.monotonic())."""
        with self._changed:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    self._changed.wait(left)
            finally:
                self._waiting -= 1
                self._changed.notify_all()  # shared holders waited on this one
            self._exclusive = True
        try:
            yield
        finally:
            with self._changed:
                self._exclusive = False
                self._changed.notify_all()


class RefusingQueues:
    """The queues that refused a message, and have not taken one since: a transport sends to
    them on a second connection, so that their next refusals end no connection other sends are
    on. At most KEPT are remembered, the oldest forgotten first."""

    KEPT: Final = 10_000

    def __init__(self) -> None:
        self._queues: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def any_of(self, queues: Iterable[str]) -> bool:
        """Whether one of queues refused (read without the lock while none has: the common
        case costs no lock)."""
        if not self._queues:
            return False
        with self._lock:
            return any(queue in self._queues for queue in queues)

    def refused(self, queues: Iterable[str]) -> None:
        with self._lock:
            for queue in queues:
                self._queues[queue] = None
                self._queues.move_to_end(queue)
            while len(self._queues) > self.KEPT:
                self._queues.popitem(last=False)

    def took(self, queues: Iterable[str]) -> None:
        """queues took a message again."""
        with self._lock:
            for queue in queues:
                self._queues.pop(queue, None)
