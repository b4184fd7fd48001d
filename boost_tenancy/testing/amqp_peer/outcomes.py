"""Outcomes at the in-process AMQP peer: a consumer's disposition as each broker takes it,
failed deliveries counted, and messages dead-lettered or expired."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from proton import Delivery, Message, symbol

from boost_tenancy.testing.amqp_peer.state import _Consumer, _Entry, _remove
from boost_tenancy.testing.amqp_peer.wire import _TERMINAL, _TRANSACTIONAL_STATE, _Refusal

if TYPE_CHECKING:
    from boost_tenancy.testing.amqp_peer.engine import _Engine


class _Outcomes:
    """What the engine does with an outcome, a failed delivery or an expired message."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine

    def on_outcome(self, consumer: _Consumer, delivery: Delivery) -> None:
        """A consumer's disposition, as ProtonServerSenderContext handles it (Artemis) or as
        RabbitMQ 3.10 was seen to."""
        engine = self._engine
        entry = consumer.in_flight.get(delivery)
        state = delivery.remote_state
        if entry is None or entry.txn is not None:
            return
        if state == _TRANSACTIONAL_STATE:
            engine.transfers.accept_in_txn(consumer, delivery, entry)
            return
        if state not in _TERMINAL and (engine._artemis or not delivery.settled):
            # Artemis ignores a settlement without an outcome: the message stays with the
            # consumer until its link ends
            return
        if not engine._artemis and state not in (
            Delivery.ACCEPTED,
            Delivery.REJECTED,
            Delivery.RELEASED,
        ):
            # RabbitMQ 3.10 takes a modified outcome, or a settlement without one, as a protocol
            # error and ends the session; its unacknowledged messages are requeued (measured)
            flags = f"{delivery.remote.failed},{delivery.remote.undeliverable}".lower()
            shown = f"{{'v1_0.modified',{flags},undefined}}" if state else "undefined"
            refusal = _Refusal("amqp:invalid-field", f"Unrecognised state: {shown}", True)
            engine.links.refuse(consumer.link, refusal)
            return
        del consumer.in_flight[delivery]
        delivery.settle()
        entry.holder = None
        if state == Delivery.ACCEPTED:
            _remove(entry)
        elif state == Delivery.REJECTED and engine._artemis:
            self.dead_letter(entry)
        elif state == Delivery.REJECTED:
            _remove(entry)  # RabbitMQ 3.10 (no dead-letter exchange) drops it (measured)
        elif state == Delivery.MODIFIED:
            if delivery.remote.undeliverable:
                entry.refused_by.add(consumer)
            if delivery.remote.failed:
                self.count_failure(entry)
        # released: back at its place, not counted
        engine._pump(entry.queue)

    def count_failure(self, entry: _Entry) -> None:
        entry.delivery_count += 1
        if entry.delivery_count >= self._engine._max_attempts:
            self.dead_letter(entry)

    def dead_letter(self, entry: _Entry) -> None:
        engine = self._engine
        _remove(entry)
        message = Message()
        message.decode(entry.encoded)
        annotations = dict(cast(Mapping[object, object], message.annotations or {}))
        annotations[symbol("x-opt-ORIG-QUEUE")] = entry.queue.name
        annotations[symbol("x-opt-ORIG-ADDRESS")] = entry.queue.address
        message.annotations = cast(Any, annotations)
        engine.routing.declare(engine._dla, "queue")
        engine._store(engine._queue(engine._dla), message.encode(), message)

    def expire(self, entry: _Entry) -> None:
        """Artemis (QueueImpl.expire, makeCopy): to the expiry address without an expiry, with
        the x-opt-ORIG-* and x-opt-ACTUAL-EXPIRY annotations, or dropped without one; RabbitMQ:
        dropped."""
        engine = self._engine
        _remove(entry)
        if not engine._artemis or engine._expiry_address is None:
            return
        message = Message()
        message.decode(entry.encoded)
        message.ttl = 0
        message.expiry_time = 0
        annotations = dict(cast(Mapping[object, object], message.annotations or {}))
        annotations[symbol("x-opt-ORIG-QUEUE")] = entry.queue.name
        annotations[symbol("x-opt-ORIG-ADDRESS")] = entry.queue.address
        annotations[symbol("x-opt-ACTUAL-EXPIRY")] = int(time.time() * 1000)
        message.annotations = cast(Any, annotations)
        engine.routing.declare(engine._expiry_address, "queue")
        engine._store(engine._queue(engine._expiry_address), message.encode(), message)
