"""Parking: on a shared queue, move the messages of tenants without a processor out of the way.

A ParkingSweeper moves them to parked.<tenant>.<queue> so they cannot block the selector consumers
of running tenants; ParkedRedrive brings a tenant's parked backlog back when its processor starts.
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from boost_tenancy.errors import (
    ConfigError,
    NotConfirmedError,
    QueueStatsUnavailableError,
    TransportError,
)
from boost_tenancy.lifecycle import run_until_stopped
from boost_tenancy.ops.moving import (
    Move,
    QueueMover,
    copy_of,
    take_batch,
    tenancy_violation,
    unsubscribe_all,
)
from boost_tenancy.processing.inbound import adopt
from boost_tenancy.processing.outcomes import Quarantine
from boost_tenancy.resilience.dead_letter import dead_letter_queue, dead_letter_refused
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import PARKED_QUEUE_PREFIX, parked_queue
from boost_tenancy.selectors import (
    TENANT_PROPERTY,
    SelectorLike,
    TenantExclusion,
    tenant_selector,
)
from boost_tenancy.tenancy import TenantId, claimed_tenant
from boost_tenancy.transports.base import (
    Delivery,
    Outgoing,
    PartlyForwardedError,
    SubscribeRequest,
    Subscription,
    Transport,
    queue_lister,
)

log = structlog.get_logger("boost_tenancy.ops.parking")


class ParkingSweeper:
    """Moves every message of a shared queue whose tenant has no running processor to parking.

    Subscribes with TenantExclusion(active_tenants), so the broker hands over only the other
    tenants' messages (and those without a tenant, which are quarantined and recorded).
    """

    def __init__(
        self,
        transport: Transport,
        queues: Sequence[str],
        active_tenants: Iterable[TenantId | str],
        *,
        error_store: ErrorStore,
        prefetch: int = 100,
    ) -> None:
        self._active = tuple(dict.fromkeys(TenantId.parse(t) for t in active_tenants))
        # No active tenant means no processor at all: every message is parked.
        self._selector: SelectorLike | None = (
            TenantExclusion(self._active) if self._active else None
        )
        self._transport = transport
        self._mover = QueueMover(
            transport,
            queues,
            self._plan,
            selector=self._selector,
            error_store=error_store,
            prefetch=prefetch,
            name="parking sweeper",
        )
        self._stop_requested = threading.Event()
        self._started = False

    @property
    def selector(self) -> SelectorLike | None:
        return self._selector

    @property
    def parked(self) -> Mapping[TenantId, int]:
        """Messages moved to parking so far, per tenant."""
        return self._mover.moved

    @property
    def quarantined(self) -> int:
        """Messages without a valid tenant moved to quarantine so far."""
        return self._mover.quarantined

    def start(self) -> None:
        """Connect and subscribe to every queue; moving happens on a background thread."""
        if self._started:
            return
        self._started = True
        self._transport.connect()
        self._mover.start()
        log.info(
            "parking_started",
            queues=list(self._mover.queues),
            active_tenants=[t.value for t in self._active],
        )

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop moving and disconnect; what was not moved yet stays on its queue."""
        self._mover.stop(grace_s, unsubscribe=False)
        self._transport.close()
        log.info("parking_stopped", parked=sum(self.parked.values()), quarantined=self.quarantined)

    def request_stop(self) -> None:
        """Ask run() to stop; safe from a signal handler."""
        self._stop_requested.set()

    def run(self, *, install_signal_handlers: bool = True) -> int:
        """Start, block until SIGTERM/SIGINT or request_stop(), then stop; exit code 0."""
        run_until_stopped(
            self.start,
            self.stop,
            self._stop_requested,
            install_signal_handlers=install_signal_handlers,
        )
        return 0

    def _plan(self, delivery: Delivery) -> Move | Quarantine | None:
        raw = delivery.properties.get(TENANT_PROPERTY)
        tenant = claimed_tenant(raw)
        if tenant is None:
            return tenancy_violation(delivery, raw, "is not a valid tenant")
        if tenant in self._active:
            # Only a broker ignoring the selector does this; the tenant's processor should
            # have it, so it stays unacknowledged and returns when the sweeper stops.
            log.warning("parking_active_tenant_delivered", tenant=tenant.value)
            return None
        return Move(delivery, tenant, parked_queue(delivery.queue, tenant), copy_of(delivery))


