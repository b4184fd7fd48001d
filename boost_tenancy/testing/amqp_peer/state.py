"""The in-process AMQP peer's broker state: messages held in queues, Artemis addresses, client
connections, consumers, senders' targets and transactions."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from proton import Connection, Delivery, Message, Sender


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
    crashed: bool = False  # RabbitMQ 3.10: it refused a message; nothing more is taken on it


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


def _has_credit(queue: _Queue) -> bool:
    return any(consumer.link.credit > 0 for consumer in queue.consumers)


def _remove(entry: _Entry) -> None:
    """Take an entry out of its queue, if it is still there."""
    if entry in entry.queue.entries:
        entry.queue.entries.remove(entry)
