"""The fairness gate: a tenant over its concurrency or rate limit stops being pulled.

Deliveries of a tenant at its limit wait here, unacknowledged and in the order they came, until a
slot is given back or the rate allows; then they go on to the workers. Nothing is re-sent to say
"not now": the broker's prefetch bounds what waits (it stops sending to a subscription whose
window is full of held messages), so a held tenant costs no broker write. A delivery held longer
than hold_s is the exception: it is handed to the workers marked expired, and the runner defers
it (a delayed copy, no attempt counted), so a tenant whose slots are held elsewhere in the fleet
(Redis) does not pin this process's prefetch for ever.

One admitter thread makes every decision, so the transport's receiving thread never waits on a
limiter (Redis), and a tenant's head delivery is the only one tried: order is kept.
"""

from __future__ import annotations

import itertools
import os
import queue as queue_mod
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from boost_tenancy.fairness.concurrency import ConcurrencyLimiter
from boost_tenancy.fairness.rates import TokenBucketLimiter
from boost_tenancy.fairness.redis_backend import RedisTokenBucketLimiter
from boost_tenancy.fairness.tiers import TierResolver
from boost_tenancy.processing.admission import Admitted
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Delivery

log = structlog.get_logger("boost_tenancy.fairness")

_WARN_EVERY_S: Final = 60.0
_FIRST_POLL_S: Final = 0.02
_MAX_POLL_S: Final = 1.0
_IDLE_WAIT_S: Final = 0.5

FairnessEvent = Callable[[TenantId, str], None]
"""Told of every decision: admitted, held_concurrency, held_rate, expired."""

LimitOf = Callable[[TenantId], int]
_Event = tuple[str, TenantId | None, Any]
"""What the admitter thread is told: ("offer", tenant, delivery), ("done", tenant, slot), or
("close", None, None)."""


class ThrottledWarning:
    """One warning per event name per interval, with the count of those left out.

    A Redis outage fails every decision; one line per message would drown the log.
    """

    def __init__(self, every_s: float = _WARN_EVERY_S) -> None:
        self._every_s = every_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(event)
            if last is not None and now - last < self._every_s:
                self._suppressed[event] = self._suppressed.get(event, 0) + 1
                return
            self._last[event] = now
            suppressed = self._suppressed.pop(event, 0)
        log.warning(event, suppressed_since_last=suppressed, **fields)


@dataclass(slots=True, eq=False)
class _Lane:
    """One tenant's held deliveries, oldest first, and when its head may be tried again."""

    tenant: TenantId
    items: deque[tuple[Delivery, float]] = field(default_factory=deque)
    retry_at: float = 0.0
    poll_s: float = _FIRST_POLL_S
    head_reported: bool = False


