"""What a broker does, to a plain proton client, with a message for a queue at its length limit
(max-length with overflow reject-publish): settles it rejected, or ends the connection.

Measured on RabbitMQ 3.10.8 by tests/integration/test_rabbitmq_refusal.py, and the same check
holds the AMQP peer's model of it (tests/unit/test_amqp_refusal_ends_connection.py)."""

from __future__ import annotations

import contextlib
from typing import Final

from proton import Message
from proton.utils import BlockingConnection, SendException

REJECTED: Final = "rejected"
CONNECTION_ENDED: Final = "connection ended"


def refusal_of_a_full_queue(url: str, address: str, timeout_s: float = 20.0) -> str:
    """Send a first message to address (a queue whose length limit is 1) and then a second one,
    each waiting for its outcome; returns REJECTED or CONNECTION_ENDED for the second. An
    accepted second message fails the check (AssertionError)."""
    connection = BlockingConnection(url, timeout=timeout_s)
    try:
        sender = connection.create_sender(address)
        sender.send(Message(body="first"))
        try:
            sender.send(Message(body="second"))
        except SendException:
            return REJECTED
        except Exception:  # proton's ConnectionException, LinkDetached, Timeout...
            return CONNECTION_ENDED
        raise AssertionError(f"{url} accepted a message for a full queue ({address})")
    finally:
        # The connection may be gone already; the answer is what mattered.
        with contextlib.suppress(Exception):
            connection.close()
