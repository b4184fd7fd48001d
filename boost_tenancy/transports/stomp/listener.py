"""stomp.py's listener for one STOMP connection attempt: CONNECTED, MESSAGE, RECEIPT, ERROR and
the socket closing, each passed on tagged with the connection's generation."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

import stomp


class FrameEvents(Protocol):
    """What a connection's listener reports, each tagged with the connection's generation."""

    def message_received(self, generation: int, headers: Mapping[str, str], body: bytes) -> None:
        pass

    def receipt_received(self, receipt: str | None) -> None:
        pass

    def error_received(
        self, generation: int, headers: Mapping[str, str], body: bytes | str
    ) -> None:
        pass

    def connection_lost(self, generation: int) -> None:
        pass


class Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """stomp.py's callbacks for one connection attempt, passed on through FrameEvents."""

    def __init__(self, events: FrameEvents, generation: int) -> None:
        self._events = events
        self._generation = generation
        self.server: str | None = None
        """CONNECTED's server header, once CONNECTED came."""
        self.lost = False
        self.answered = threading.Event()
        """Set on CONNECTED, on ERROR and when the socket closes: the connect wait can end."""

    def on_connected(self, frame: Any) -> None:
        self.server = frame.headers.get("server", "")
        self.answered.set()

    def on_message(self, frame: Any) -> None:
        self._events.message_received(self._generation, frame.headers, frame.body)

    def on_receipt(self, frame: Any) -> None:
        self._events.receipt_received(frame.headers.get("receipt-id"))

    def on_error(self, frame: Any) -> None:
        self._events.error_received(self._generation, frame.headers, frame.body)
        self.answered.set()

    def on_disconnected(self) -> None:
        self.lost = True
        self.answered.set()
        self._events.connection_lost(self._generation)
