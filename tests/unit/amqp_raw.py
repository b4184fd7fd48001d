"""Raw python-qpid-proton clients for the AMQP peer's tests: a BlockingConnection with the few
moves the tests make (never the project's transport), and a client process that dies holding a
message."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from proton import Delivery, Described, Link, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Filter, LinkOption, Selector
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

REAL_RABBITMQ_URL = os.environ.get("BOOST_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672")


class Capability(LinkOption):
    """A source capability on a receiver, a target capability on a sender ("queue", "topic")."""

    def __init__(self, name: str) -> None:
        self.name = name

    def apply(self, link: Link) -> None:
        terminus = link.source if link.is_receiver else link.target
        terminus.capabilities.put_object(symbol(self.name))


class Collector(MessagingHandler):
    """Keeps what a receiver link gets, unsettled; grants no credit of its own."""

    def __init__(self) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.received: list[tuple[Message, Delivery]] = []

    def on_message(self, event: Any) -> None:
        self.received.append((event.message, event.delivery))

    def bodies(self) -> list[object]:
        return [message.body for message, _ in self.received]


def data_object(data: Any) -> Any:
    """The value a proton Data (a terminus's filter, capabilities, outcomes) holds."""
    data.rewind()
    return data.get_object() if data.next() is not None else None


def selector_filter(text: str) -> dict[symbol, Described]:
    return {symbol("selector"): Described(symbol("apache.org:selector-filter:string"), text)}


class Client:
    """One connection of a raw proton client; link names are unique, as brokers require."""

    def __init__(self, url: str, **options: Any) -> None:
        self.connection = BlockingConnection(url, timeout=5, **options)

    def sender(self, address: str | None, capability: str | None = None) -> BlockingSender:
        options = [Capability(capability)] if capability else None
        return self.connection.create_sender(address, name=_name(), options=options)

    def receiver(
        self,
        address: str,
        capability: str | None = None,
        *,
        selector: str | None = None,
        filters: Mapping[symbol, Described] | None = None,
        handler: Collector | None = None,
        credit: int | None = None,
    ) -> BlockingReceiver:
        options: list[LinkOption] = [Capability(capability)] if capability else []
        if selector is not None:
            options.append(Selector(selector))
        if filters is not None:
            options.append(Filter(dict(filters)))
        return self.connection.create_receiver(
            address, credit=credit, handler=handler, name=_name(), options=options
        )

    def attach(
        self, address: str | None, *, receiving: bool, options: list[LinkOption] | None = None
    ) -> Link:
        """A link whose attach is not waited for (a refused one may never be answered)."""
        container, conn = self.connection.container, self.connection.conn
        create = container.create_receiver if receiving else container.create_sender
        return create(conn, address, name=_name(), options=options)

    def send(self, address: str, *bodies: object, capability: str | None = None) -> None:
        sender = self.sender(address, capability)
        for body in bodies:
            sender.send(Message(body=body, durable=True))

    def wait(self, predicate: Callable[[], object], timeout: float = 3.0) -> bool:
        """Run the connection's events until predicate holds or timeout passes."""
        try:
            self.connection.wait(lambda: bool(predicate()), timeout=timeout)
        except Exception:  # a timeout or a disconnect: the predicate decides
            return bool(predicate())
        return True

    def pump(self, seconds: float = 0.1) -> None:
        """Run the connection's events for a while (dispositions go out, frames come in)."""
        self.wait(lambda: False, timeout=seconds)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # after a test the broker may be gone
            self.connection.close()


def receive(receiver: BlockingReceiver, timeout: float = 2.0) -> Message | None:
    try:
        return receiver.receive(timeout=timeout)
    except Exception:  # proton's Timeout, or the link went away
        return None


def settle(
    receiver: BlockingReceiver,
    state: int | None,
    *,
    failed: bool = False,
    undeliverable: bool = False,
) -> None:
    """Settle the oldest received message with an outcome (None: settle without one)."""
    delivery = receiver.fetcher.unsettled[0]
    delivery.local.failed = failed
    delivery.local.undeliverable = undeliverable
    receiver.settle(state)


def die_holding(url: str, address: str) -> str:
    """In a child process: receive one message from address, leave it unsettled and be killed
    (SIGKILL, no AMQP close). Returns the body the child got."""
    code = (
        "import os, signal, uuid\n"
        "from proton.utils import BlockingConnection\n"
        f"c = BlockingConnection({url!r}, timeout=5)\n"
        f"r = c.create_receiver({address!r}, name=uuid.uuid4().hex)\n"
        "print(r.receive(timeout=5).body, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    return done.stdout.strip()


def _name() -> str:
    return uuid.uuid4().hex
