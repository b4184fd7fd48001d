"""The subscriptions of a STOMP transport and the connections that carry them.

Artemis makes each SUBSCRIBE restart every consumer of its connection
(StompSession.addSubscription calls session.start(), which prompts delivery on each consumer):
subscribing n queues on one connection costs the broker about n*n/2 consumer wake-ups, and it
costs them again at every reconnection. Measured on 2.44.0 here, queues existing, raw stomp.py:
4,000 subscriptions took 3.1 s on one connection, 0.13 s on connections of 100 and 0.27 s on
connections of 500. Classic's cost grows linearly (4,000: 0.31 s either way).

So subscriptions are spread over connections ("lines") of at most
StompSettings.subscriptions_per_connection each, by default the broker flavour's own figure
(Artemis: 500, which started a runner of 4,000 tenants as fast as 100 did, with a fifth of the
connections; Classic: no limit). Line 0 is the transport's own connection, which carries every
send, and on Classic the first subscriptions too; the others carry subscriptions only. Artemis
closes a connection that sent a message it refused, so there line 0 carries no subscription: one
tenant's refused message never sends the other tenants' deliveries back (stomp/sending.py).
Each line reconnects on its own and re-creates its subscriptions there; a delivery's token
names its line and that line's connection, so it is acknowledged on the connection that made
it, or not at all once that connection is lost.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from boost_tenancy.errors import ConfigError, TransportError
from boost_tenancy.messages import check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports.base import Delivery, OnDelivery, SubscribeRequest, Subscription
from boost_tenancy.transports.stomp.acks import AckToken, AckWriter
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import QUEUE_PREFIX, delivery_of, encode_frame
from boost_tenancy.transports.stomp.link import FrameWriter, Link
from boost_tenancy.transports.stomp.receipts import PendingReceipt
from boost_tenancy.transports.stomp.settings import StompSettings

_CLOSE_MARGIN_S: Final = 2.0
"""close() waits for the other lines' closes up to the receipt timeout and this beyond it (a
close's DISCONNECT receipt wait, connection.py)."""


@dataclass(frozen=True, slots=True)
class StompSubscription:
    """A subscription; re-created with the same id on its line after a reconnection."""

    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: OnDelivery
    line: int = 0
    """Which of the transport's connections carries it (0: the transport's own)."""


class Line:
    """One connection carrying subscriptions."""

    __slots__ = ("connection", "index", "opened")

    def __init__(self, index: int, connection: StompConnection) -> None:
        self.index = index
        self.connection = connection
        self.opened = False
        """Connected by connect() (then reconnected by its own loop) and not closed since."""


