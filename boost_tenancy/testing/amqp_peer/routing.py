"""Queues and addresses at the in-process AMQP peer: what an address names on each broker,
Artemis's auto-created addresses and subscriptions, and where a sent message is routed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from proton import Message, symbol

from boost_tenancy.messages import DUPLICATE_ID_PROPERTY
from boost_tenancy.testing.amqp_peer.state import _Address, _Queue, _Target
from boost_tenancy.testing.amqp_peer.wire import _Refusal
from boost_tenancy.transports.artemis_requests import MANAGEMENT_ADDRESS

if TYPE_CHECKING:
    from boost_tenancy.testing.amqp_peer.engine import _Engine


class _Routing:
    """The engine's addresses and queues: named, declared, and routed to."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine
        self._seen_ids: set[tuple[str, str]] = set()
        """Artemis: the address and _AMQ_DUPL_ID of every message stored (duplicate detection)."""

    def rabbit_queue(self, address: str | None, durable: bool) -> _Queue:
        """RabbitMQ 3.10's answer to an address (measured): /queue/NAME and a bare NAME are queue
        NAME, declared if missing, durable when the link's terminus is (a queue declared without
        it is transient: a restart drops it and what it holds); other forms end the session."""
        engine = self._engine
        if address is None:
            raise _Refusal(
                "amqp:invalid-field", "Attach rejected: {address_not_utf8_string,undefined}", True
            )
        if not address.startswith("/"):
            return engine._queue(address, durable=durable)
        kind, _, name = address[1:].partition("/")
        if kind == "queue" and name and "/" not in name:
            return engine._queue(name, durable=durable)
        if kind == "queue":
            rest = address.removeprefix("/queue")
            shown = f'"{rest}"' if rest else "[]"
            reason = f"Attach rejected: {{invalid_destination,queue,{shown}}}"
            raise _Refusal("amqp:invalid-field", reason, True)
        if kind in ("exchange", "topic", "amq"):
            raise _Refusal("amqp:not-implemented", f"{address}: address form not modelled", True)
        reason = f'Attach rejected: {{unknown_destination,"{address}"}}'
        raise _Refusal("amqp:invalid-field", reason, True)

    def declare(self, name: str, capability: str | None) -> _Address:
        """Artemis's auto-creation: the queue capability makes an anycast queue of the address's
        name; without it a new address is MULTICAST (the default routing type, measured)."""
        engine = self._engine
        address = engine._addresses.setdefault(name, _Address())
        if capability == "queue":
            address.anycast = True
            engine._queue(name)
        elif not address.anycast:
            address.multicast = True
        return address

    def consumer_queue(self, name: str, capability: str | None) -> tuple[_Queue, bool]:
        """The queue a receiver reads, picked as DefaultSenderController.init does."""
        engine = self._engine
        address = engine._addresses.get(name) or self.declare(name, capability)
        if capability == "queue" and not address.anycast:
            reason = f"Address {name} is not configured for queue support"
            raise _Refusal("amqp:illegal-state", reason)
        if capability == "topic" and not address.multicast:
            reason = f"Address {name} is not configured for topic support"
            raise _Refusal("amqp:illegal-state", reason)
        if capability == "topic" or not address.anycast:
            subscription = _Queue(str(uuid.uuid4()), name)
            address.subscriptions.append(subscription)
            return subscription, True
        return engine._queue(name), False

    def all_queues(self) -> Iterator[_Queue]:
        engine = self._engine
        yield from engine._queues.values()
        for address in engine._addresses.values():
            yield from address.subscriptions

    def duplicate(self, target: _Target, message: Message) -> bool:
        """Artemis: whether the message's _AMQ_DUPL_ID was seen at its address before (the
        broker drops it, confirmed, outside a transaction, and fails the commit of one inside)."""
        name = target.address or message.address
        properties = cast(Mapping[str, object], message.properties or {})
        duplicate_id = properties.get(DUPLICATE_ID_PROPERTY)
        return (
            self._engine._artemis
            and duplicate_id is not None
            and (name, str(duplicate_id)) in self._seen_ids
        )

    def route(self, target: _Target, encoded: bytes, message: Message) -> None:
        engine = self._engine
        name = target.address or message.address
        if engine._artemis and name is not None:
            if self.duplicate(target, message):
                return
            duplicate_id = cast(Mapping[str, object], message.properties or {}).get(
                DUPLICATE_ID_PROPERTY
            )
            if duplicate_id is not None:
                self._seen_ids.add((name, str(duplicate_id)))
        if not engine._artemis or name is None:
            engine._store(engine._queue(str(name)), encoded, message)
            return
        capability = target.capability
        if target.address is None:  # anonymous relay: the JMS destination type decides
            kind = cast(Mapping[object, object], message.annotations or {}).get(
                symbol("x-opt-jms-dest")
            )
            capability = {0: "queue", 2: "queue", 1: "topic", 3: "topic"}.get(cast(int, kind))
        if name == MANAGEMENT_ADDRESS:  # handled before any routing (ServerSessionImpl.send)
            engine.management.manage(message)
            return
        address = engine._addresses.get(name) or self.declare(name, capability)
        properties = cast(Mapping[str, object], message.properties or {})
        diverted = None if capability == "topic" else engine._diverts.route(name, properties)
        if diverted is not None:
            for divert, forward in diverted:
                copy = Message()
                copy.decode(encoded)
                annotations: dict[Any, Any] = dict(copy.annotations or {})
                annotations[symbol("x-opt-ORIG-ADDRESS")] = name
                annotations[symbol("x-opt-ORIG-QUEUE")] = divert
                copy.annotations = annotations
                engine._store(engine._queue(forward), copy.encode(), copy)
            return
        if capability != "topic" and address.anycast:
            engine._store(engine._queue(name), encoded, message)
        if capability != "queue":  # none at all: the message is dropped (measured)
            for subscription in list(address.subscriptions):
                engine._store(subscription, encoded, message)
