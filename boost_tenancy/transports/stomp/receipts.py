"""Receipts the toolkit waits for: registered before their frame is written, resolved on the
receiving thread by RECEIPT or ERROR, failed when their connection is lost.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Final

from boost_tenancy.errors import NotConfirmedError, TransportError

RECEIPT_PREFIX: Final = "r-"
"""Every receipt the toolkit asks for starts so; stomp.py's own (its DISCONNECT's) never do."""


def new_receipt() -> str:
    return f"{RECEIPT_PREFIX}{uuid.uuid4().hex}"


@dataclass(slots=True)
class PendingReceipt:
    """One receipt awaited on the connection of the given generation."""

    id: str
    generation: int
    event: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class Receipts:
    """Every receipt awaited, across the connections a transport goes through."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pending: dict[str, PendingReceipt] = {}

    def __len__(self) -> int:
        """How many receipts are awaited now."""
        return len(self._pending)

    def expect(self, generation: int, receipt: str | None = None) -> PendingReceipt:
        """Register a receipt to await; pass one already written into a frame, or get a new one."""
        pending = PendingReceipt(receipt or new_receipt(), generation)
        with self._lock:
            self._pending[pending.id] = pending
        return pending

    def discard(self, pending: PendingReceipt) -> None:
        """Stop awaiting a receipt whose frame was never written."""
        with self._lock:
            self._pending.pop(pending.id, None)

    def wait(self, pending: PendingReceipt, what: str) -> None:
        """Wait for the broker's answer; NotConfirmedError when none comes in time, TransportError
        when the broker refused or the connection was lost."""
        confirmed = pending.event.wait(self._timeout_s)
        self.discard(pending)
        if not confirmed:
            raise NotConfirmedError(f"{what}: no receipt within {self._timeout_s}s")
        if pending.error is not None:
            raise TransportError(f"{what}: {pending.error}")

    def resolve(self, receipt: str | None, error: str | None) -> None:
        """The broker answered: confirmed when error is None, refused otherwise."""
        if receipt is None:
            return
        with self._lock:
            pending = self._pending.get(receipt)
        if pending is not None:
            pending.error = error
            pending.event.set()

    def fail(self, generation: int | None, reason: str) -> None:
        """Fail the receipts of one connection (None: of every connection)."""
        with self._lock:
            failed = [
                p
                for p in self._pending.values()
                if generation is None or p.generation == generation
            ]
        for pending in failed:
            pending.error = reason
            pending.event.set()