class Subscriptions:
    """The transport's subscriptions and lines: places each subscription on a line, creates it
    there (again after each reconnection), hands on its deliveries and finds where a delivery
    is acknowledged."""

    def __init__(self, settings: StompSettings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._subscriptions: dict[str, StompSubscription] = {}
        self._subscribed_on: dict[str, int] = {}
        """Subscription id -> generation of its line's connection it was last created on."""
        self._ids = itertools.count(1)
        self._lines: list[Line] = []
        self._opening = threading.Lock()
        """Held while lines are opened, so that two subscribers never open one line twice."""
        self._acks = AckWriter(lambda index: self._lines[index].connection)
        """One thread writes the acknowledgements of every line."""
        self.primary = self._new_line()

    def _new_line(self) -> Line:
        index = len(self._lines)
        connection = StompConnection(
            self._settings,
            on_open=functools.partial(self._resubscribe, index),
            on_message=functools.partial(self._on_message, index),
        )
        line = Line(index, connection)
        self._lines.append(line)
        return line

    # -- lifecycle -------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect the transport's own line; the others connect when given subscriptions."""
        self._open(self.primary)

    def _open(self, line: Line) -> None:
        self._acks.start()
        line.connection.connect()
        line.opened = True

    def close(self) -> None:
        """Write the acknowledgements queued for every line, within one bounded wait, then close
        every line. Acknowledgements not written are redelivered messages, never lost
        ones."""
        with self._lock:
            lines = list(self._lines)
            self._subscriptions.clear()
            self._subscribed_on.clear()
        self._acks.flush(self._ack_wait_s, stop=True)
        for line in lines:
            line.opened = False
        # Each close may wait on its broker (a DISCONNECT written, its receipt): the other lines
        # close alongside the transport's own, so closing takes about as long as one close.
        closers = [
            threading.Thread(target=line.connection.close, name="stomp-close", daemon=True)
            for line in lines[1:]
        ]
        for closer in closers:
            closer.start()
        deadline = time.monotonic() + self._settings.receipt_timeout_s + _CLOSE_MARGIN_S
        self.primary.connection.close()
        for closer in closers:
            closer.join(max(0.0, deadline - time.monotonic()))

    @property
    def _ack_wait_s(self) -> float:
        """How long queued acknowledgements are waited for before closing or unsubscribing.
        Bounded by the connect timeout, not the receipt timeout: closing happens on SIGTERM, and
        a broker that stopped reading must not hold the process beyond its grace period."""
        return min(self._settings.receipt_timeout_s, self._settings.connect_timeout_s)

    @property
    def is_connected(self) -> bool:
        """Every line that was opened is connected now."""
        with self._lock:
            lines = list(self._lines)
        return all(line.connection.is_connected for line in lines if line.opened or line.index == 0)

    def connection_of(self, subscription: Subscription) -> StompConnection:
        """The connection that carries subscription."""
        with self._lock:
            sub = self._subscriptions.get(subscription.id)
        if sub is None:
            raise TransportError(f"no subscription {subscription.id!r} on this transport")
        return self._lines[sub.line].connection

    # -- subscribing -----------------------------------------------------------------------------
    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[StompSubscription]:
        made = []
        for request in requests:
            if request.prefetch < 1:
                raise ConfigError(f"prefetch must be at least 1, got {request.prefetch}")
            made.append((f"sub-{next(self._ids)}", check_queue_name(request.queue), request))
        # The broker decides how many a line takes: the broker of the transport's own connection,
        # kept while it reconnects. Before its first connection they go on it, and are created
        # once it is up.
        flavour = self.primary.connection.flavour
        known = flavour is not BrokerFlavour.OTHER
        limit = (
            None
            if not known
            else self._settings.subscriptions_per_connection or flavour.subscriptions_per_connection
        )
        apart = flavour.refusal_closes_connection
        with self._lock:
            places = self._place(len(made), limit, apart=apart)
        with self._opening:
            for index in sorted(set(places) - {0}):
                line = self._lines[index]
                if not line.opened:
                    self._open(line)  # before its subscriptions are listed: on_open finds none
        subs = [
            StompSubscription(i, q, r.selector, r.prefetch, r.on_delivery, line)
            for (i, q, r), line in zip(made, places, strict=True)
        ]
        groups: dict[int, tuple[Link, list[StompSubscription]]] = {}
        with self._lock:
            for sub in subs:
                self._subscriptions[sub.id] = sub
            for sub in subs:
                # Whoever marks a subscription for a connection creates it there, so a subscribe
                # racing a reconnection creates it once, not twice or never; one whose line is
                # down now is created by that line's reconnection.
                link = self._lines[sub.line].connection.live()
                if link is not None:
                    self._subscribed_on[sub.id] = link.generation
                    groups.setdefault(sub.line, (link, []))[1].append(sub)
        self._create([(self._lines[index], link, group) for index, (link, group) in groups.items()])
        return subs

    def _place(self, count: int, limit: int | None, *, apart: bool) -> list[int]:
        """The line of each of count new subscriptions: the first with room, new lines when
        none has (under the lock); never line 0 when apart (the broker closes a connection
        that sent a message it refused: stomp/sending.py)."""
        if limit is None and not apart:
            return [0] * count
        held = [0] * len(self._lines)
        for sub in self._subscriptions.values():
            held[sub.line] += 1
        places = []
        for _ in range(count):
            index = next(
                (
                    i
                    for i, n in enumerate(held)
                    if (limit is None or n < limit) and not (apart and i == 0)
                ),
                None,
            )
            if index is None:
                index = self._new_line().index
                held.append(0)
            held[index] += 1
            places.append(index)
        return places

    def _resubscribe(self, index: int, link: Link) -> None:
        """Re-create every subscription of line index on its new connection (its on_open)."""
        line = self._lines[index]
        with self._lock:
            missing = [
                sub
                for sub in self._subscriptions.values()
                if sub.line == index and self._subscribed_on.get(sub.id) != link.generation
            ]
            for sub in missing:
                self._subscribed_on[sub.id] = link.generation
        try:
            self._create([(line, link, missing)])
        except Exception as exc:
            # A subscription not re-created would never consume again on this connection, and
            # nothing would say so: unmark them and drop the connection, so that the reconnect
            # loop tries the whole connection again.
            with self._lock:
                for sub in missing:
                    if self._subscribed_on.get(sub.id) == link.generation:
                        del self._subscribed_on[sub.id]
            line.connection.abandon(link, f"re-subscribing failed: {exc}")
            raise

    def _create(self, groups: Sequence[tuple[Line, Link, Sequence[StompSubscription]]]) -> None:
        """Create each group's subscriptions on its line's connection: every line's SUBSCRIBE
        frames go out before any receipt is awaited, one round trip for all. On a failure no
        receipt is left awaited."""
        requested: list[tuple[Line, list[tuple[PendingReceipt, StompSubscription]]]] = []
        try:
            for line, link, subs in groups:
                requested.append((line, self._request(line, link, subs)))
            for line, waiting in requested:
                for pending, sub in waiting:
                    line.connection.receipts.wait(pending, f"subscribe to {sub.queue!r}")
        finally:
            for line, waiting in requested:
                for pending, _ in waiting:
                    line.connection.receipts.discard(pending)  # once waited for, already gone

    def _request(
        self, line: Line, link: Link, subs: Sequence[StompSubscription]
    ) -> list[tuple[PendingReceipt, StompSubscription]]:
        """Write a SUBSCRIBE for each of subs, together, each asking for a receipt; the
        receipts to await. A failed write drops the connection (its reconnection makes them)."""
        receipts = line.connection.receipts
        waiting = [(receipts.expect(link.generation), sub) for sub in subs]
        writer = FrameWriter(link, f"subscribe to {len(subs)} queue(s)")
        try:
            for pending, sub in waiting:
                # The connection's own flavour: a reconnection may reach another broker.
                headers = link.flavour.prefetch_headers(
                    sub.prefetch, self._settings.artemis_window_bytes
                )
                if sub.selector is not None:
                    headers["selector"] = sub.selector.render()
                frame = {
                    "destination": QUEUE_PREFIX + sub.queue,
                    "id": sub.id,
                    "ack": "client-individual",
                    **headers,
                    "receipt": pending.id,
                }
                writer.push(encode_frame("SUBSCRIBE", frame))
            writer.flush()
        except Exception as exc:
            for pending, _ in waiting:
                receipts.discard(pending)
            if isinstance(exc, TransportError):
                raise
            raise TransportError(f"subscribe to {len(subs)} queue(s) failed: {exc}") from exc
        return waiting

    def unsubscribe(self, subscription: object) -> None:
        sub_id = str(getattr(subscription, "id", ""))
        sub = self._subscriptions.get(sub_id)
        if sub is None:
            return
        line = self._lines[sub.line]
        # Acknowledgements queued for its deliveries go out first: after UNSUBSCRIBE the broker
        # would take an unacknowledged message back (a re-driven dead letter, a moved backlog).
        self._acks.flush(self._ack_wait_s)
        with self._lock:
            self._subscriptions.pop(sub_id, None)
            self._subscribed_on.pop(sub_id, None)
        link = line.connection.live()
        if link is not None:
            try:
                link.unsubscribe(sub.id)
            except Exception as exc:
                raise TransportError(f"unsubscribe from {sub.queue!r} failed: {exc}") from exc

    def is_open(self, subscription: Subscription) -> bool:
        """Subscribed on its line's live connection (re-created there after a reconnection)."""
        with self._lock:
            sub = self._subscriptions.get(subscription.id)
            if sub is None:
                return False
            generation = self._subscribed_on.get(sub.id)
        link = self._lines[sub.line].connection.live()
        return link is not None and generation == link.generation

    # -- deliveries ------------------------------------------------------------------------------
    def _on_message(
        self, index: int, generation: int, headers: Mapping[str, str], body: bytes
    ) -> None:
        sub = self._subscriptions.get(headers.get("subscription", ""))
        if sub is None:
            return  # unsubscribed meanwhile: unacknowledged, so the broker redelivers it
        # The ack value is echoed back exactly as received (Artemis: '87061,87067').
        ack_id = headers.get("ack") or headers.get("message-id", "")
        sub.on_delivery(
            delivery_of(
                headers,
                body,
                subscription_id=sub.id,
                token=(index, generation, ack_id),
                flavour=self._lines[index].connection.flavour,
            )
        )

    def token(self, delivery: Delivery) -> AckToken:
        """A delivery's token, (line, generation of that line's connection, ack id)."""
        token = delivery.token
        if not (
            isinstance(token, tuple)
            and len(token) == 3
            and isinstance(token[0], int)
            and 0 <= token[0] < len(self._lines)
        ):
            raise TransportError("delivery was not made by this STOMP transport")
        return token[0], token[1], str(token[2])

    def ack_target(self, delivery: Delivery) -> tuple[Line, Link, str] | None:
        """The line and live connection that made delivery, and its ack id; None once that
        connection is lost."""
        index, generation, ack_id = self.token(delivery)
        line = self._lines[index]
        link = line.connection.live()
        if link is None or link.generation != generation:
            return None
        return line, link, ack_id

    def ack(self, delivery: Delivery) -> None:
        # The ack thread writes every acknowledgement waiting for a line in one socket write;
        # close() flushes them first.
        self._acks.put(self.token(delivery))


__all__ = ["Line", "StompSubscription", "Subscriptions"]
