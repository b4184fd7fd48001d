"""Artemis management at the in-process AMQP peer: requests to activemq.management answered by
the divert model, and the queues and counts that model works with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from proton import Message

from boost_tenancy.testing.diverts import QueueCount
from boost_tenancy.transports.artemis_requests import (
    BROKER_RESOURCE,
    OPERATION_PROPERTY,
    RESOURCE_PROPERTY,
    SUCCEEDED_PROPERTY,
    ManagementError,
)

if TYPE_CHECKING:
    from boost_tenancy.testing.amqp_peer.engine import _Engine


class _Management:
    """The engine's answers to management requests, and what its divert model asks of it."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine

    def make_queue(self, name: str) -> None:
        self._engine.routing.declare(name, "queue")

    def queue_counts(self) -> list[QueueCount]:
        """Every queue as Artemis's listQueues counts it."""
        engine = self._engine
        now = engine._clock()
        return [
            QueueCount(
                name=queue.name,
                waiting=sum(1 for e in queue.entries if e.holder is None and e.due <= now),
                in_flight=sum(1 for e in queue.entries if e.holder is not None),
                scheduled=sum(1 for e in queue.entries if e.holder is None and e.due > now),
                consumers=len(queue.consumers),
            )
            for queue in engine._queues.values()
        ]

    def manage(self, request: Message) -> None:
        """A management request (testing/diverts.py answers it); the reply goes to reply_to when
        that names an existing anycast address, with the request's correlation id, else nowhere."""
        engine = self._engine
        properties = cast(Mapping[str, object], request.properties or {})
        try:
            params = json.loads(str(request.body))
            if not isinstance(params, list):
                raise ManagementError(f"parameters are not a JSON array: {request.body!r}")
            result = engine._diverts.operate(
                str(properties.get(OPERATION_PROPERTY)),
                params,
                str(properties.get(RESOURCE_PROPERTY, BROKER_RESOURCE)),
            )
            succeeded, body = True, None if result is None else json.dumps([result])
        except (ManagementError, ValueError, KeyError) as exc:
            succeeded, body = False, json.dumps([str(exc)])
        address = engine._addresses.get(str(request.reply_to))
        if request.reply_to is None or address is None or not address.anycast:
            return
        reply = Message(
            body=body,
            properties={SUCCEEDED_PROPERTY: succeeded},
            correlation_id=request.correlation_id or request.id,
        )
        engine._store(engine._queue(str(request.reply_to)), reply.encode(), reply)
