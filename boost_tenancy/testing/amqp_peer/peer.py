"""The in-process AMQP peer's public face: AmqpPeer listens on 127.0.0.1, runs its engine on a
thread of its own, and answers inspection calls from other threads."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import TypeVar

from proton import Message
from proton.reactor import ApplicationEvent, Container, EventInjector

from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.testing.amqp_peer.engine import REFUSAL_CLOSE_S, _Engine
from boost_tenancy.testing.amqp_peer.profiles import PeerFlavour
from boost_tenancy.testing.amqp_peer.sockets import _Listener

T = TypeVar("T")


class PeerError(BoostTenancyError):
    """The peer is closed, or its thread failed (the failure is chained)."""


class AmqpPeer:
    """An AMQP 1.0 broker on 127.0.0.1 behaving as Artemis 2.44 or RabbitMQ 3.10 do.

    Listening once constructed. A proton Container runs it on a daemon thread of its own; the
    inspection methods run on that thread and wait for the answer.

    Artemis behaviour follows what a real Artemis 2.44.0 did (BROKERS.md, "Measured on a real
    Artemis 2.44.0") and, where nothing was measured, Artemis's source (named where used).
    RabbitMQ behaviour was measured on RabbitMQ 3.10.8 with python-qpid-proton 0.40: tests/unit/
    test_amqp_peer.py runs the same raw scenarios against this model and against that broker.

    Expiry: neither delivers a message past its expiry. Artemis reads
    properties.absolute-expiry-time, else header.ttl from arrival (AMQPMessage.scanMessageData),
    and moves an expired message to its expiry address when one is configured, else drops it;
    RabbitMQ 3.10 reads header.ttl only (its per-message TTL; an absolute-expiry-time alone was
    delivered after it passed, measured here) and drops an expired message (no dead-letter
    exchange is modelled).

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

    def limit_length(
        self, queue: str, max_length: int, *, close_after_s: float = REFUSAL_CLOSE_S
    ) -> None:
        """RabbitMQ: give queue a max-length with overflow reject-publish. A message sent to it
        full ends the sending connection close_after_s later, as RabbitMQ 3.10.8 does (measured:
        3 s), every other send on that connection unconfirmed."""
        if self.flavour is not PeerFlavour.RABBITMQ:
            raise PeerError("a queue length limit is modelled for RabbitMQ 3.10 only")

        def limit() -> None:
            self._engine.length_limits[queue] = max_length
            self._engine.refusal_close_s = close_after_s

        self._call(limit)

    def fill_address(self, address: str) -> None:
        """Artemis: address is full under address-full-policy FAIL. A sender attached to it from
        now on gets no credit, as Artemis 2.44 gives none while the address refuses (ARTEMIS-5645,
        measured): a message sent there never leaves the client."""
        if self.flavour is not PeerFlavour.ARTEMIS:
            raise PeerError("a full address without credit is modelled for Artemis only")
        self._call(lambda: self._engine.full_addresses.add(address))

    def free_address(self, address: str) -> None:
        """Artemis: address takes messages again; its senders get credit again."""

        def free() -> None:
            engine = self._engine
            engine.full_addresses.discard(address)
            for link, target in engine._producers.items():
                if target.address == address and link.credit <= 0:
                    link.flow(engine.profile.credit)

        self._call(free)

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
