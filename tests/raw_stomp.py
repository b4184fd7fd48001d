"""Plain stomp.py sends, as a Java service or a script feeds the broker, confirmed the one way
that holds on both brokers: a receipt on the last SEND.

On Artemis 2.44 a DISCONNECT's receipt confirms no SEND before it that asked for none: right
after it a queue held 1 of 200 such messages, and all 200 a second later (measured here,
3 of 3 runs), while a receipt on the last SEND came only once all 200 were stored. A test that
took DISCONNECT as the confirmation raced the broker (a divert made just after it caught most
of the messages)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence

import stomp

CONFIRM_TIMEOUT_S = 30.0


class _Receipts(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.cond = threading.Condition()

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        with self.cond:
            self.seen.add(frame.headers.get("receipt-id", ""))
            self.cond.notify_all()


def send_confirmed(
    connection: stomp.Connection12, sends: Sequence[tuple[str, str, Mapping[str, str]]]
) -> None:
    """Send each (destination, body, headers) in order with a receipt asked on the last only,
    and wait for that receipt; AssertionError when it does not come."""
    receipts = _Receipts()
    name = f"confirm-{uuid.uuid4().hex}"
    connection.set_listener(name, receipts)
    receipt = f"last-{uuid.uuid4().hex}"
    try:
        for index, (destination, body, headers) in enumerate(sends):
            extra = {"receipt": receipt} if index == len(sends) - 1 else {}
            connection.send(destination, body, headers={**headers, **extra})
        with receipts.cond:
            came = receipts.cond.wait_for(lambda: receipt in receipts.seen, CONFIRM_TIMEOUT_S)
        assert came, f"no receipt for the last of {len(sends)} sends in {CONFIRM_TIMEOUT_S} s"
    finally:
        connection.remove_listener(name)
