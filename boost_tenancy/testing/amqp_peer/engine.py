"""The in-process AMQP peer's engine: proton's handler on the peer's thread, sole owner of the
broker state, and the delivery core that stores messages and hands them to consumers."""

from __future__ import annotations

import contextlib
import itertools
import queue as queue_module
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from proton import Connection, Link, Message, SymbolList, Transport, symbol
from proton.handlers import IOHandler
from proton.reactor import EventInjector

from boost_tenancy.testing.amqp_peer.links import _Links
from boost_tenancy.testing.amqp_peer.management import _Management
from boost_tenancy.testing.amqp_peer.outcomes import _Outcomes
from boost_tenancy.testing.amqp_peer.profiles import _PROFILES, PeerFlavour
from boost_tenancy.testing.amqp_peer.routing import _Routing
from boost_tenancy.testing.amqp_peer.state import (
    _Address,
    _Conn,
    _Consumer,
    _Entry,
    _has_credit,
    _Queue,
    _remove,
    _Target,
)
from boost_tenancy.testing.amqp_peer.transfers import _Transfers
from boost_tenancy.testing.amqp_peer.wire import _Refusal
from boost_tenancy.testing.diverts import DivertModel

REFUSAL_CLOSE_S: Final = 3.0
"""RabbitMQ 3.10.8 ended the connection this long after a refused message (measured)."""

# How often scheduled messages are checked against the clock (an injected clock may jump).
_TICK_S: Final = 0.05


