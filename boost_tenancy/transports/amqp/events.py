"""What every part of the AMQP connection handler reads the same way from proton: an event's
parts, a condition as text, a timer callback, and the capability that makes a node a queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from proton import Condition, Event, Handler, symbol

from boost_tenancy.errors import TransportError

T = TypeVar("T")

QUEUE_CAPABILITY: Final = symbol("queue")
"""Terminus capability: the address is a queue (Artemis: anycast). Without it Artemis creates a
missing address as multicast and drops what is sent there (measured on 2.44)."""


def given(value: T | None, what: str) -> T:
    """An event's part that proton types as optional but always sets for that event."""
    if value is None:
        raise TransportError(f"proton event without its {what}")
    return value


def describe(condition: Condition | None) -> str:
    """A link's, session's or connection's error condition as text for an error message."""
    if condition is None:
        return "no reason given"
    return f"{condition.name}: {condition.description}" if condition.description else condition.name


class Timer(Handler):
    """Calls callback when the timer it is scheduled with fires (Container.schedule), then
    fired(self); once disarmed, neither, and it holds neither any more."""

    def __init__(
        self, callback: Callable[[], None], fired: Callable[[Timer], None] | None = None
    ) -> None:
        super().__init__()
        self._callback: Callable[[], None] | None = callback
        self._fired = fired

    def disarm(self) -> None:
        self._callback = self._fired = None

    def on_timer_task(self, event: Event) -> None:
        callback, fired = self._callback, self._fired
        self.disarm()
        if fired is not None:
            fired(self)
        if callback is not None:
            callback()
