"""Artemis's management operations over the AMQP transport's own connection: the requests of
transports/artemis_management.py sent to activemq.management, the replies read from a queue of
the session's own.

A request is an amqp-value string body (Artemis reads the JSON parameters only from a text
body), the operation in the application properties, properties.reply_to naming the reply queue
and a correlation id the reply carries back (ManagementServiceImpl.getCorrelationIdentity). The
reply queue is an ordinary ANYCAST queue its receiver makes (the queue capability), detached when
the session ends; Artemis deletes it once empty and unused (auto-delete-queues, its default).
Both need auto-create-queues, Artemis's default too; where it is off the session fails and the
runner leaves its tenants to its router. Requests go to activemq.management without the queue
capability every other sender names: with it, Artemis would make a durable queue of that name.
Unlike STOMP's, a refused request does not end the connection: Artemis rejects its transfer,
which fails the send's confirmation.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog
from proton import Message

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.amqp.encoding import EncodedMessage
from boost_tenancy.transports.artemis_requests import (
    MANAGEMENT_ADDRESS,
    REPLY_PREFIX,
    Operation,
    Replies,
)
from boost_tenancy.transports.base import Delivery

if TYPE_CHECKING:
    from boost_tenancy.transports.amqp.transport import AmqpTransport

_PREFETCH = 100

log = structlog.get_logger("boost_tenancy.transports.amqp")


class AmqpManagementSession:
    """Runs management operations on the transport's connection; close() ends it."""

    def __init__(self, transport: AmqpTransport, timeout_s: float) -> None:
        self._transport = transport
        self._timeout_s = timeout_s
        self._replies = Replies()
        self._reply_to = f"{REPLY_PREFIX}{uuid.uuid4().hex}"
        self._subscription = transport.subscribe(
            self._reply_to, selector=None, prefetch=_PREFETCH, on_delivery=self._on_reply
        )

    def _on_reply(self, delivery: Delivery) -> None:
        self._transport.ack(delivery)
        self._replies.put(delivery.correlation_id, delivery.properties, _text(delivery))

    def run(self, ops: Sequence[Operation]) -> list[object]:
        """Send every operation at once, then read their results in order; the first refused
        one raises ManagementError with the broker's text."""
        if not ops:
            return []
        correlations = self._replies.correlations(ops)
        requests = [
            (MANAGEMENT_ADDRESS, self._request(op, correlation))
            for op, correlation in zip(ops, correlations, strict=True)
        ]
        self._transport.send_encoded(requests, f"{len(ops)} management request(s)", as_queue=False)
        return self._replies.results(ops, correlations, self._timeout_s)

    def _request(self, op: Operation, correlation: str) -> EncodedMessage:
        message = Message(
            body=op.body,
            properties=op.properties,
            reply_to=self._reply_to,
            correlation_id=correlation,
        )
        return EncodedMessage(message.encode())

    def close(self) -> None:
        """Detach the reply queue's receiver; a failure is logged, not raised over the result or
        the error of the session (the receiver goes with the connection anyway)."""
        try:
            self._transport.unsubscribe(self._subscription)
        except TransportError as exc:
            log.warning("management_reply_queue_not_detached", error=str(exc))


def _text(reply: Delivery) -> str | None:
    """A reply's body as text; None for an operation that returns nothing (a null amqp-value,
    which the transport hands over as empty bytes)."""
    body = reply.body
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text or None


__all__ = ["AmqpManagementSession"]
