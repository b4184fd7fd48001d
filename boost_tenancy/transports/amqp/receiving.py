"""Consuming over AMQP: receivers attached, deliveries decoded and handed on once per pass of the
loop, held by number until settled, and credit given back for what was settled, once per pass."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from cproton import (
    PN_ACCEPTED,
    PN_EOS,
    pn_decref,
    pn_delivery_partial,
    pn_delivery_pending,
    pn_delivery_readable,
    pn_delivery_settle,
    pn_delivery_update,
    pn_incref,
    pn_link_advance,
    pn_link_flow,
    pn_link_recv,
)
from proton import Condition, Delivery, Described, Link, Terminus, symbol

from boost_tenancy.errors import TransportError
from boost_tenancy.frozen import fast_init
from boost_tenancy.messages import MESSAGE_ID_PROPERTY
from boost_tenancy.transports import base
from boost_tenancy.transports.amqp.codec import (
    delivered_body,
    delivered_expiry,
    message_id_text,
    text_or_none,
    text_properties,
)
from boost_tenancy.transports.amqp.decoding import read_message
from boost_tenancy.transports.amqp.events import QUEUE_CAPABILITY
from boost_tenancy.transports.amqp.lost_counts import Key, LostDeliveries
from boost_tenancy.transports.amqp.selector_filter import SELECTOR_FILTER, selector_problem
from boost_tenancy.transports.amqp.subscriptions import Attach, SubscriptionSpec
from boost_tenancy.transports.amqp.waiters import resolve

if TYPE_CHECKING:
    from boost_tenancy.transports.amqp.connection import AmqpConnection

log = structlog.get_logger("boost_tenancy.transports.amqp")


@fast_init
@dataclass(frozen=True, slots=True)
class DeliveryToken:
    """The transport-private handle of a delivery: which connection and which of its
    deliveries. It holds no proton object: those are touched, and freed, on the loop thread
    only (a worker thread dropping the last reference to one raced the loop and stalled it)."""

    generation: int
    number: int
    subscription_id: str


class Receiving:
    """The subscriptions of the engine, their receivers on its connection and their deliveries.

    Loop thread only, like everything the connection handler owns (see connection.py).
    """

    def __init__(self, engine: AmqpConnection) -> None:
        self._engine = engine
        self._subscriptions: dict[str, SubscriptionSpec] = {}
        self._attaches: dict[Any, Attach] = {}
        """By their receiver's pn_link_t: what a delivery event names (delivered())."""
        self._attach_of: dict[str, Attach] = {}
        self._held: dict[int, tuple[Any, Attach]] = {}
        """Deliveries handed on and not settled yet, by number (a token's generation is checked
        against the engine's: a lost connection empties this): each pn_delivery_t with a
        reference of its own, as proton's Delivery keeps one, dropped when it leaves."""
        self._counted: dict[int, tuple[Key, int]] = {}
        """The key and count of each held delivery that has a message id (for _lost)."""
        self._lost = LostDeliveries()
        self._numbers = itertools.count(1)
        self._handoff: list[tuple[base.OnDelivery, base.Delivery]] = []
        """Decoded in this pass of the loop, handed on at its end (pass_ended)."""
        self._owing: list[Attach] = []

    # -- attaching ------------------------------------------------------------------------------
    def subscribe(self, specs: Sequence[SubscriptionSpec], futures: Sequence[Future[None]]) -> None:
        for spec, future in zip(specs, futures, strict=True):
            self._subscriptions[spec.id] = spec
            self._attach(spec, future)

    def attach_all(self) -> None:
        """Attach every subscription anew on a connection just opened."""
        for spec in list(self._subscriptions.values()):
            self._attach(spec, None)

    def _refuse(self, spec: SubscriptionSpec, future: Future[None] | None, problem: str) -> None:
        self._subscriptions.pop(spec.id, None)
        if future is not None:
            resolve(future, TransportError(problem))
        else:
            log.error("amqp_subscription_refused", queue=spec.queue, error=problem)

    def _attach(self, spec: SubscriptionSpec, future: Future[None] | None) -> None:
        engine = self._engine
        if spec.selector is not None and not engine.capabilities.server_side_selectors:
            self._refuse(
                spec,
                future,
                f"refusing to subscribe to {spec.queue!r} with a selector: "
                f"{engine.remote_product} does not apply JMS selectors (RabbitMQ 3.10 echoes the "
                "filter and delivers every message). Use per-tenant queues "
                "(BOOST_ROUTING=per_tenant) on this broker.",
            )
            return
        # A session of its own, ended with the subscription: see unsubscribe().
        session = engine.live_connection().session()
        session.open()
        receiver = session.receiver(f"boost-{spec.id}")
        receiver.handler = engine  # its events straight to the engine, not looked up each time
        receiver.source.address = engine.flavour.address(spec.queue)
        receiver.source.capabilities.put_object(QUEUE_CAPABILITY)
        if engine.flavour.durable_terminus:
            receiver.source.durability = Terminus.CONFIGURATION
        if spec.selector is not None:
            filters = receiver.source.filter
            filters.put_map()
            filters.enter()
            filters.put_symbol(symbol("selector"))
            filters.put_object(Described(SELECTOR_FILTER, spec.selector.render()))
            filters.exit()
        receiver.open()
        attach = Attach(spec, receiver, future)
        self._attaches[receiver._impl] = attach
        self._attach_of[spec.id] = attach

    def is_attached(self, subscription_id: str) -> bool:
        """The subscription's receiver is open and confirmed. Read from other threads: one
        lookup of a dict the loop thread replaces entries of, and two plain flags."""
        attach = self._attach_of.get(subscription_id)
        return attach is not None and attach.opened and not attach.closed

    def link_opened(self, link: Link) -> None:
        """The broker answered an attach (on_link_remote_open)."""
        attach = self._attaches.get(link._impl)
        if attach is None or attach.opened:
            return
        if link.remote_source is None or link.remote_source.address is None:
            return  # a refusal: the detach that follows carries the reason
        problem = selector_problem(attach)
        if problem is not None:
            self._forget(attach)
            link.close()
            self._refuse(attach.spec, attach.future, problem)
            return
        attach.opened = True
        link.flow(attach.spec.prefetch)
        if attach.future is not None:
            resolve(attach.future)

    def link_closed(self, link: Link, reason: str) -> None:
        """The broker closed a receiver (on_link_remote_close): a refused attach fails its
        waiter; a consumer it ended makes the engine reconnect, which attaches it anew."""
        attach = self._attaches.get(link._impl)
        if attach is None:
            return
        self._forget(attach)
        if attach.future is not None and not attach.future.done():
            self._refuse(
                attach.spec,
                attach.future,
                f"the broker refused the subscription to {attach.spec.queue!r}: {reason}",
            )
        elif attach.spec.id in self._subscriptions and self._engine.connection is not None:
            # A consumer the broker ended would never receive again, and nothing would say so:
            # drop the connection so that reconnecting attaches every subscription anew.
            log.warning("amqp_receiver_closed_by_broker", queue=attach.spec.queue, reason=reason)
            self._engine.abandon(
                f"the broker closed the receiver of {attach.spec.queue!r}: {reason}"
            )

    def _forget(self, attach: Attach) -> None:
        attach.closed = True
        self._attaches.pop(attach.receiver._impl, None)
        if self._attach_of.get(attach.spec.id) is attach:
            del self._attach_of[attach.spec.id]

    def unsubscribe(self, subscription_id: str) -> None:
        self._subscriptions.pop(subscription_id, None)
        attach = self._attach_of.get(subscription_id)
        if attach is None:
            return
        self._forget(attach)
        kept: dict[int, tuple[Any, Attach]] = {}
        for number, held in self._held.items():
            if held[1] is attach:
                pn_decref(held[0])
                self._counted.pop(number, None)
            else:
                kept[number] = held
        self._held = kept
        # The receiver's own session ends with it: RabbitMQ keeps a detached link's unsettled
        # messages until the session ends (its 0-9-1 core does not requeue on a cancel,
        # measured), Artemis takes them back at the detach. Neither counts them.
        attach.receiver.close()
        attach.receiver.session.close()

    def connection_lost(self, error: TransportError) -> None:
        """Fail every attach still waiting, and forget every delivery: the broker takes them
        back."""
        attaches, self._attaches = self._attaches, {}
        self._attach_of = {}
        for attach in attaches.values():
            attach.closed = True
            if attach.future is not None:
                resolve(attach.future, error)
        held, self._held = self._held, {}
        for impl, _ in held.values():
            pn_decref(impl)
        counted, self._counted = self._counted, {}
        for number, (key, count) in counted.items():
            if number in held:
                self._lost.left(key, count)
        self._handoff = []
        self._owing = []

    # -- receiving ------------------------------------------------------------------------------
    def delivered(self, impl: Any, link: Any) -> bool:
        """A delivery event's pn_delivery_t on the pn_link_t link, before proton wraps the
        event (the loop's shortcut): taken here when it is on one of these receivers; False
        leaves it to on_delivery."""
        attach = self._attaches.get(link)
        if attach is None or attach.closed:
            return False  # read and left unsettled there, as a forgotten receiver's
        if pn_delivery_readable(impl) and not pn_delivery_partial(impl):
            self._engine.loop.awake()
            self._receive(attach, link, impl)
        return True

    def incoming(self, link: Link, delivery: Delivery) -> None:
        """A whole delivery arrived: decode it now, hand it on at the end of the pass."""
        self._receive(self._attaches.get(link._impl), link._impl, delivery._impl)

    def _receive(self, attach: Attach | None, link: Any, impl: Any) -> None:
        """Read a whole delivery (its pn_delivery_t, on the pn_link_t link) and hold it."""
        try:
            message = read_message(_recv(link, pn_delivery_pending(impl)))
        except Exception as exc:  # whatever the bytes do, the loop must go on
            pn_link_advance(link)
            # Bytes no AMQP decoder reads can never be handled: rejected (Artemis: to the
            # dead-letter address), with the reason, instead of stalling the link.
            delivery = Delivery.wrap(impl)  # type: ignore[no-untyped-call]
            delivery.local.condition = Condition("amqp:decode-error", f"undecodable message: {exc}")
            delivery.update(Delivery.REJECTED)
            delivery.settle()
            pn_link_flow(link, 1)
            log.error(
                "amqp_undecodable_message",
                queue=attach.spec.queue if attach else None,
                error=str(exc),
            )
            return
        pn_link_advance(link)
        if attach is None:
            return  # unsubscribed meanwhile: unsettled, the broker takes it back with the link
        engine = self._engine
        spec = attach.spec
        number = next(self._numbers)
        count = message.delivery_count
        if engine.capabilities.native_delivery_count:
            key = _key_of(spec.queue, message.properties, message.message_id)
            count = self._lost.count(key, count)
            if key is not None:
                self._counted[number] = (key, count)
        pn_incref(impl)
        self._held[number] = (impl, attach)
        self._handoff.append(
            (
                spec.on_delivery,
                base.Delivery(
                    queue=spec.queue,
                    body=delivered_body(message.body, message.properties, message.content_type),
                    properties=text_properties(message.properties),
                    correlation_id=text_or_none(message.correlation_id),
                    redelivered=engine.flavour.redelivered(count, message.first_acquirer),
                    subscription_id=spec.id,
                    delivery_count=count if engine.capabilities.native_delivery_count else None,
                    broker_message_id=message_id_text(message.message_id),
                    expires_at_ms=delivered_expiry(message.absolute_expiry_time, message.ttl),
                    token=DeliveryToken(engine.generation, number, spec.id),
                ),
            )
        )

    def pass_ended(self) -> None:
        """The loop is about to wait (on_reactor_quiesced): credit goes back for what was
        settled in this pass, one flow per receiver, and what arrived is handed on. Handing on
        here, not per delivery, lets the workers run while the loop waits instead of fighting
        it for the GIL at every message: the runner made 3.9 voluntary context switches per
        message with a hand-off per delivery, 1.0 with this (docs/benchmarks.md)."""
        if self._owing:
            owing, self._owing = self._owing, []
            for attach in owing:
                if not attach.closed:
                    attach.receiver.flow(attach.owed)
                attach.owed = 0
        if self._handoff:
            handoff, self._handoff = self._handoff, []
            for on_delivery, delivery in handoff:
                on_delivery(delivery)

    # -- settling -------------------------------------------------------------------------------
    def _live(self, token: DeliveryToken) -> tuple[Any, Attach] | None:
        engine = self._engine
        if not engine.is_open or token.generation != engine.generation:
            return None
        held = self._held.get(token.number)
        if held is None or held[1].closed:
            return None
        return held

    def is_live(self, token: DeliveryToken) -> bool:
        """Whether token's delivery can still be settled."""
        return self._live(token) is not None

    def take(self, token: DeliveryToken) -> Delivery:
        """Remove a live token's delivery to settle it; its receiver is owed one credit."""
        impl = self._take(token)
        delivery = Delivery.wrap(impl)  # type: ignore[no-untyped-call]  # its own reference
        pn_decref(impl)
        return delivery  # type: ignore[no-any-return]

    def _take(self, token: DeliveryToken) -> Any:
        """take() of the pn_delivery_t, whose reference the caller drops once done."""
        impl, attach = self._held.pop(token.number)
        self._counted.pop(token.number, None)
        attach.owed += 1
        if attach.owed == 1:
            self._owing.append(attach)
        return impl

    def accept(self, tokens: Sequence[DeliveryToken]) -> None:
        """Accept and settle deliveries still live; stale ones are redelivered by the broker."""
        for token in tokens:
            if self._live(token) is not None:
                # Delivery.update(ACCEPTED) and settle(), without wrapping the delivery.
                impl = self._take(token)
                pn_delivery_update(impl, PN_ACCEPTED)
                pn_delivery_settle(impl)
                pn_decref(impl)


def _recv(link: Any, limit: int) -> bytearray:
    """Receiver.recv on a pn_link_t: the delivery's bytes."""
    n, data = pn_link_recv(link, limit)
    if n == PN_EOS:
        raise TransportError("the transfer carried no bytes")
    if n < 0:
        raise TransportError(f"the delivery's bytes could not be read (proton error {n})")
    return data  # type: ignore[no-any-return]


def _key_of(queue: str, properties: Any, message_id: object) -> Key | None:
    """What names a delivery across connections: the toolkit's boostMessageId, else the AMQP
    message-id; None for a message with neither."""
    own = properties.get(MESSAGE_ID_PROPERTY) if properties else None
    if isinstance(own, str) and own:
        return (queue, own)
    text = message_id_text(message_id)
    return None if text is None else (queue, text)