class FairnessGate:
    """Admits each tenant's deliveries while it is under its limits, in order; holds the rest.

    Per delivery, on the admitter thread: (1) a concurrency slot, limited by limit_of(tenant)
    (the tier's limit); (2) one unit of the tenant's rate meter, else the slot is given back and
    the tenant waits the bucket's retry-after. A tenant refused a slot is tried again when one of
    its slots is given back (done()) or, for slots held by other processes (Redis), after a
    poll interval that doubles up to 1 s. Exempt tenants and queues (system work) pass without
    limits. Limiter failures fail open: the delivery is admitted and a warning logged at most once
    a minute, because a Redis outage must not stop every tenant (availability first); the Redis
    limiters' circuit breaker makes an outage cost one timeout per cool-down, not one per message.
    """

    def __init__(
        self,
        *,
        concurrency: ConcurrencyLimiter,
        limit_of: LimitOf,
        rates: TokenBucketLimiter | RedisTokenBucketLimiter | None = None,
        tiers: TierResolver | None = None,
        meter: str = "messages",
        exempt_tenants: Collection[TenantId] = (),
        exempt_queues: Collection[str] = (),
        hold_s: float = 300.0,
        defer_ms: int = 1000,
        jitter_ms: int = 1000,
        on_event: FairnessEvent | None = None,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._concurrency = concurrency
        self._limit_of = limit_of
        self._rates = rates
        self._tiers = tiers
        self._meter = meter
        self._exempt_tenants = frozenset(exempt_tenants)
        self._exempt_queues = frozenset(exempt_queues)
        self._hold_s = hold_s
        self._defer_ms = defer_ms
        self._jitter_ms = jitter_ms
        self._rand = rand
        self._on_event = on_event
        self._clock = clock
        self._warn = ThrottledWarning()
        self._slots: Iterator[int] = itertools.count(1)
        self._process = f"{os.getpid()}-{id(self):x}"
        self._inbox: queue_mod.SimpleQueue[_Event] = queue_mod.SimpleQueue()
        self._lanes: dict[TenantId, _Lane] = {}
        self._thread: threading.Thread | None = None
        self._admit: Callable[[TenantId, Admitted], None] | None = None
        self._logical: Callable[[str], str] = str
        self._held = 0

    # -- the runner's side ------------------------------------------------------------------------
    def start(
        self,
        admit: Callable[[TenantId, Admitted], None],
        *,
        logical: Callable[[str], str] = str,
    ) -> None:
        """Start the admitter thread; admit(tenant, admitted) hands a delivery to the workers.
        logical maps a broker queue to the logical queue the exemptions name."""
        if self._thread is not None:
            return
        self._admit = admit
        self._logical = logical
        self._thread = threading.Thread(target=self._loop, name="boost-fairness", daemon=True)
        self._thread.start()

    def offer(self, tenant: TenantId, delivery: Delivery) -> None:
        """Queue a delivery for admission; never blocks (called on the receiving thread)."""
        self._inbox.put(("offer", tenant, delivery))

    def done(self, tenant: TenantId, slot: str | None) -> None:
        """The delivery holding slot is settled (or skipped): give the slot back."""
        if slot is not None:
            self._inbox.put(("done", tenant, slot))

    def close(self, timeout: float = 5.0) -> None:
        """Stop admitting; held deliveries stay unacknowledged (the broker redelivers them).
        Closes the tier resolver and the limiters' clients."""
        if self._thread is not None:
            self._inbox.put(("close", None, None))
            self._thread.join(timeout)
        if self._tiers is not None:
            self._tiers.close()
        for limiter in (self._concurrency, self._rates):
            close = getattr(limiter, "close", None)
            if callable(close):
                close()

    def defer_delay_ms(self) -> int:
        """The delay of an expired delivery's deferral: defer_ms plus jitter, so deferred
        messages do not all return at once."""
        return self._defer_ms + (int(self._rand() * self._jitter_ms) if self._jitter_ms else 0)

    @property
    def held(self) -> int:
        """Deliveries waiting at the gate (as last counted by the admitter)."""
        return self._held

    # -- the admitter thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            try:
                event = self._inbox.get(timeout=self._wait_s())
            except queue_mod.Empty:
                event = None
            touched: set[TenantId] = set()
            while event is not None:
                kind, tenant, value = event
                if tenant is None:  # close
                    return
                if kind == "offer":
                    lane = self._lanes.get(tenant)
                    if lane is None:
                        lane = self._lanes[tenant] = _Lane(tenant)
                    lane.items.append((value, self._clock()))
                else:
                    self._release(tenant, value)
                    lane = self._lanes.get(tenant)
                    if lane is not None:
                        lane.retry_at = 0.0  # a slot came back: try at once
                        lane.poll_s = _FIRST_POLL_S
                touched.add(tenant)
                try:
                    event = self._inbox.get_nowait()
                except queue_mod.Empty:
                    event = None
            try:
                self._admit_due(touched)
            except Exception:  # the admitter must outlive any defect; deliveries stay held
                log.critical("fairness_admitter_failed", exc_info=True)

    def _wait_s(self) -> float:
        if not self._lanes:
            return _IDLE_WAIT_S
        now = self._clock()
        soonest = min(lane.retry_at for lane in self._lanes.values())
        return min(_IDLE_WAIT_S, max(0.0, soonest - now)) or 0.0005

    def _admit_due(self, touched: set[TenantId]) -> None:
        now = self._clock()
        held = 0
        for tenant in list(self._lanes):
            lane = self._lanes[tenant]
            if tenant in touched or lane.retry_at <= now:
                self._admit_lane(lane, now)
            if lane.items:
                held += len(lane.items)
            else:
                del self._lanes[tenant]
        self._held = held

    def _admit_lane(self, lane: _Lane, now: float) -> None:
        """Admit the lane's head while the tenant is under its limits; only the head is tried,
        so the tenant's order is kept."""
        tenant = lane.tenant
        while lane.items:
            delivery, since = lane.items[0]
            if tenant in self._exempt_tenants or (
                self._exempt_queues and self._logical(delivery.queue) in self._exempt_queues
            ):
                self._pass(lane, Admitted(delivery, None), "admitted")
                continue
            slot, reason, wait_s = self._try(tenant, lane)
            if slot is not None:
                lane.poll_s = _FIRST_POLL_S
                self._pass(lane, Admitted(delivery, slot), "admitted")
                continue
            if now - since >= self._hold_s:
                self._pass(lane, Admitted(delivery, None, expired=True), "expired")
                continue
            if not lane.head_reported:
                lane.head_reported = True
                self._event(tenant, f"held_{reason}")
            lane.retry_at = now + wait_s
            return
        lane.retry_at = 0.0

    def _pass(self, lane: _Lane, admitted: Admitted, event: str) -> None:
        lane.items.popleft()
        lane.head_reported = False
        if self._admit is not None:
            self._admit(lane.tenant, admitted)
        self._event(lane.tenant, event)

    def _try(self, tenant: TenantId, lane: _Lane) -> tuple[str | None, str, float]:
        """(slot, "", 0) when admitted, else (None, reason, seconds to wait)."""
        slot = f"{self._process}-{next(self._slots)}"
        try:
            holds = self._concurrency.try_acquire(tenant, slot, self._limit_of(tenant))
        except Exception as exc:  # fail open, see the class docstring
            self._warn(
                "fairness_concurrency_unavailable", error_type=type(exc).__name__, error=str(exc)
            )
            holds = True
        if not holds:
            # Given back here, done() wakes the lane at once; held by another process (Redis),
            # only a poll finds out.
            wait, lane.poll_s = lane.poll_s, min(lane.poll_s * 2, _MAX_POLL_S)
            return None, "concurrency", wait
        if self._rates is None:
            return slot, "", 0.0
        try:
            admission = self._rates.take(tenant, self._meter)
        except Exception as exc:  # fail open
            self._warn("fairness_rate_unavailable", error_type=type(exc).__name__, error=str(exc))
            return slot, "", 0.0
        if admission.admitted:
            return slot, "", 0.0
        self._release(tenant, slot)
        return None, "rate", max(admission.retry_after_s, 0.001)

    def _release(self, tenant: TenantId, slot: str) -> None:
        try:
            self._concurrency.release(tenant, slot)
        except Exception as exc:  # a lease left behind expires by itself
            self._warn("fairness_release_failed", error_type=type(exc).__name__, error=str(exc))

    def _event(self, tenant: TenantId, event: str) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(tenant, event)
        except Exception as exc:  # accounting must not decide a delivery's fate
            self._warn("fairness_event_hook_failed", error_type=type(exc).__name__, error=str(exc))


__all__ = ["Admitted", "FairnessEvent", "FairnessGate", "LimitOf", "ThrottledWarning"]
