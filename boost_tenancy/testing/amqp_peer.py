"""An in-process AMQP 1.0 broker that behaves as ActiveMQ Artemis 2.44 or RabbitMQ 3.10
(rabbitmq_amqp1_0) do over AMQP 1.0, so the AMQP transport can be tested without a real broker.

Artemis behaviour follows what a real Artemis 2.44.0 did (BROKERS.md, "Measured on a real
Artemis 2.44.0") and, where nothing was measured, Artemis's source (named where used). RabbitMQ
behaviour was measured on RabbitMQ 3.10.8 with python-qpid-proton 0.40: tests/unit/
test_amqp_peer.py runs the same raw scenarios against this model and against that broker.

Expiry: neither delivers a message past its expiry. Artemis reads properties.absolute-expiry-time,
else header.ttl from arrival (AMQPMessage.scanMessageData), and moves an expired message to its
expiry address when one is configured, else drops it; RabbitMQ 3.10 reads header.ttl only (its
per-message TTL; an absolute-expiry-time alone was delivered after it passed, measured here) and
drops an expired message (no dead-letter exchange is modelled).
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import json
import os
import queue as queue_module
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from proton import (
    UNDESCRIBED,
    Array,
    Condition,
    Connection,
    Data,
    Delivery,
    Described,
    Link,
    Message,
    Sender,
    SymbolList,
    Terminus,
    Transport,
    symbol,
    ubyte,
    ulong,
)
from proton.handlers import IOHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.testing.diverts import DivertModel, QueueCount
from boost_tenancy.testing.jms_selector import UnsupportedSelectorError
from boost_tenancy.testing.jms_selector import parse as parse_selector
from boost_tenancy.transports.artemis_management import (
    MANAGEMENT_ADDRESS,
    OPERATION_PROPERTY,
    SUCCEEDED_PROPERTY,
    ManagementError,
)

T = TypeVar("T")

_SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
_AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"
_DECLARED: Final = 0x33
_TRANSACTIONAL_STATE: Final = 0x34
_ACCEPTED: Final = (ulong(0x24), symbol("amqp:accepted:list"))
_DECLARE: Final = (ulong(0x31), symbol("amqp:declare:list"))
_DISCHARGE: Final = (ulong(0x32), symbol("amqp:discharge:list"))
_SELECTOR: Final = (ulong(0x468C00000004), symbol("apache.org:selector-filter:string"))
_TERMINAL: Final = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)
# How often scheduled messages are checked against the clock (an injected clock may jump).
_TICK_S: Final = 0.05


class PeerFlavour(enum.Enum):
    """Which broker the peer behaves as."""

    ARTEMIS = "artemis"
    RABBITMQ = "rabbitmq"


class PeerError(BoostTenancyError):
    """The peer is closed, or its thread failed (the failure is chained)."""


def _symbols(*names: str) -> Array:
    # proton's annotations omit UNDESCRIBED, the descriptor of a plain array
    return Array(cast(Any, UNDESCRIBED), Data.SYMBOL, *map(symbol, names))


@dataclass(frozen=True, slots=True)
class _Profile:
    """What a broker says about itself on the wire."""

    container_id: str
    properties: Mapping[str, str]
    capabilities: tuple[str, ...]
    mechanisms: tuple[str, ...]
    credit: int  # granted to a client's sender link


_PROFILES: Final = {
    PeerFlavour.ARTEMIS: _Profile(
        container_id="",  # Artemis sends its node id, a UUID: one per peer
        properties={"product": "apache-activemq-artemis", "version": "2.44.0"},
        capabilities=("DELAYED_DELIVERY", "ANONYMOUS-RELAY", "SHARED-SUBS"),
        mechanisms=("PLAIN", "ANONYMOUS"),
        credit=1000,  # Artemis's amqpCredits default
    ),
    PeerFlavour.RABBITMQ: _Profile(  # RabbitMQ 3.10.8's open frame and SASL offer, as seen here
        container_id="rabbit@vm",
        properties={
            "cluster_name": "rabbit@vm",
            "copyright": "Copyright (c) 2007-2022 VMware, Inc. or its affiliates.",
            "information": "Licensed under the MPL 2.0. Website: https://rabbitmq.com",
            "platform": "Erlang/OTP 25.2.3",
            "product": "RabbitMQ",
            "version": "3.10.8",
        },
        capabilities=(),
        mechanisms=("ANONYMOUS", "PLAIN", "AMQPLAIN"),
        credit=65536,
    ),
}


# -- the SASL exchange and the sockets ------------------------------------------------------------
def _sasl_frame(code: int, fields: list[Any]) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = data.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


class _SaslGate:
    """Answers the SASL layer before proton's transport sees a connection.

    proton-c's built-in SASL server offers ANONYMOUS only; both brokers also take PLAIN, and a
    client that insists on PLAIN must be able to connect. Any user and password are accepted,
    and a client that starts with the plain AMQP header (no SASL) is let through.
    """

    def __init__(self, mechanisms: tuple[str, ...]) -> None:
        self._mechanisms = mechanisms
        self._buffer = b""
        self._header_seen = False

    @property
    def leftover(self) -> bytes:
        """What the client sent past the SASL exchange: its first AMQP bytes."""
        return self._buffer

    def feed(self, received: bytes) -> tuple[bytes, bool | None]:
        """Take bytes; return the reply and the outcome: None while the exchange goes on, True
        once the client may speak AMQP, False when the connection must be dropped."""
        self._buffer += received
        reply = b""
        if not self._header_seen:
            if len(self._buffer) < 8:
                return reply, None
            header = self._buffer[:8]
            if header == _AMQP_HEADER:
                return reply, True
            self._buffer = self._buffer[8:]
            if header != _SASL_HEADER:
                return _SASL_HEADER, False
            self._header_seen = True
            reply = _SASL_HEADER + _sasl_frame(0x40, [_symbols(*self._mechanisms)])
        if len(self._buffer) < 4 or len(self._buffer) < struct.unpack(">I", self._buffer[:4])[0]:
            return reply, None
        size = struct.unpack(">I", self._buffer[:4])[0]
        frame, self._buffer = self._buffer[:size], self._buffer[size:]
        data = Data()
        data.decode(frame[frame[4] * 4 :])
        data.rewind()
        data.next()
        init = data.get_object()
        ok = (  # sasl-init naming an offered mechanism
            isinstance(init, Described)
            and init.descriptor == 0x41
            and isinstance(init.value, list)
            and bool(init.value)
            and str(init.value[0]) in self._mechanisms
        )
        return reply + _sasl_frame(0x44, [ubyte(0 if ok else 1)]), ok


class _Doorway:
    """Reads an accepted socket until its SASL exchange is done, then hands it to proton."""

    def __init__(self, engine: _Engine, sock: socket.socket) -> None:
        self._engine = engine
        self._sock = sock
        self._gate = _SaslGate(engine.profile.mechanisms)

    def on_selectable_readable(self, event: Any) -> None:
        try:
            received = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            received = b""
        reply, outcome = self._gate.feed(received) if received else (b"", False)
        if reply:
            try:
                self._sock.sendall(reply)  # a few dozen bytes to a fresh socket
            except OSError:
                outcome = False
        if outcome is not None:
            self._engine.doorways.discard(event.selectable)
        if outcome is False:
            event.selectable.terminate()
            event.selectable.update()
        elif outcome is True:
            self._engine.adopt(event.selectable, self._sock, self._gate.leftover)


class _Listener:
    """The listening socket, accepting on the peer's thread."""

    def __init__(self, engine: _Engine, sock: socket.socket) -> None:
        self._engine = engine
        self._sock = sock

    def on_selectable_readable(self, _event: Any) -> None:
        try:
            accepted, _ = self._sock.accept()
        except OSError:
            return
        accepted.setblocking(False)
        accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._engine.sockets.append(accepted)
        self._engine.doorways.add(self._engine.watch(_Doorway(self._engine, accepted), accepted))


