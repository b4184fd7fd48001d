"""Links at the in-process AMQP peer: senders, receivers and transaction coordinators attached as
each broker attaches them, attaches refused, and what ending a link or connection gives back."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from proton import Described, Link, Sender, Terminus

from boost_tenancy.testing.amqp_peer.state import _Conn, _Consumer, _Target
from boost_tenancy.testing.amqp_peer.wire import (
    _SELECTOR,
    _capability,
    _data_object,
    _durable,
    _Refusal,
    _symbols,
)
from boost_tenancy.testing.jms_selector import UnsupportedSelectorError
from boost_tenancy.testing.jms_selector import parse as parse_selector

if TYPE_CHECKING:
    from boost_tenancy.testing.amqp_peer.engine import _Engine


class _Links:
    """The engine's links: attached, refused and ended."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine

    def end_connection(self, conn: _Conn, counted: bool) -> None:
        self.end_links(lambda link: link.connection == conn.connection, counted)
        for txn in list(conn.txns.values()):
            self._engine.transfers.discharge(conn, txn, fail=True)

    def end_links(self, which: Callable[[Link], bool], counted: bool = False) -> None:
        engine = self._engine
        for link in [link for link in engine._producers if which(link)]:
            del engine._producers[link]
        for link in [link for link in engine._coordinators if which(link)]:
            del engine._coordinators[link]
        ended = [engine._consumers.pop(link) for link in list(engine._consumers) if which(link)]
        for consumer in ended:  # all of them first: none may take what another gives back
            consumer.queue.consumers.remove(consumer)
            if consumer.subscription:
                engine._addresses[consumer.queue.address].subscriptions.remove(consumer.queue)
        for consumer in ended:
            for entry in consumer.in_flight.values():
                if entry.txn is None:  # what a transaction accepted waits for its discharge
                    entry.holder = None
                    if counted:
                        entry.losses += 1
                        if entry.losses % 2 == 1:
                            engine.outcomes.count_failure(entry)
            engine._pump(consumer.queue)

    def refuse(self, link: Link, refusal: _Refusal) -> None:
        if refusal.end_session:
            session = link.session
            self.end_links(lambda other: other.session == session)
            session.condition = refusal.condition
            session.close()
            return
        # Artemis (AMQPSessionContext.addSender): attach with a null terminus, then detach
        (link.target if link.is_receiver else link.source).type = Terminus.UNSPECIFIED
        link.condition = refusal.condition
        link.open()
        link.close()

    def attach_producer(self, link: Link, conn: _Conn) -> None:
        engine = self._engine
        remote = link.remote_target
        if remote.type == Terminus.COORDINATOR:
            if not engine._artemis:  # measured on RabbitMQ 3.10.8
                raise _Refusal("amqp:not-implemented", "Transactions not supported", True)
            link.target.type = Terminus.COORDINATOR
            # the capabilities AMQPSessionContext.addTransactionHandler answers with
            link.target.capabilities.put_object(
                _symbols(
                    "amqp:local-transactions", "amqp:multi-txns-per-ssn", "amqp:multi-ssns-per-txn"
                )
            )
            engine._coordinators[link] = conn
        elif engine._artemis:
            target = _Target(remote.address, _capability(remote))
            if target.address is not None:  # None: the anonymous relay
                engine.routing.declare(target.address, target.capability)
            engine._producers[link] = target
            link.target.copy(remote)
        else:
            queue = engine.routing.rabbit_queue(remote.address, _durable(remote))
            engine._producers[link] = _Target(queue.name, None)
            link.target.copy(remote)
        link.source.copy(link.remote_source)
        link.open()
        producer = engine._producers.get(link)
        if producer is None or producer.address not in engine.full_addresses:
            link.flow(engine.profile.credit)

    def attach_consumer(self, link: Link, conn: _Conn) -> None:
        engine = self._engine
        source = link.remote_source
        if source.dynamic:
            raise _Refusal(
                "amqp:not-implemented", "no dynamic nodes in the peer", not engine._artemis
            )
        filters = _data_object(source.filter) or {}
        selectors = {
            key: value
            for key, value in filters.items()
            if isinstance(value, Described) and value.descriptor in _SELECTOR
        }
        link.source.copy(source)
        link.target.copy(link.remote_target)
        selector = None
        subscription = False
        if engine._artemis:
            if source.address is None:
                raise _Refusal("amqp:not-found", "Source address not set")
            queue, subscription = engine.routing.consumer_queue(source.address, _capability(source))
            try:
                if selectors:
                    selector = parse_selector(str(next(iter(selectors.values())).value))
            except UnsupportedSelectorError as exc:
                raise _Refusal("amqp:not-implemented", f"selector not modelled: {exc}") from exc
            # Artemis echoes only the filters it applies (DefaultSenderController.init)
            link.source.filter.clear()
            if selectors:
                link.source.filter.put_object(selectors)
            link.snd_settle_mode = link.remote_snd_settle_mode
        else:
            # RabbitMQ 3.10 echoes every filter and applies none; it offers no modified outcome
            queue = engine.routing.rabbit_queue(source.address, _durable(source))
            link.source.outcomes.clear()
            link.source.outcomes.put_object(
                _symbols("amqp:accepted:list", "amqp:rejected:list", "amqp:released:list")
            )
        consumer = _Consumer(cast(Sender, link), queue, selector, conn, subscription)
        engine._consumers[link] = consumer
        queue.consumers.append(consumer)
        link.open()
        engine._pump(queue)
