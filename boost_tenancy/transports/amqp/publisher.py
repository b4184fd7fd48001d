"""The connection a transport sends on where the broker ends a whole connection when it refuses
one message (AmqpFlavour.refused_send_ends_connection: RabbitMQ 3.x).

On the connection of its subscriptions, one tenant's message refused (its queue at max-length
with overflow reject-publish) sent every delivery of every tenant back to the broker and made
the transport reconnect; measured on RabbitMQ 3.10.8, a second tenant's 200 messages were
handled 57 times over 40 s, 16 of them, instead of 200 in about a second. On a connection of its
own, a refusal ends only the sends under way there. Each of those failed with the connection,
and only one of them may be the refused one, so each is sent again alone, with no other send
under way: one refused again is refused (its caller settles its message), the rest are stored
(a send whose confirmation the loss took may be stored twice, with the same boostMessageId).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence

from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.transports.amqp import calls
from boost_tenancy.transports.amqp.connection import AmqpConnection
from boost_tenancy.transports.amqp.encoding import EncodedMessage
from boost_tenancy.transports.amqp.flavour import REFUSAL_ENDS_CONNECTION
from boost_tenancy.transports.amqp.settings import AmqpSettings
from boost_tenancy.transports.lost_sends import (
    ConnectionLostError,
    RefusingQueues,
    SendGate,
    connection_wait_s,
)


class RefusedError(TransportError):
    """The connection ended while this send was the only one under way on it: most likely the
    broker refused it (REFUSAL_ENDS_CONNECTION)."""


class Publisher:
    """Connections for sends alone, and the rule above for what a loss of one failed.

    A refusal ends the connection only some 3 s after it (measured on RabbitMQ 3.10.8), and
    every send on that connection waits meanwhile. So a queue that refused a message sent alone
    is remembered, and what is sent to it from then on goes on a second connection: a tenant's
    full queue stalls that connection, never the sends of the others."""

    def __init__(self, settings: AmqpSettings) -> None:
        self._settings = dataclasses.replace(settings, reconnect_wait_s=connection_wait_s(settings))
        self._main = _Lane(AmqpConnection(self._settings, name="amqp-sender"))
        self._refusing: _Lane | None = None
        self._suspects = RefusingQueues()
        self._lock = threading.Lock()
        """Guards _refusing; never held while waiting on the broker."""
        self._opening = threading.Lock()
        self._stopped = False

    def open(self) -> None:
        calls.open_connection(self._main.engine)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            lanes = [lane for lane in (self._refusing, self._main) if lane is not None]
        for lane in lanes:
            calls.stop(lane.engine)

    def send_each(
        self,
        what: str,
        groups: Sequence[Sequence[tuple[str, EncodedMessage]]],
        *,
        as_queue: bool = True,
        wanted: Callable[[int], bool] = lambda _index: True,
    ) -> list[BaseException | None]:
        """calls.send_each, each group on the lane of its queues: the second connection when
        one of them refused a message before. A group the connection's loss failed is sent
        again alone, on the lane its queues have by then, and fails only if it is refused (or
        lost) again; unless wanted(its index) is false by then (the caller's originals went
        back to the broker with their own connection, and come again): it keeps its loss."""
        errors: list[BaseException | None] = [None] * len(groups)
        alone: list[bool] = [False] * len(groups)
        suspect = self._suspected(groups)
        for on_refusing_lane in (False, True):
            indexes = [i for i, is_suspect in enumerate(suspect) if is_suspect is on_refusing_lane]
            if not indexes:
                continue
            lane = self._lane(on_refusing_lane)
            sent, was_alone = lane.send_each(what, [groups[i] for i in indexes], as_queue)
            for index, error in zip(indexes, sent, strict=True):
                errors[index], alone[index] = error, was_alone
                if on_refusing_lane and error is None:  # it takes messages again
                    self._suspects.took(queue for queue, _ in groups[index])
        for index, error in enumerate(errors):
            if not isinstance(error, ConnectionLostError) or not wanted(index):
                continue
            group = groups[index]
            # Lost while it was the only send on its connection: it was the refused one.
            if alone[index]:
                again: BaseException | None = error
            else:
                resent, again = self._send_alone(
                    what, group, as_queue, functools.partial(wanted, index)
                )
                if not resent:
                    continue
            if isinstance(again, ConnectionLostError):
                again = RefusedError(f"{again} ({REFUSAL_ENDS_CONNECTION})")
                self._suspects.refused(queue for queue, _ in group)
            errors[index] = again
        return errors

    def _send_alone(
        self,
        what: str,
        group: Sequence[tuple[str, EncodedMessage]],
        as_queue: bool,
        wanted: Callable[[], bool],
    ) -> tuple[bool, BaseException | None]:
        """group sent alone on its lane; one suspected while it waited for the main lane (a send
        before it was refused alone) goes on the refusing lane instead.

        Lone sends go one at a time: one that cannot have its connection to itself within a
        send's own wait fails as unconfirmed (its first send's fate is unknown), which leaves
        its message to the broker's redelivery. A send that never went out again (its
        connection stayed away) fails as such. (False, None): not sent again, no longer
        wanted."""
        wait_s = self._settings.reconnect_wait_s + self._settings.confirm_timeout_s
        deadline = time.monotonic() + wait_s
        while True:
            if not wanted():
                return False, None
            refusing = self._suspected([group])[0]
            moved = functools.partial(self._moved, group, refusing, wanted)
            try:
                sent = self._lane(refusing).send_alone(
                    what, group, as_queue, unless=moved, deadline=deadline
                )
            except NotConfirmedError:
                raise  # sent, its fate unknown: the caller gives up connections for it
            except TimeoutError:
                raise NotConfirmedError(
                    f"{what}: lost with its connection, and not sent again alone within {wait_s} s"
                ) from None
            except TransportError as exc:  # never sent again (its connection stayed away)
                return True, exc
            if sent is not None:
                return True, sent[0]

    def _moved(
        self,
        group: Sequence[tuple[str, EncodedMessage]],
        refusing: bool,
        wanted: Callable[[], bool],
    ) -> bool:
        """Whether group is no longer this lane's, or no longer to be sent at all."""
        return self._suspected([group])[0] != refusing or not wanted()

    def _suspected(self, groups: Sequence[Sequence[tuple[str, EncodedMessage]]]) -> list[bool]:
        return [self._suspects.any_of(queue for queue, _ in group) for group in groups]

    def _lane(self, refusing: bool) -> _Lane:
        if not refusing:
            return self._main
        with self._opening:  # the second connection is opened once, when first needed
            with self._lock:
                if self._refusing is not None:
                    return self._refusing
                if self._stopped:
                    raise TransportError("this AmqpTransport was closed; make a new one")
            lane = _Lane(AmqpConnection(self._settings, name="amqp-sender-refused"))
            try:
                calls.open_connection(lane.engine)
            except TransportError:
                calls.stop(lane.engine)
                raise
            with self._lock:
                stopped = self._stopped
                if not stopped:
                    self._refusing = lane
            if stopped:  # closed while it opened
                calls.stop(lane.engine)
                raise TransportError("this AmqpTransport was closed; make a new one")
            return lane


class _Lane:
    """One sending connection, and its gate: a group sent again alone has it to itself."""

    def __init__(self, engine: AmqpConnection) -> None:
        self.engine = engine
        self._gate = SendGate()

    def send_each(
        self,
        what: str,
        groups: Sequence[Sequence[tuple[str, EncodedMessage]]],
        as_queue: bool,
    ) -> tuple[list[BaseException | None], bool]:
        """calls.send_each, and whether the one group was the only send on the connection from
        its start to its end."""
        with self._gate.shared() as stay:
            errors = calls.send_each(self.engine, what, groups, as_queue=as_queue)
        return errors, len(groups) == 1 and stay.alone

    def send_alone(
        self,
        what: str,
        group: Sequence[tuple[str, EncodedMessage]],
        as_queue: bool,
        *,
        unless: Callable[[], bool],
        deadline: float,
    ) -> list[BaseException | None] | None:
        """Send group with no other send under way on this connection; None, sending nothing,
        when unless() is true once this connection is free. TimeoutError: not free by deadline
        (time.monotonic())."""
        with self._gate.exclusive(deadline):
            if unless():
                return None
            return calls.send_each(self.engine, what, [group], as_queue=as_queue)