class _Engine:
    """The broker: proton's event handler on the peer's thread and sole owner of the state."""

    def __init__(
        self,
        flavour: PeerFlavour,
        max_attempts: int,
        dla: str,
        clock: Callable[[], float],
        expiry_address: str | None = None,
    ) -> None:
        self.profile = _PROFILES[flavour]
        self.container_id = self.profile.container_id or str(uuid.uuid4())
        self.container: Any = None
        self.connections_opened = 0
        self.calls: queue_module.SimpleQueue[Callable[[], None]] = queue_module.SimpleQueue()
        self.sockets: list[socket.socket] = []  # every accepted socket, closed with the peer
        self.doorways: set[Any] = set()  # selectables of sockets still in the SASL exchange
        self.listening: Any = None
        self.stopping = False
        self._artemis = flavour is PeerFlavour.ARTEMIS
        self._max_attempts = max_attempts
        self._dla = dla
        self._expiry_address = expiry_address
        self._clock = clock
        self._queues: dict[str, _Queue] = {}
        self._addresses: dict[str, _Address] = {}
        self._conns: dict[Connection, _Conn] = {}
        self._consumers: dict[Link, _Consumer] = {}
        self._producers: dict[Link, _Target] = {}
        self._coordinators: dict[Link, _Conn] = {}
        self._tags = itertools.count(1)
        self._txn_ids = itertools.count(1)
        self._tick_pending = False
        self.routing = _Routing(self)
        self.links = _Links(self)
        self.outcomes = _Outcomes(self)
        self.transfers = _Transfers(self)
        self.management = _Management(self)
        self._diverts = DivertModel(
            self._queues.__contains__, self.management.make_queue, self.management.queue_counts
        )
        self.manage = True  # the user's manage permission on activemq.management
        self.length_limits: dict[str, int] = {}
        self.full_addresses: set[str] = set()
        """Artemis: addresses whose senders get no credit (full under address-full-policy FAIL)."""
        """RabbitMQ: a queue's max-length with overflow reject-publish (transfers.py)."""
        self.refusal_close_s = REFUSAL_CLOSE_S
        self.pending_timers: list[Any] = []
        """Timers that would keep the container running past shutdown (cancelled there)."""

    # -- plumbing ---------------------------------------------------------------------------------
    def on_peer_call(self, _event: Any) -> None:
        while not self.calls.empty():
            self.calls.get()()

    def watch(self, handler: object, sock: socket.socket) -> Any:
        """Have the container call handler when sock is readable."""
        selectable = self.container.selectable(handler=handler, delegate=sock)
        selectable._transport = None  # proton's IOHandler then leaves the socket alone
        selectable.reading = True
        selectable.update()
        return selectable

    def adopt(self, doorway: Any, sock: socket.socket, leftover: bytes) -> None:
        """Give a socket past SASL to proton, the way its Acceptor does with a fresh one."""
        doorway.release()  # the socket stays open when the doorway's selectable goes
        doorway.terminate()
        doorway.update()
        connection = self.container.connection(self)
        connection._acceptor = self  # proton's IOHandler then does not dial out
        transport = Transport(Transport.SERVER)
        transport.bind(connection)
        if leftover:
            transport.push(leftover)
        selectable = self.container.selectable(delegate=sock)
        selectable._transport = transport
        transport._selectable = selectable
        IOHandler.update(transport, selectable, self.container.now)
        self._conns[connection] = _Conn(connection, sock)
        self.connections_opened += 1

    def drop_connections(self) -> None:
        for conn in self._conns.values():
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def shutdown(self, injector: EventInjector) -> None:
        """Close every socket so the container's loop runs out."""
        self.stopping = True
        for timer in self.pending_timers:
            timer.cancel()
        self.drop_connections()
        for selectable in [self.listening, *self.doorways]:
            selectable.terminate()
            selectable.update()
        injector.close()

    def on_timer_task(self, _event: Any) -> None:
        self._tick_pending = False
        if not self.stopping:
            for queue in self.routing.all_queues():
                self._pump(queue)

    # -- connections, sessions, links -------------------------------------------------------------
    def on_connection_remote_open(self, event: Any) -> None:
        connection = event.connection
        connection.container = self.container_id
        connection.properties = {symbol(k): v for k, v in self.profile.properties.items()}
        if self.profile.capabilities:
            connection.offered_capabilities = SymbolList(list(self.profile.capabilities))
        connection.open()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_connection_remote_close(self, event: Any) -> None:
        conn = self._conns.get(event.connection)
        if conn is not None:
            conn.closed_cleanly = True
            self.links.end_connection(conn, counted=False)
        event.connection.close()

    def on_transport_closed(self, event: Any) -> None:
        conn = self._conns.pop(event.connection, None) if event.connection else None
        if conn is not None and not conn.closed_cleanly:
            # Artemis: "we don't decrement delivery count if the client failed", but its AMQP
            # sessions close their consumers as a clean close, racing the failure: measured on
            # 2.44, a delivery left by two lost connections came back counted 0, 1, 1, and one
            # that killed its worker 1, 1, 2, 2, 3. The model counts every other loss, the first
            # of them included.
            self.links.end_connection(conn, counted=self._artemis)

    def on_session_remote_close(self, event: Any) -> None:
        self.links.end_links(lambda link: link.session == event.session)
        event.session.close()

    def on_link_remote_close(self, event: Any) -> None:
        self.links.end_links(lambda link: link == event.link)
        if self._artemis:
            event.link.close()
        else:
            event.link.detach()  # RabbitMQ 3.10 answers a closing detach without closed=true

    def on_link_remote_detach(self, event: Any) -> None:
        self.links.end_links(lambda link: link == event.link)
        event.link.detach()

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        try:
            if link.is_receiver:
                self.links.attach_producer(link, self._conns[link.connection])
            else:
                self.links.attach_consumer(link, self._conns[link.connection])
        except _Refusal as refusal:
            self.links.refuse(link, refusal)

    # -- storing -----------------------------------------------------------------------------------
    def _queue(self, name: str, address: str | None = None, durable: bool = True) -> _Queue:
        if name not in self._queues:
            self._queues[name] = _Queue(name, address or name, durable)
        return self._queues[name]

    def _store(self, queue: _Queue, encoded: bytes, message: Message) -> None:
        now = self._clock()
        due = now
        annotations = cast(Mapping[object, object], message.annotations or {})
        at = annotations.get(symbol("x-opt-delivery-time"))
        delay = annotations.get(symbol("x-opt-delivery-delay"))
        if self._artemis and isinstance(at, int):  # RabbitMQ 3.10 ignores both (measured)
            due = now + (at / 1000.0 - time.time())
        elif self._artemis and isinstance(delay, int):
            due = now + delay / 1000.0
        properties = cast(Mapping[str, object], message.properties or {})
        entry = _Entry(queue, encoded, dict(properties), due, self._expires(message, now))
        queue.entries.append(entry)
        self._pump(queue)

    def _expires(self, message: Message, now: float) -> float | None:
        """When a stored message expires, on the peer's clock (proton gives both in seconds)."""
        if self._artemis and message.expiry_time > 0:
            return now + (message.expiry_time - time.time())
        if message.ttl > 0:
            return now + message.ttl
        return None

    # -- delivering -------------------------------------------------------------------------------
    def _pump(self, queue: _Queue) -> None:
        """Deliver what is due to consumers with credit, and wake up for what is scheduled."""
        if not _has_credit(queue):
            return  # new credit pumps again
        now = self._clock()
        earliest: float | None = None
        for entry in list(queue.entries):
            if entry.holder is not None or entry.txn is not None:
                continue
            if entry.due > now:
                earliest = entry.due if earliest is None else min(earliest, entry.due)
            elif entry.expires is not None and entry.expires <= now:
                self.outcomes.expire(entry)
            elif (consumer := self._choose(queue, entry)) is not None:
                self._deliver(consumer, entry)
                if not _has_credit(queue):
                    return
        for consumer in queue.consumers:
            if consumer.link.drain_mode and consumer.link.credit > 0:
                consumer.link.drained()
        if earliest is not None and not self._tick_pending and not self.stopping:
            self._tick_pending = True
            self.container.schedule(min(earliest - now, _TICK_S), self)

    def _choose(self, queue: _Queue, entry: _Entry) -> _Consumer | None:
        count = len(queue.consumers)
        for step in range(count):
            consumer = queue.consumers[(queue.turn + step) % count]
            if consumer.link.credit <= 0 or consumer in entry.refused_by:
                continue
            if consumer.selector is None or consumer.selector(entry.properties):
                queue.turn = (queue.turn + step + 1) % count
                return consumer
        return None

    def _deliver(self, consumer: _Consumer, entry: _Entry) -> None:
        message = Message()
        message.decode(entry.encoded)
        message.delivery_count = entry.delivery_count if self._artemis else 0
        message.first_acquirer = not entry.acquired
        entry.acquired = True
        link = consumer.link
        delivery = link.delivery(str(next(self._tags)))
        link.send(message.encode())
        link.advance()
        if link.snd_settle_mode == Link.SND_SETTLED:  # at-most-once: gone once sent
            delivery.settle()
            _remove(entry)
        else:
            entry.holder = consumer
            consumer.in_flight[delivery] = entry

    def on_link_flow(self, event: Any) -> None:
        consumer = self._consumers.get(event.link)
        if consumer is not None:
            self._pump(consumer.queue)

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        link = delivery.link
        if link.is_receiver:
            self.transfers.on_transfer(link, delivery)
        elif link in self._consumers:
            self.outcomes.on_outcome(self._consumers[link], delivery)

    # -- inspection -------------------------------------------------------------------------------
    def messages(self, name: str) -> list[Message]:
        found = self._queues.get(name)
        result = []
        for entry in found.entries if found else []:
            message = Message()
            message.decode(entry.encoded)
            result.append(message)
        return result

    def durable(self, name: str) -> bool | None:
        found = self._queues.get(name)
        return None if found is None else found.durable

    def routing_type(self, name: str) -> str | None:
        if not self._artemis:
            queue = name.removeprefix("/queue/")
            return "anycast" if queue in self._queues else None
        address = self._addresses.get(name)
        if address is None:
            return None
        return "anycast" if address.anycast else "multicast"

    def put_over_stomp(self, name: str, body: bytes, properties: Mapping[str, str]) -> None:
        extra = {"content-length": str(len(body)), "destination": f"/queue/{name}"}
        message = Message(body=body, properties={**properties, **extra}, durable=False)
        if self._artemis:
            self.routing.declare(name, "queue")
        self._store(self._queue(name), message.encode(), message)
