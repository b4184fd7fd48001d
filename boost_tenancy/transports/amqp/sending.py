"""Sending over AMQP: one sender per address, and every send confirmed by the broker's
settlement: a waiter hears of success only when the broker accepted every message it waits
for, and of the first rejection, release or lost link otherwise.

A message is written only while its sender has credit; until then it waits here, in order,
and goes out when the broker gives some. Artemis gives a sender none while its address refuses
messages (full under address-full-policy FAIL or BLOCK; ARTEMIS-5645, measured on 2.44.0): such
a send waited out the transport's confirm timeout as unconfirmed, and the transport gave its
connection up, with every tenant's deliveries on it. There (AmqpFlavour.withholds_credit_when_full)
messages that waited CREDIT_WAIT_SHARE of confirm_timeout_s, with none of the sender's leaving
meanwhile, fail as refused: never written, nothing of them is stored, and nothing else is
touched.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

from cproton import (
    PN_ACCEPTED,
    pn_decref,
    pn_delivery_link,
    pn_delivery_remote_state,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_updated,
    pn_incref,
    pn_link_credit,
)
from proton import Delivery, Endpoint, Link, Sender, Terminus

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.amqp.encoding import EncodedMessage
from boost_tenancy.transports.amqp.events import QUEUE_CAPABILITY, describe
from boost_tenancy.transports.amqp.transactions import outcome_of
from boost_tenancy.transports.amqp.waiters import Countdown, resolve

if TYPE_CHECKING:
    from boost_tenancy.transports.amqp.connection import AmqpConnection

CREDIT_WAIT_SHARE: Final = 0.5
"""How much of confirm_timeout_s a send waits for credit before it fails as refused: well within
the caller's own wait, so the send fails as refused, not as unconfirmed."""