@dataclass(frozen=True, slots=True)
class ParkedMove:
    """One tenant's parked backlog of a queue and the broker queue it goes back to."""

    tenant: TenantId
    parked: str
    target: str


class ParkedRedrive:
    """Moves parked messages back to their queues on a background thread until none arrive.

    It stops by itself once no message came for idle_s; stop() ends it earlier, and what was not
    moved then stays parked for the next start.
    """

    def __init__(
        self,
        transport: Transport,
        moves: Collection[ParkedMove],
        *,
        idle_s: float = 2.0,
        prefetch: int = 100,
    ) -> None:
        if idle_s <= 0:
            raise ConfigError(f"idle_s must be positive, got {idle_s}")
        self._transport = transport
        self._moves = tuple(moves)
        self._idle_s = idle_s
        self._prefetch = max(1, prefetch)
        self._inbox: queue_mod.SimpleQueue[tuple[ParkedMove, Delivery]] = queue_mod.SimpleQueue()
        self._lock = threading.Lock()
        self._moved: dict[tuple[TenantId, str], int] = {}
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._moving = threading.Event()
        """Set once it has subscribed: from then on a stop waits for the batch it moves."""
        self._thread: threading.Thread | None = None

    @property
    def moved(self) -> Mapping[tuple[TenantId, str], int]:
        """Messages moved back so far, per (tenant, target queue)."""
        with self._lock:
            return dict(self._moved)

    def start(self) -> None:
        """Start moving on a background thread (on a connected transport): start() never waits
        for the broker, and the runner that starts it subscribes to nothing more.

        Where the broker lists its queues (queue_listing), only the parked queues that hold
        messages are subscribed to: subscribing makes a queue that is not there (Artemis writes
        each to its journal; Classic keeps it), and most tenants have nothing parked. Elsewhere,
        or when the listing fails, every parked queue of the moves is subscribed to."""
        if self._thread is not None:
            return
        if not self._moves:
            self._done.set()
            return
        self._thread = threading.Thread(target=self._run, name="boost-unpark", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            moves = self._holding_messages()
            if not moves or self._stopping.is_set():
                self._done.set()
                return
            subscriptions = self._transport.subscribe_many(
                [
                    # The parked queue holds only this tenant's messages; the selector keeps
                    # it so.
                    SubscribeRequest(
                        move.parked,
                        self._transport.capabilities.guard_selector(tenant_selector(move.tenant)),
                        self._prefetch,
                        self._receiver(move),
                    )
                    for move in moves
                ]
            )
        except Exception as exc:  # reported; the backlog stays parked for the next start
            if not self._stopping.is_set():
                log.error("parked_redrive_failed", parked_queues=len(self._moves), error=str(exc))
            self._done.set()
            return
        self._moving.set()
        self._loop(list(subscriptions))

    def _holding_messages(self) -> tuple[ParkedMove, ...]:
        """The moves whose parked queue holds messages, where the broker lists queues; else all."""
        try:
            lister = queue_lister(self._transport)
            listed = lister.list_queues([PARKED_QUEUE_PREFIX])
        except (QueueStatsUnavailableError, TransportError) as exc:
            log.debug("parked_queues_not_listed", error=str(exc))
            return self._moves
        except Exception as exc:  # the listing only spares subscriptions: without it, all
            log.warning("parked_queues_not_listed", error_type=type(exc).__name__, error=str(exc))
            return self._moves
        holding = {q.name for q in listed if q.stats.stored > 0 or (q.stats.scheduled or 0) > 0}
        return tuple(move for move in self._moves if move.parked in holding)

    def _receiver(self, move: ParkedMove) -> Callable[[Delivery], None]:
        def on_delivery(delivery: Delivery) -> None:
            self._inbox.put((move, delivery))

        return on_delivery

    def _loop(self, subscriptions: list[Subscription]) -> None:
        last = time.monotonic()
        try:
            while not self._stopping.is_set() and time.monotonic() - last < self._idle_s:
                batch = take_batch(self._inbox, 0.05)
                if not batch:
                    continue
                last = time.monotonic()
                # Another tenant's message stays parked: never moved into this tenant's queue.
                mine = [
                    (move, delivery)
                    for move, delivery in batch
                    if delivery.properties.get(TENANT_PROPERTY) == move.tenant.value
                ]
                try:
                    done = self._transport.send_then_ack_many(
                        [(d, [Outgoing(move.target, copy_of(d))]) for move, d in mine]
                    )
                except NotConfirmedError:
                    # Whether the broker took them is unknown: left to redelivery.
                    log.exception("unpark_failed", count=len(mine))
                    continue
                except Exception as exc:
                    # One message the broker refuses must not hold the tenant's whole backlog
                    # (its batch unacknowledged, the window full, the same batch at every
                    # start): the rest one by one, and the refused ones dead-lettered.
                    log.warning("unpark_batch_refused", count=len(mine), error=str(exc))
                    done = list(exc.forwarded) if isinstance(exc, PartlyForwardedError) else []
                    taken = {id(d) for d in done}
                    done += self._one_by_one([(m, d) for m, d in mine if id(d) not in taken])
                moved_ids = {id(d) for d in done}  # a skipped one is redelivered, moved later
                with self._lock:
                    for move, delivery in mine:
                        if id(delivery) not in moved_ids:
                            continue
                        key = (move.tenant, move.target)
                        self._moved[key] = self._moved.get(key, 0) + 1
        finally:
            unsubscribe_all(self._transport, subscriptions)
            moved = self.moved
            if moved:
                log.info("parked_redriven", messages=sum(moved.values()))
            self._done.set()

    def _one_by_one(self, pairs: Sequence[tuple[ParkedMove, Delivery]]) -> list[Delivery]:
        """Move each on its own; one the broker refuses goes to its tenant queue's dead-letter
        queue with its original bytes (unsettleable); the ones moved are returned."""
        moved: list[Delivery] = []
        for move, delivery in pairs:
            if not self._transport.is_live(delivery):
                continue  # the broker redelivers it after the reconnection
            try:
                moved += self._transport.send_then_ack_many(
                    [(delivery, [Outgoing(move.target, copy_of(delivery))])]
                )
            except NotConfirmedError:
                log.exception("unpark_failed", count=1)
            except Exception as exc:
                if self._transport.is_live(delivery):
                    self._dead_letter(move, delivery, exc)
        return moved

    def _dead_letter(self, move: ParkedMove, delivery: Delivery, exc: Exception) -> None:
        adopted = adopt(delivery)
        dead_letter_refused(
            self._transport,
            delivery,
            dead_letter_queue(move.target),
            refusal=exc,
            error=f"unparking to {move.target!r} was refused: {exc}",
            message_id=adopted.message_id,
            attempt=adopted.attempt,
        )

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the redrive has finished; False if timeout passed first."""
        return self._done.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """End the redrive now; unmoved messages stay parked."""
        self._stopping.set()
        # Still asking the broker which parked queues hold messages: nothing is being moved, and
        # the thread subscribes to nothing once it sees the stop; a stop never waits for the
        # listing (a management request, up to confirm_timeout_s).
        if self._thread is not None and self._moving.is_set():
            self._thread.join(timeout)
