"""Artemis's management operations over a STOMP connection of their own: the requests of
transports/artemis_management.py sent to activemq.management, the replies read from a queue of
the session's own.

One connection per call, as for Classic's statistics (statistics.py): a refused request (no
`manage` permission) may end the connection with an ERROR frame, which must not take the
transport's subscriptions with it. The reply queue is an ordinary ANYCAST queue, created by the
SUBSCRIBE (auto-create, Artemis's default) before any request names it as reply-to, and deleted
by Artemis once the session is gone and it is empty (auto-delete, the default too). The steps
and their order are artemis_management.install's; each step's requests go out together.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.artemis_requests import (
    MANAGEMENT_ADDRESS,
    REPLY_PREFIX,
    Operation,
    Replies,
    Runs,
)
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import QUEUE_PREFIX, encode_frame
from boost_tenancy.transports.stomp.link import Link
from boost_tenancy.transports.stomp.receipts import new_receipt
from boost_tenancy.transports.stomp.settings import StompSettings
from boost_tenancy.transports.stomp.side import side_connection

T = TypeVar("T")


def _on_reply(replies: Replies) -> Callable[[int, Mapping[str, str], bytes], None]:
    def on_message(generation: int, headers: Mapping[str, str], body: bytes) -> None:
        replies.put(headers.get("correlation-id"), dict(headers), body.decode("utf-8", "replace"))

    return on_message


def management_session(settings: StompSettings, work: Callable[[Runs], T]) -> T:
    """Run work with a management session on a STOMP connection of its own to the Artemis
    broker settings point at; the connection is closed after."""
    replies = Replies()

    def refused(server: str | None) -> TransportError:
        return TransportError(f"routes at send time need ActiveMQ Artemis, not {server!r}")

    flavour = BrokerFlavour.ARTEMIS
    with side_connection(settings, _on_reply(replies), flavour, refused) as opened:
        connection, link = opened
        return work(_Session(connection, link, replies, settings.receipt_timeout_s))


class _Session:
    def __init__(
        self, connection: StompConnection, link: Link, replies: Replies, timeout_s: float
    ) -> None:
        self._connection = connection
        self._link = link
        self._replies = replies
        self._timeout_s = timeout_s
        self._reply_to = f"{REPLY_PREFIX}{uuid.uuid4().hex}"
        receipt = new_receipt()
        subscribe = {
            "destination": QUEUE_PREFIX + self._reply_to,
            "id": "management",
            "ack": "auto",
            "receipt": receipt,
        }
        connection.confirm(link, [encode_frame("SUBSCRIBE", subscribe)], receipt, "reply queue")

    def _alive(self) -> bool:
        live = self._connection.live()
        return live is not None and live.generation == self._link.generation

    def run(self, ops: Sequence[Operation]) -> list[object]:
        """Send every operation at once, then read their results in order; the first refused
        one raises ManagementError with the broker's text."""
        if not ops:
            return []
        correlations = self._replies.correlations(ops)
        receipt = new_receipt()
        frames = [
            encode_frame(
                "SEND",
                # No content-length: Artemis reads the JSON parameters only from a text body.
                {
                    "destination": MANAGEMENT_ADDRESS,
                    "reply-to": self._reply_to,
                    "correlation-id": correlation,
                    **op.properties,
                }
                | ({"receipt": receipt} if i == len(ops) - 1 else {}),
                op.body.encode(),
            )
            for i, (op, correlation) in enumerate(zip(ops, correlations, strict=True))
        ]
        what = f"{len(ops)} management request(s)"
        self._connection.confirm(self._link, frames, receipt, what)
        return self._replies.results(ops, correlations, self._timeout_s, self._alive)


__all__ = ["management_session"]