class Sending:
    """The senders of the engine's connection and the confirmations their waiters expect."""

    def __init__(self, engine: AmqpConnection) -> None:
        self._engine = engine
        self._senders: dict[str, Sender] = {}
        self._confirms: dict[Any, Countdown] = {}
        """Sent and not settled by the broker yet, by pn_delivery_t (with a reference of its
        own, as proton's Delivery keeps one): whose count each one's outcome goes to."""
        self._names = itertools.count(1)
        self._held: dict[Any, deque[tuple[EncodedMessage, Countdown, Any]]] = {}
        """By pn_link_t: the messages waiting for credit on that sender, in order."""
        self._moved: set[Any] = set()
        """pn_link_t of the senders a held message left since they were last looked at."""

    def forget_senders(self) -> None:
        """The connection is new or gone: its senders are of no use any more."""
        self._senders = {}
        self._held, self._moved = {}, set()

    def fail_all(self, error: TransportError) -> None:
        """Fail every waiter: the connection their sends went out on is gone."""
        confirms, self._confirms = self._confirms, {}
        held, self._held = self._held, {}
        for impl in confirms:
            pn_decref(impl)
        waiting = [countdown for messages in held.values() for _, countdown, _ in messages]
        for countdown in dict.fromkeys([*confirms.values(), *waiting]):
            countdown.failed(error)

    def _sender(self, queue: str, as_queue: bool) -> Sender:
        engine = self._engine
        address = engine.flavour.address(queue) if as_queue else queue
        sender = self._senders.get(address)
        if sender is None or sender.state & Endpoint.LOCAL_CLOSED:
            sender = engine.loop.container.create_sender(
                engine.live_connection(),
                target=address,
                name=f"boost-send-{next(self._names)}",
                handler=engine,  # its events straight to the engine, not looked up each time
            )
            if as_queue:
                # Without it Artemis makes a new address multicast and drops what is sent there.
                # A node that is no queue goes without: Artemis would make a durable queue of
                # that name (and cannot, where auto-creation is off).
                sender.target.capabilities.put_object(QUEUE_CAPABILITY)
                if engine.flavour.durable_terminus:
                    sender.target.durability = Terminus.CONFIGURATION
            self._senders[address] = sender
        return sender

    def send(
        self,
        items: Sequence[tuple[str, EncodedMessage]],
        done: Future[None],
        transaction: Any = None,
        *,
        as_queue: bool = True,
    ) -> None:
        """Send items in order, in transaction when one is given, and resolve done once the
        broker has settled every transfer with accepted (inside a transaction: transactional
        state with accepted, which Artemis answers each transactional transfer with once it is
        routed)."""
        if not items:
            resolve(done)
            return
        countdown = Countdown(len(items), done)
        held, confirms = self._held, self._confirms
        for queue, message in items:
            sender = self._sender(queue, as_queue)
            link = sender._impl
            if (held and link in held) or pn_link_credit(link) <= 0:
                self._hold(sender, (message, countdown, transaction))
            elif transaction is None:  # the common case, inline: it runs for every send
                impl = message.write(sender)
                pn_incref(impl)
                confirms[impl] = countdown
            else:
                self._write(sender, message, countdown, transaction)

    def _write(
        self, sender: Sender, message: EncodedMessage, countdown: Countdown, transaction: Any
    ) -> None:
        if transaction is None:
            impl = message.write(sender)
        else:
            sent = transaction.send(sender, message)  # which calls message.send(sender)
            if not isinstance(sent, Delivery):
                raise TransportError("proton returned no delivery for a sent message")
            impl = sent._impl
        pn_incref(impl)
        self._confirms[impl] = countdown

    def _hold(self, sender: Sender, entry: tuple[EncodedMessage, Countdown, Any]) -> None:
        """entry waits for credit on sender, after those already waiting."""
        waiting = self._held.get(sender._impl)
        if waiting is None:
            waiting = self._held[sender._impl] = deque()
            if self._engine.flavour.withholds_credit_when_full:
                self._look_again(sender)
        waiting.append(entry)

    def flowed(self, sender: Sender) -> None:
        """The broker gave sender credit (on_link_flow): the messages waiting go out while it
        lasts, in order."""
        link = sender._impl
        waiting = self._held.get(link)
        if not waiting:
            return
        while waiting and pn_link_credit(link) > 0:
            message, countdown, transaction = waiting.popleft()
            try:
                self._write(sender, message, countdown, transaction)
            except Exception as exc:  # on the loop thread: the waiter must hear, the loop go on
                error = exc if isinstance(exc, TransportError) else TransportError(str(exc))
                countdown.failed(error)
            self._moved.add(link)
        if not waiting:
            del self._held[link]

    def _look_again(self, sender: Sender) -> None:
        wait_s = self._engine.settings.confirm_timeout_s * CREDIT_WAIT_SHARE
        # The wrapper, which holds a reference: proton may free a link of a lost connection.
        self._engine.loop.schedule(wait_s, functools.partial(self._check_credit, sender))

    def _check_credit(self, sender: Sender) -> None:
        """Messages wait for credit on sender since a while: if none of them left it since it
        was last looked at, they fail as refused, never written; otherwise (a busy broker
        granting credit slowly) it is looked at again later."""
        link = sender._impl
        waiting = self._held.get(link)
        if not waiting:
            return
        if link in self._moved:
            self._moved.discard(link)
            self._look_again(sender)
            return
        del self._held[link]
        wait_s = self._engine.settings.confirm_timeout_s * CREDIT_WAIT_SHARE
        error = TransportError(
            f"the broker gave no credit to send within {wait_s} s, and the message was not "
            "sent (Artemis: its address is full under address-full-policy FAIL or BLOCK)"
        )
        for countdown in dict.fromkeys(countdown for _, countdown, _ in waiting):
            countdown.failed(error)

    def delivered(self, impl: Any) -> bool:
        """A delivery event's pn_delivery_t, before proton wraps the event (the loop's
        shortcut): taken here when it is a send still awaiting its outcome. Anything else (a
        settlement after the outcome was told, a transaction's control transfer) goes on to
        on_delivery, wrapped."""
        if impl not in self._confirms:
            return False
        self._outcome(impl, None)
        return True

    def update(self, delivery: Delivery) -> None:
        """The broker updated or settled a sent delivery (on_delivery of a sender link)."""
        self._outcome(delivery._impl, delivery)

    def _outcome(self, impl: Any, delivery: Delivery | None) -> None:
        """What the broker did with a sent delivery goes to its waiter; delivery is proton's
        wrapper of impl when there is one already."""
        if not pn_delivery_updated(impl) and not pn_delivery_settled(impl):
            return
        countdown = self._confirms.pop(impl, None)
        if countdown is not None:
            state = pn_delivery_remote_state(impl)
            if state == PN_ACCEPTED:
                countdown.confirmed()
            else:  # the rarer outcomes are read through proton's wrapper
                if delivery is None:
                    delivery = Delivery.wrap(impl)  # type: ignore[no-untyped-call]
                state = outcome_of(delivery)
                if state == Delivery.ACCEPTED:
                    countdown.confirmed()
                elif state == Delivery.REJECTED:
                    reason = describe(delivery.remote.condition)
                    countdown.failed(TransportError(f"the broker rejected the message: {reason}"))
                else:
                    countdown.failed(
                        TransportError(f"the broker did not take the message (outcome {state})")
                    )
        if pn_delivery_settled(impl):  # settled by the broker: forget it here too
            pn_delivery_settle(impl)
        if countdown is not None:
            pn_decref(impl)

    def link_closed(self, link: Link, reason: str) -> None:
        """The broker closed a sending link: fail what waits on it, make a new one next time."""
        for address, sender in list(self._senders.items()):
            if sender == link:
                del self._senders[address]
        error = TransportError(f"the broker closed the sending link: {reason}")
        for impl in [d for d in self._confirms if pn_delivery_link(d) == link._impl]:
            self._confirms.pop(impl).failed(error)
            pn_decref(impl)
        for _, countdown, _ in self._held.pop(link._impl, ()):
            countdown.failed(error)