# -- broker state ---------------------------------------------------------------------------------
@dataclass(eq=False, slots=True)
class _Entry:
    """A message held in a queue."""

    queue: _Queue
    encoded: bytes
    properties: Mapping[str, object]
    due: float
    expires: float | None = None  # on the peer's clock; never delivered from then on
    delivery_count: int = 0  # counted failed deliveries (Artemis)
    losses: int = 0  # lost connections that held it unsettled (Artemis counts every other one)
    acquired: bool = False  # delivered before: first-acquirer is false from then on
    holder: _Consumer | None = None  # in flight to this consumer
    txn: _Txn | None = None  # accepted in this transaction; removed when it commits
    refused_by: set[_Consumer] = field(default_factory=set)  # modified{undeliverable-here}


@dataclass(eq=False, slots=True)
class _Queue:
    name: str
    address: str
    durable: bool = True  # Artemis: by its address settings; RabbitMQ: as the declaring link said
    entries: list[_Entry] = field(default_factory=list)
    consumers: list[_Consumer] = field(default_factory=list)
    turn: int = 0  # round robin


@dataclass(eq=False, slots=True)
class _Address:
    """An Artemis address: an anycast queue of its own name and/or multicast subscriptions."""

    anycast: bool = False
    multicast: bool = False
    subscriptions: list[_Queue] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class _Conn:
    connection: Connection
    sock: socket.socket
    closed_cleanly: bool = False
    txns: dict[bytes, _Txn] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class _Consumer:
    link: Sender
    queue: _Queue
    selector: Callable[[Mapping[str, object]], bool] | None
    conn: _Conn
    subscription: bool = False  # a temporary multicast subscription, gone with the link
    in_flight: dict[Delivery, _Entry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a client's sender link sends: an address, or None for the anonymous relay."""

    address: str | None
    capability: str | None  # "queue", "topic" or None


@dataclass(eq=False, slots=True)
class _Txn:
    id: bytes
    sends: list[tuple[_Target, bytes, Message]] = field(default_factory=list)
    accepted: list[tuple[_Consumer, Delivery, _Entry]] = field(default_factory=list)


class _Refusal(Exception):  # noqa: N818 - an answer to an attach, not a failure of the peer
    """An attach refused: by a detach with an error (Artemis) or by ending the session
    (RabbitMQ 3.10, measured: it never answers the attach)."""

    def __init__(self, condition: str, description: str, end_session: bool = False) -> None:
        super().__init__(description)
        self.condition = Condition(condition, description)
        self.end_session = end_session


def _has_credit(queue: _Queue) -> bool:
    return any(consumer.link.credit > 0 for consumer in queue.consumers)


def _binary(value: object) -> bytes:
    """A binary field as bytes (proton hands them out as memoryviews)."""
    return bytes(value) if isinstance(value, bytes | memoryview) else b""


def _data_object(data: Data) -> Any:
    data.rewind()
    return data.get_object() if data.next() is not None else None


def _durable(terminus: Terminus) -> bool:
    """rabbit_amqp1_0_link_util:durable/1: a terminus durability other than none (configuration,
    unsettled-state) declares a durable queue."""
    return bool(terminus.durability != Terminus.NONDURABLE)


def _capability(terminus: Terminus) -> str | None:
    """The routing capability a terminus asks for: "topic", "queue" or None."""
    found = _data_object(terminus.capabilities)
    if isinstance(found, Array):
        found = found.elements
    names = found if isinstance(found, list) else [found]
    return next((c for c in ("topic", "queue") if symbol(c) in names), None)


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
        self._diverts = DivertModel(self._queues.__contains__, self._make_queue, self._queue_counts)
        self.manage = True  # the user's manage permission on activemq.management

    def _make_queue(self, name: str) -> None:
        self._declare(name, "queue")

    def _queue_counts(self) -> list[QueueCount]:
        """Every queue as Artemis's listQueues counts it."""
        now = self._clock()
        return [
            QueueCount(
                name=queue.name,
                waiting=sum(1 for e in queue.entries if e.holder is None and e.due <= now),
                in_flight=sum(1 for e in queue.entries if e.holder is not None),
                scheduled=sum(1 for e in queue.entries if e.holder is None and e.due > now),
                consumers=len(queue.consumers),
            )
            for queue in self._queues.values()
        ]

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
        self.drop_connections()
        for selectable in [self.listening, *self.doorways]:
            selectable.terminate()
            selectable.update()
        injector.close()

    def on_timer_task(self, _event: Any) -> None:
        self._tick_pending = False
        if not self.stopping:
            for queue in self._all_queues():
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
            self._end_connection(conn, counted=False)
        event.connection.close()

    def on_transport_closed(self, event: Any) -> None:
        conn = self._conns.pop(event.connection, None) if event.connection else None
        if conn is not None and not conn.closed_cleanly:
            # Artemis: "we don't decrement delivery count if the client failed", but its AMQP
            # sessions close their consumers as a clean close, racing the failure: measured on
            # 2.44, a delivery left by two lost connections came back counted 0, 1, 1, and one
            # that killed its worker 1, 1, 2, 2, 3. The model counts every other loss, the first
            # of them included.
            self._end_connection(conn, counted=self._artemis)

    def on_session_remote_close(self, event: Any) -> None:
        self._end_links(lambda link: link.session == event.session)
        event.session.close()

    def on_link_remote_close(self, event: Any) -> None:
        self._end_links(lambda link: link == event.link)
        if self._artemis:
            event.link.close()
        else:
            event.link.detach()  # RabbitMQ 3.10 answers a closing detach without closed=true

    def on_link_remote_detach(self, event: Any) -> None:
        self._end_links(lambda link: link == event.link)
        event.link.detach()

    def _end_connection(self, conn: _Conn, counted: bool) -> None:
        self._end_links(lambda link: link.connection == conn.connection, counted)
        for txn in list(conn.txns.values()):
            self._discharge(conn, txn, fail=True)

    def _end_links(self, which: Callable[[Link], bool], counted: bool = False) -> None:
        for link in [link for link in self._producers if which(link)]:
            del self._producers[link]
        for link in [link for link in self._coordinators if which(link)]:
            del self._coordinators[link]
        ended = [self._consumers.pop(link) for link in list(self._consumers) if which(link)]
        for consumer in ended:  # all of them first: none may take what another gives back
            consumer.queue.consumers.remove(consumer)
            if consumer.subscription:
                self._addresses[consumer.queue.address].subscriptions.remove(consumer.queue)
        for consumer in ended:
            for entry in consumer.in_flight.values():
                if entry.txn is None:  # what a transaction accepted waits for its discharge
                    entry.holder = None
                    if counted:
                        entry.losses += 1
                        if entry.losses % 2 == 1:
                            self._count_failure(entry)
            self._pump(consumer.queue)

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        try:
            if link.is_receiver:
                self._attach_producer(link, self._conns[link.connection])
            else:
                self._attach_consumer(link, self._conns[link.connection])
        except _Refusal as refusal:
            self._refuse(link, refusal)

    def _refuse(self, link: Link, refusal: _Refusal) -> None:
        if refusal.end_session:
            session = link.session
            self._end_links(lambda other: other.session == session)
            session.condition = refusal.condition
            session.close()
            return
        # Artemis (AMQPSessionContext.addSender): attach with a null terminus, then detach
        (link.target if link.is_receiver else link.source).type = Terminus.UNSPECIFIED
        link.condition = refusal.condition
        link.open()
        link.close()

    def _attach_producer(self, link: Link, conn: _Conn) -> None:
        remote = link.remote_target
        if remote.type == Terminus.COORDINATOR:
            if not self._artemis:  # measured on RabbitMQ 3.10.8
                raise _Refusal("amqp:not-implemented", "Transactions not supported", True)
            link.target.type = Terminus.COORDINATOR
            # the capabilities AMQPSessionContext.addTransactionHandler answers with
            link.target.capabilities.put_object(
                _symbols(
                    "amqp:local-transactions", "amqp:multi-txns-per-ssn", "amqp:multi-ssns-per-txn"
                )
            )
            self._coordinators[link] = conn
        elif self._artemis:
            target = _Target(remote.address, _capability(remote))
            if target.address is not None:  # None: the anonymous relay
                self._declare(target.address, target.capability)
            self._producers[link] = target
            link.target.copy(remote)
        else:
            queue = self._rabbit_queue(remote.address, _durable(remote))
            self._producers[link] = _Target(queue.name, None)
            link.target.copy(remote)
        link.source.copy(link.remote_source)
        link.open()
        link.flow(self.profile.credit)

    def _attach_consumer(self, link: Link, conn: _Conn) -> None:
        source = link.remote_source
        if source.dynamic:
            raise _Refusal(
                "amqp:not-implemented", "no dynamic nodes in the peer", not self._artemis
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
        if self._artemis:
            if source.address is None:
                raise _Refusal("amqp:not-found", "Source address not set")
            queue, subscription = self._consumer_queue(source.address, _capability(source))
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
            queue = self._rabbit_queue(source.address, _durable(source))
            link.source.outcomes.clear()
            link.source.outcomes.put_object(
                _symbols("amqp:accepted:list", "amqp:rejected:list", "amqp:released:list")
            )
        consumer = _Consumer(cast(Sender, link), queue, selector, conn, subscription)
        self._consumers[link] = consumer
        queue.consumers.append(consumer)
        link.open()
        self._pump(queue)

    # -- addresses and queues ---------------------------------------------------------------------
    def _queue(self, name: str, address: str | None = None, durable: bool = True) -> _Queue:
        if name not in self._queues:
            self._queues[name] = _Queue(name, address or name, durable)
        return self._queues[name]

    def _rabbit_queue(self, address: str | None, durable: bool) -> _Queue:
        """RabbitMQ 3.10's answer to an address (measured): /queue/NAME and a bare NAME are queue
        NAME, declared if missing, durable when the link's terminus is (a queue declared without
        it is transient: a restart drops it and what it holds); other forms end the session."""
        if address is None:
            raise _Refusal(
                "amqp:invalid-field", "Attach rejected: {address_not_utf8_string,undefined}", True
            )
        if not address.startswith("/"):
            return self._queue(address, durable=durable)
        kind, _, name = address[1:].partition("/")
        if kind == "queue" and name and "/" not in name:
            return self._queue(name, durable=durable)
        if kind == "queue":
            rest = address.removeprefix("/queue")
            shown = f'"{rest}"' if rest else "[]"
            reason = f"Attach rejected: {{invalid_destination,queue,{shown}}}"
            raise _Refusal("amqp:invalid-field", reason, True)
        if kind in ("exchange", "topic", "amq"):
            raise _Refusal("amqp:not-implemented", f"{address}: address form not modelled", True)
        reason = f'Attach rejected: {{unknown_destination,"{address}"}}'
        raise _Refusal("amqp:invalid-field", reason, True)

    def _declare(self, name: str, capability: str | None) -> _Address:
        """Artemis's auto-creation: the queue capability makes an anycast queue of the address's
        name; without it a new address is MULTICAST (the default routing type, measured)."""
        address = self._addresses.setdefault(name, _Address())
        if capability == "queue":
            address.anycast = True
            self._queue(name)
        elif not address.anycast:
            address.multicast = True
        return address

    def _consumer_queue(self, name: str, capability: str | None) -> tuple[_Queue, bool]:
        """The queue a receiver reads, picked as DefaultSenderController.init does."""
        address = self._addresses.get(name) or self._declare(name, capability)
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
        return self._queue(name), False

    def _all_queues(self) -> Iterator[_Queue]:
        yield from self._queues.values()
        for address in self._addresses.values():
            yield from address.subscriptions

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

    def _route(self, target: _Target, encoded: bytes, message: Message) -> None:
        name = target.address or message.address
        if not self._artemis or name is None:
            self._store(self._queue(str(name)), encoded, message)
            return
        capability = target.capability
        if target.address is None:  # anonymous relay: the JMS destination type decides
            kind = cast(Mapping[object, object], message.annotations or {}).get(
                symbol("x-opt-jms-dest")
            )
            capability = {0: "queue", 2: "queue", 1: "topic", 3: "topic"}.get(cast(int, kind))
        if name == MANAGEMENT_ADDRESS:  # handled before any routing (ServerSessionImpl.send)
            self._manage(message)
            return
        address = self._addresses.get(name) or self._declare(name, capability)
        properties = cast(Mapping[str, object], message.properties or {})
        diverted = None if capability == "topic" else self._diverts.route(name, properties)
        if diverted is not None:
            for divert, forward in diverted:
                copy = Message()
                copy.decode(encoded)
                annotations: dict[Any, Any] = dict(copy.annotations or {})
                annotations[symbol("x-opt-ORIG-ADDRESS")] = name
                annotations[symbol("x-opt-ORIG-QUEUE")] = divert
                copy.annotations = annotations
                self._store(self._queue(forward), copy.encode(), copy)
            return
        if capability != "topic" and address.anycast:
            self._store(self._queue(name), encoded, message)
        if capability != "queue":  # none at all: the message is dropped (measured)
            for subscription in list(address.subscriptions):
                self._store(subscription, encoded, message)

    def _manage(self, request: Message) -> None:
        """A management request (testing/diverts.py answers it); the reply goes to reply_to when
        that names an existing anycast address, with the request's correlation id, else nowhere."""
        properties = cast(Mapping[str, object], request.properties or {})
        try:
            params = json.loads(str(request.body))
            if not isinstance(params, list):
                raise ManagementError(f"parameters are not a JSON array: {request.body!r}")
            result = self._diverts.operate(str(properties.get(OPERATION_PROPERTY)), params)
            succeeded, body = True, None if result is None else json.dumps([result])
        except (ManagementError, ValueError, KeyError) as exc:
            succeeded, body = False, json.dumps([str(exc)])
        address = self._addresses.get(str(request.reply_to))
        if request.reply_to is None or address is None or not address.anycast:
            return
        reply = Message(
            body=body,
            properties={SUCCEEDED_PROPERTY: succeeded},
            correlation_id=request.correlation_id or request.id,
        )
        self._store(self._queue(str(request.reply_to)), reply.encode(), reply)

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
                self._expire(entry)
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
            self._remove(entry)
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
            self._on_transfer(link, delivery)
        elif link in self._consumers:
            self._on_outcome(self._consumers[link], delivery)

    # -- outcomes ---------------------------------------------------------------------------------
    def _on_outcome(self, consumer: _Consumer, delivery: Delivery) -> None:
        """A consumer's disposition, as ProtonServerSenderContext handles it (Artemis) or as
        RabbitMQ 3.10 was seen to."""
        entry = consumer.in_flight.get(delivery)
        state = delivery.remote_state
        if entry is None or entry.txn is not None:
            return
        if state == _TRANSACTIONAL_STATE:
            self._accept_in_txn(consumer, delivery, entry)
            return
        if state not in _TERMINAL and (self._artemis or not delivery.settled):
            # Artemis ignores a settlement without an outcome: the message stays with the
            # consumer until its link ends
            return
        if not self._artemis and state not in (
            Delivery.ACCEPTED,
            Delivery.REJECTED,
            Delivery.RELEASED,
        ):
            # RabbitMQ 3.10 takes a modified outcome, or a settlement without one, as a protocol
            # error and ends the session; its unacknowledged messages are requeued (measured)
            flags = f"{delivery.remote.failed},{delivery.remote.undeliverable}".lower()
            shown = f"{{'v1_0.modified',{flags},undefined}}" if state else "undefined"
            refusal = _Refusal("amqp:invalid-field", f"Unrecognised state: {shown}", True)
            self._refuse(consumer.link, refusal)
            return
        del consumer.in_flight[delivery]
        delivery.settle()
        entry.holder = None
        if state == Delivery.ACCEPTED:
            self._remove(entry)
        elif state == Delivery.REJECTED and self._artemis:
            self._dead_letter(entry)
        elif state == Delivery.REJECTED:
            self._remove(entry)  # RabbitMQ 3.10 (no dead-letter exchange) drops it (measured)
        elif state == Delivery.MODIFIED:
            if delivery.remote.undeliverable:
                entry.refused_by.add(consumer)
            if delivery.remote.failed:
                self._count_failure(entry)
        # released: back at its place, not counted
        self._pump(entry.queue)

    def _count_failure(self, entry: _Entry) -> None:
        entry.delivery_count += 1
        if entry.delivery_count >= self._max_attempts:
            self._dead_letter(entry)

    def _remove(self, entry: _Entry) -> None:
        if entry in entry.queue.entries:
            entry.queue.entries.remove(entry)

    def _dead_letter(self, entry: _Entry) -> None:
        self._remove(entry)
        message = Message()
        message.decode(entry.encoded)
        annotations = dict(cast(Mapping[object, object], message.annotations or {}))
        annotations[symbol("x-opt-ORIG-QUEUE")] = entry.queue.name
        annotations[symbol("x-opt-ORIG-ADDRESS")] = entry.queue.address
        message.annotations = cast(Any, annotations)
        self._declare(self._dla, "queue")
        self._store(self._queue(self._dla), message.encode(), message)

    def _expire(self, entry: _Entry) -> None:
        """Artemis (QueueImpl.expire, makeCopy): to the expiry address without an expiry, with
        the x-opt-ORIG-* and x-opt-ACTUAL-EXPIRY annotations, or dropped without one; RabbitMQ:
        dropped."""
        self._remove(entry)
        if not self._artemis or self._expiry_address is None:
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
        self._declare(self._expiry_address, "queue")
        self._store(self._queue(self._expiry_address), message.encode(), message)

    # -- incoming transfers and transactions ------------------------------------------------------
    def _on_transfer(self, link: Link, delivery: Delivery) -> None:
        if not delivery.readable or delivery.partial:
            return
        encoded = cast(bytes, link.recv(delivery.pending))
        link.advance()
        if link.credit < self.profile.credit // 2:
            link.flow(self.profile.credit - link.credit)
        if link in self._coordinators:
            self._on_control(self._coordinators[link], delivery, encoded)
            return
        target = self._producers.get(link)
        if target is None:
            return
        message = Message()
        message.decode(encoded)
        if delivery.remote_state == _TRANSACTIONAL_STATE:
            txn_id = _binary(next(iter(delivery.remote.data or []), None))
            txn = self._conns[link.connection].txns.get(txn_id)
            if txn is None:
                _settle(delivery, Delivery.REJECTED, Condition("amqp:transaction:unknown-id"))
                return
            txn.sends.append((target, encoded, message))
            # held until the discharge; the answer is transactional-state{txn-id, accepted}
            _settle(delivery, _TRANSACTIONAL_STATE, data=[txn_id, Described(_ACCEPTED[0], [])])
        elif target.address is None and message.address is None:
            _settle(delivery, Delivery.REJECTED, Condition("amqp:not-found", "no address"))
        elif self._artemis and not self.manage and target.address == MANAGEMENT_ADDRESS:
            refused = (
                "AMQ229032: User: guest does not have permission='MANAGE' on address "
                f"{MANAGEMENT_ADDRESS}"
            )
            _settle(delivery, Delivery.REJECTED, Condition("amqp:unauthorized-access", refused))
        else:
            self._route(target, encoded, message)
            _settle(delivery, Delivery.ACCEPTED)

    def _on_control(self, conn: _Conn, delivery: Delivery, encoded: bytes) -> None:
        control = Message()
        control.decode(encoded)
        body = control.body
        descriptor = body.descriptor if isinstance(body, Described) else None
        fields = body.value if isinstance(body, Described) and isinstance(body.value, list) else []
        if descriptor in _DECLARE:
            txn_id = struct.pack(">Q", next(self._txn_ids))
            conn.txns[txn_id] = _Txn(txn_id)
            _settle(delivery, _DECLARED, data=[txn_id])
        elif descriptor in _DISCHARGE and fields and (txn := conn.txns.get(_binary(fields[0]))):
            self._discharge(conn, txn, fail=len(fields) > 1 and bool(fields[1]))
            _settle(delivery, Delivery.ACCEPTED)
        else:
            _settle(delivery, Delivery.REJECTED, Condition("amqp:transaction:unknown-id"))

    def _accept_in_txn(self, consumer: _Consumer, delivery: Delivery, entry: _Entry) -> None:
        data = delivery.remote.data or []
        txn = consumer.conn.txns.get(_binary(data[0])) if data else None
        outcome = data[1] if len(data) > 1 else None
        if txn is not None and isinstance(outcome, Described) and outcome.descriptor in _ACCEPTED:
            entry.txn = txn
            txn.accepted.append((consumer, delivery, entry))
            if not delivery.settled:  # Artemis confirms with transactional-state{txn, accepted}
                delivery.local.data = cast(Any, [txn.id, Described(_ACCEPTED[0], [])])
                delivery.update(_TRANSACTIONAL_STATE)

    def _discharge(self, conn: _Conn, txn: _Txn, fail: bool) -> None:
        del conn.txns[txn.id]
        if not fail:
            for target, encoded, message in txn.sends:
                self._route(target, encoded, message)
        for consumer, delivery, entry in txn.accepted:
            entry.txn = None
            consumer.in_flight.pop(delivery, None)
            delivery.settle()
            entry.holder = None
            if fail:
                self._pump(entry.queue)  # deliverable again, not counted
            else:
                self._remove(entry)

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
            self._declare(name, "queue")
        self._store(self._queue(name), message.encode(), message)


def _settle(
    delivery: Delivery, state: int, condition: Condition | None = None, data: Any = None
) -> None:
    """Answer a transfer with an outcome, or with another delivery state and its fields."""
    if condition is not None:
        delivery.local.condition = condition
    if data is not None:
        delivery.local.data = data
    delivery.update(state)
    delivery.settle()


class AmqpPeer:
    """An AMQP 1.0 broker on 127.0.0.1 behaving as Artemis 2.44 or RabbitMQ 3.10 do.

    Listening once constructed. A proton Container runs it on a daemon thread of its own; the
    inspection methods run on that thread and wait for the answer.

    max_delivery_attempts and dead_letter_address are Artemis's address settings: a message
    that failed (modified{delivery-failed}, or its consumer's connection was lost) that many
    times moves to the dead-letter address. expiry_address, Artemis's too: where an expired
    message goes (None: dropped, as without one). clock: what scheduled deliveries and expiries
    are due by.
    """

    def __init__(
        self,
        flavour: PeerFlavour = PeerFlavour.ARTEMIS,
        *,
        max_delivery_attempts: int = 10,
        dead_letter_address: str = "DLA",
        expiry_address: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        manage: bool = True,
    ) -> None:
        """manage: whether its user has Artemis's manage permission; without it a request to
        activemq.management is rejected with unauthorized-access and answered by no reply
        (ServerSessionImpl.handleManagementMessage, ProtonServerReceiverContext)."""
        self.flavour = flavour
        self._engine = _Engine(
            flavour, max_delivery_attempts, dead_letter_address, clock, expiry_address
        )
        self._engine.manage = manage
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self._port: int = self._listener.getsockname()[1]
        self._container = Container(self._engine)
        self._engine.container = self._container
        self._injector = EventInjector()
        self._container.selectable(self._injector)
        listener = _Listener(self._engine, self._listener)
        self._engine.listening = self._engine.watch(listener, self._listener)
        self._lock = threading.Lock()
        self._closed = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"amqp-peer-{self._port}")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        try:
            self._container.run()
        except BaseException as exc:  # kept, and raised to whoever uses the peer next
            self._failure = exc

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def connections_opened(self) -> int:
        """Connections accepted so far (past SASL)."""
        return self._call(lambda: self._engine.connections_opened)

    def messages(self, queue: str) -> list[Message]:
        """The messages held in a queue, in order: ready, scheduled and in flight."""
        return self._call(lambda: self._engine.messages(queue))

    def depth(self, queue: str) -> int:
        return len(self.messages(queue))

    def durable(self, queue: str) -> bool | None:
        """Whether the queue would outlive a restart of the broker; None: no such queue."""
        return self._call(lambda: self._engine.durable(queue))

    def routing_type(self, address: str) -> str | None:
        """'anycast' (the address has its queue), 'multicast', or None: no such address."""
        return self._call(lambda: self._engine.routing_type(address))

    def put_over_stomp(self, queue: str, body: bytes, properties: Mapping[str, str]) -> None:
        """Store a message as Artemis hands a STOMP-sent one to an AMQP reader (measured): a data
        body, plus application-properties content-length and destination."""
        self._call(lambda: self._engine.put_over_stomp(queue, body, properties))

    def drop_connections(self) -> None:
        """Close every client socket without an AMQP close, as a network failure would."""
        self._call(self._engine.drop_connections)

    def close(self) -> None:
        """Stop listening, drop every connection and join the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._thread.is_alive():
            self._post(lambda: self._engine.shutdown(self._injector))
            self._thread.join(timeout=5)
        for sock in (self._listener, *self._engine.sockets):
            sock.close()
        for fd in self._injector.pipe:  # EventInjector.close leaves its pipe open
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._thread.is_alive():
            raise PeerError("the AMQP peer's thread did not stop")
        if self._failure is not None:
            raise PeerError(f"the AMQP peer's thread failed: {self._failure!r}") from self._failure

    def __enter__(self) -> AmqpPeer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _post(self, call: Callable[[], None]) -> None:
        self._engine.calls.put(call)
        self._injector.trigger(ApplicationEvent("peer_call"))

    def _call(self, function: Callable[[], T]) -> T:
        if threading.current_thread() is self._thread:
            return function()
        if self._closed:
            raise PeerError("the AMQP peer is closed")
        result: Future[T] = Future()

        def run() -> None:
            try:
                result.set_result(function())
            except BaseException as exc:  # handed to the calling thread
                result.set_exception(exc)

        self._post(run)
        while True:
            try:
                return result.result(timeout=0.1)
            except TimeoutError:
                if not self._thread.is_alive():
                    raise PeerError("the AMQP peer's thread has stopped") from self._failure
