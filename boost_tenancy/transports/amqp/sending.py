"""Sending over AMQP: one sender per address, and every send confirmed by the broker's
settlement: a waiter hears of success only when the broker accepted every message it waits
for, and of the first rejection, release or lost link otherwise.

A message the broker gives no credit for never leaves the client: Artemis drains a sender's
credit while its address refuses messages (full under address-full-policy FAIL or BLOCK;
ARTEMIS-5645, measured on 2.44.0). Such a send waited out the transport's confirm timeout as
unconfirmed, and the transport gave its connection up, with every tenant's deliveries on it.
Now a sender still without credit CREDIT_WAIT_SHARE of confirm_timeout_s after a send found it
so has its unsent messages dropped (never sent: nothing of them is stored) and their sends
failed as refused, and nothing else is touched.

Loop thread only, like everything the connection handler owns (see connection.py).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

from cproton import (
    PN_ACCEPTED,
    pn_decref,
    pn_delivery_abort,
    pn_delivery_link,
    pn_delivery_remote_state,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_updated,
    pn_incref,
    pn_link_credit,
    pn_link_queued,
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
        self._credit_checks: dict[Any, int] = {}
        """pn_link_t of the senders whose credit is to be looked at again: how many messages
        waited on each when it was last looked at (after the send that found it without)."""

    def forget_senders(self) -> None:
        """The connection is new or gone: its senders are of no use any more."""
        self._senders = {}

    def fail_all(self, error: TransportError) -> None:
        """Fail every waiter: the connection their sends went out on is gone."""
        confirms, self._confirms = self._confirms, {}
        for impl in confirms:
            pn_decref(impl)
        for countdown in dict.fromkeys(confirms.values()):
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
        confirms = self._confirms
        for queue, message in items:
            sender = self._sender(queue, as_queue)
            if transaction is None:
                impl = message.write(sender)
            else:
                sent = transaction.send(sender, message)  # which calls message.send(sender)
                if not isinstance(sent, Delivery):
                    raise TransportError("proton returned no delivery for a sent message")
                impl = sent._impl
            pn_incref(impl)
            confirms[impl] = countdown
            link = sender._impl
            if pn_link_credit(link) <= 0 and link not in self._credit_checks:
                self._look_again(sender, pn_link_queued(link))

    def _look_again(self, sender: Sender, queued: int) -> None:
        self._credit_checks[sender._impl] = queued
        wait_s = self._engine.settings.confirm_timeout_s * CREDIT_WAIT_SHARE
        # The wrapper, which holds a reference: proton may free a link of a lost connection.
        self._engine.loop.schedule(wait_s, functools.partial(self._check_credit, sender))

    def _check_credit(self, sender: Sender) -> None:
        """A send found sender without credit a while ago: if it still has none and not one
        message has left it since, the messages waiting are dropped unsent and their sends fail
        as refused; while messages still leave it (a busy broker granting credit slowly), it is
        looked at again later."""
        link = sender._impl
        before = self._credit_checks.pop(link, 0)
        queued = pn_link_queued(link)
        if pn_link_credit(link) > 0 or queued <= 0:
            return
        if queued < before:
            self._look_again(sender, queued)
            return
        waiting = [impl for impl in self._confirms if pn_delivery_link(impl) == link]
        wait_s = self._engine.settings.confirm_timeout_s * CREDIT_WAIT_SHARE
        error = TransportError(
            f"the broker gave no credit to send within {wait_s} s, and the message was not "
            "sent (Artemis: its address is full under address-full-policy FAIL or BLOCK)"
        )
        # A link sends in order: the last `queued` of its deliveries are the ones not sent.
        for impl in waiting[-queued:]:
            pn_delivery_abort(impl)  # never sent: dropped, not aborted on the wire
            self._confirms.pop(impl).failed(error)
            pn_decref(impl)

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
