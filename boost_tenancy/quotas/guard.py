"""PublishGuard: admits or refuses a tenant's publish before a byte of it is sent, by its size,
its backlog quota and its token buckets (buckets.py), counting each refusal."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import structlog

from boost_tenancy.errors import (
    BacklogQuotaExceededError,
    MessageTooLargeError,
    PublishRateExceededError,
)
from boost_tenancy.fairness.rates import check_idle_s
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.quotas.backlog import BacklogSource
from boost_tenancy.quotas.buckets import Lane, rate_text, take_buckets
from boost_tenancy.quotas.limits import UNLIMITED_PUBLISHING, PublishLimits
from boost_tenancy.quotas.policy import TenantPolicy
from boost_tenancy.tenancy import TenantId

if TYPE_CHECKING:
    from boost_tenancy.quotas.shared import RedisPublishBuckets

log = structlog.get_logger("boost_tenancy.quotas")

PUBLISH_REFUSAL_REASONS: Final = ("rate", "size", "backlog")

OnRefused = Callable[[TenantId, str, str], None]
"""(tenant, queue, reason) of each refused publish; must not raise."""


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def wire_size(message: WireMessage) -> int:
    """Bytes a message weighs for the limits: its body (UTF-8 for text) and its properties'
    names and values (UTF-8); the broker's own headers are not counted."""
    body = message.body
    properties = message.properties
    # One joined text instead of a loop: this runs on every send.
    text = "".join(properties) + "".join(properties.values())
    return (len(body) if isinstance(body, bytes) else _utf8_len(body)) + _utf8_len(text)


class PublishGuard:
    """Publishing limits: a default for every tenant, overrides per tenant, per queue, or per
    tenant and queue, changeable while running (the next publish sees them).

    A tenant's own limits (set_limits(tenant=t), else the default) fill its tenant-wide
    buckets. Limits set for a queue (queue=q, for every tenant, or tenant=t and queue=q, which
    wins over the queue's) add buckets for that queue alone, taken besides the tenant-wide ones.
    Size caps add up the same way: the smaller of the tenant-wide cap and the queue's applies
    (0 is no cap).

    With policy_of (a PolicyResolver's, quotas/policy.py), an operator's run-time policy of the
    tenant wins over both for the fields it sets; a changed policy is seen by the tenant's next
    publish, and restarts only that tenant's buckets.

    With shared (RedisPublishBuckets), the buckets are taken in Redis, so every process using it
    shares each tenant's rate; balances there carry over a change of limits (clamped to the new
    capacity). When Redis cannot answer (an error, a timeout of at most the client's socket
    timeout, or the breaker open after one) the publish is decided by this process's own
    buckets instead, as without Redis; that is logged once per outage. Size caps and the backlog
    quota are always decided here.
    """

    def __init__(
        self,
        default: PublishLimits = UNLIMITED_PUBLISHING,
        *,
        on_refused: OnRefused | None = None,
        clock: Callable[[], float] = time.monotonic,
        idle_s: float = 600.0,
        policy_of: Callable[[TenantId], TenantPolicy] | None = None,
        backlog: BacklogSource | None = None,
        shared: RedisPublishBuckets | None = None,
    ) -> None:
        self._on_refused = on_refused
        self._policy_of = policy_of
        self._backlog = backlog
        self._shared = shared
        self._shared_down = False
        self._clock = clock
        self._idle_s = check_idle_s("PublishGuard", idle_s)
        self._lock = threading.Lock()
        self._limits: dict[tuple[TenantId | None, str | None], PublishLimits] = {}
        self._queues_limited: frozenset[str] = frozenset()
        self._lanes: dict[str, Lane] = {}
        self._queue_lanes: dict[tuple[str, str], Lane] = {}
        self._refused: dict[tuple[TenantId, str], int] = {}
        self._active = False
        self._last_sweep = clock()
        self.set_limits(default)

    # -- policy ----------------------------------------------------------------------------------
    def set_limits(
        self,
        limits: PublishLimits,
        *,
        tenant: TenantId | str | None = None,
        queue: str | None = None,
    ) -> None:
        """Set the default (no tenant, no queue), a tenant's, a queue's or a tenant's queue's."""
        if not isinstance(limits, PublishLimits):
            raise TypeError(f"limits must be PublishLimits, got {type(limits).__name__}")
        key = (None if tenant is None else TenantId.parse(tenant), _queue(queue))
        with self._lock:
            self._limits[key] = limits
            self._changed(key[0])

    def clear_limits(self, *, tenant: TenantId | str | None, queue: str | None = None) -> None:
        """Drop an override (the default cannot be dropped, only set)."""
        key = (None if tenant is None else TenantId.parse(tenant), _queue(queue))
        if key == (None, None):
            raise ValueError("the default limits can be replaced, not cleared")
        with self._lock:
            if self._limits.pop(key, None) is not None:
                self._changed(key[0])

    def limits_for(self, tenant: TenantId, queue: str | None = None) -> PublishLimits:
        """The limits set for tenant's queue when queue is given and has any, else the
        tenant's own: its override, else the default, with its run-time policy applied."""
        limits = self._limits
        if queue is not None:
            found = limits.get((tenant, queue)) or limits.get((None, queue))
            if found is not None:
                return found
        policy = None if self._policy_of is None else self._policy_of(tenant)
        return self._own_limits(tenant, policy)

    def _own_limits(self, tenant: TenantId, policy: TenantPolicy | None) -> PublishLimits:
        own = self._limits.get((tenant, None)) or self._limits[(None, None)]
        return own if policy is None else policy.applied_to(own)

    def bucket_count(self) -> int:
        """Buckets held now (tests, benchmarks)."""
        with self._lock:
            lanes = [*self._lanes.values(), *self._queue_lanes.values()]
        return sum(len(lane.buckets) for lane in lanes)

    def _changed(self, tenant: TenantId | None) -> None:
        # Called with the lock held. Balances start over (full) under the new limits: the
        # tenant's alone when only its limits changed.
        if tenant is None:
            self._lanes, self._queue_lanes = {}, {}
        else:
            self._lanes.pop(tenant.value, None)
            for key in [k for k in self._queue_lanes if k[0] == tenant.value]:
                del self._queue_lanes[key]
        self._queues_limited = frozenset(q for _, q in self._limits if q is not None)
        # With run-time policies any tenant may be limited at any time.
        self._active = self._policy_of is not None or any(
            not lim.unlimited for lim in self._limits.values()
        )

    # -- enforcing -------------------------------------------------------------------------------
    def check(self, tenant: TenantId, queue: str, messages: Sequence[WireMessage]) -> None:
        """Admit messages of tenant to queue, or raise MessageTooLargeError,
        BacklogQuotaExceededError or PublishRateExceededError (nothing taken from any bucket
        then).

        The order of checks: size first (a message too large is refused whatever the buckets
        hold), then the tenant's messages/s and bytes/s buckets and, where the queue has limits,
        the queue's, all taken together or not at all. Buckets are this process's, or with
        `shared` (quotas/shared.py) every producing process's, in Redis. Each refusal is counted
        by tenant and reason and told to on_refused (accounting).
        """
        if not self._active or not messages:
            return
        if len(messages) == 1:
            largest = total = wire_size(messages[0])
        else:
            sizes = [wire_size(m) for m in messages]
            largest, total = max(sizes), sum(sizes)
        count = len(messages)
        with self._lock:
            now = self._clock()
            lanes = self._lanes_for(tenant, queue, now)
            cap = (
                lanes[0].cap
                if len(lanes) == 1
                else min((c for c in (lanes[0].cap, lanes[1].cap) if c), default=0)
            )
            quota = lanes[0].limits.max_queued_messages
            queued = (
                self._backlog.queued(tenant, queue) if quota and self._backlog is not None else None
            )
            wait = 0.0
            if cap and largest > cap:
                refusal: str | None = "size"
            elif queued is not None and queued + count > quota:
                refusal = "backlog"
            elif self._shared is None:
                refusal, wait = take_buckets(lanes, count, max(1, total), now)
            else:
                refusal = None
        if refusal is None and self._shared is not None:
            # Outside the lock: a Redis round trip (or a timeout) must not hold up this
            # process's other publishes.
            refusal, wait = self._take_shared(self._shared, lanes, count, max(1, total))
        if refusal is None:
            return
        self._refuse(tenant, queue, refusal)
        if refusal == "size":
            raise MessageTooLargeError(
                tenant.value,
                queue,
                f"a message of {largest} bytes is over the limit of {cap} bytes "
                "(body and properties)",
            )
        if refusal == "backlog" and self._backlog is not None:
            raise BacklogQuotaExceededError(
                tenant.value,
                queue,
                f"the tenant's queue holds {queued} message(s); its quota is {quota}",
                retry_after_s=self._backlog.refresh_s,
            )
        raise PublishRateExceededError(
            tenant.value,
            queue,
            f"{count} message(s) of {total} bytes over the publishing rate "
            f"({rate_text(lanes)}); admitted again in {wait:.3f} s",
            retry_after_s=wait,
        )

    def _lanes_for(self, tenant: TenantId, queue: str, now: float) -> tuple[Lane, ...]:
        # Called with the lock held.
        if now - self._last_sweep >= self._idle_s / 2:
            self._sweep(now)
        lane = self._lanes.get(tenant.value)
        policy = None if self._policy_of is None else self._policy_of(tenant)
        if lane is None or lane.policy is not policy:
            limits = self._own_limits(tenant, policy)
            lane = Lane(
                limits, limits.max_message_bytes, now, policy, self._shared_of(tenant, None)
            )
            self._lanes[tenant.value] = lane
        lane.used_at = now
        if queue not in self._queues_limited:
            return (lane,)
        queue_lane = self._queue_lanes.get((tenant.value, queue))
        if queue_lane is None:
            limits = self.limits_for(tenant, queue)
            queue_lane = Lane(
                limits, limits.max_message_bytes, now, shared=self._shared_of(tenant, queue)
            )
            self._queue_lanes[(tenant.value, queue)] = queue_lane
        queue_lane.used_at = now
        return (lane, queue_lane)

    def _shared_of(
        self, tenant: TenantId, queue: str | None
    ) -> tuple[RedisPublishBuckets, str, str | None] | None:
        return None if self._shared is None else (self._shared, tenant.value, queue)

    def _take_shared(
        self, shared: RedisPublishBuckets, lanes: tuple[Lane, ...], count: int, total: int
    ) -> tuple[str | None, float]:
        """Take from every bucket in Redis, in one script call; when Redis cannot answer, from
        this process's buckets (see the class docstring)."""
        if len(lanes) == 1:
            lane = lanes[0]
            keys, specs = lane.shared_keys, lane.shared_specs
            units = [total if counts_bytes else count for _, counts_bytes in lane.buckets]
        else:
            keys = tuple(k for lane in lanes for k in lane.shared_keys)
            specs = tuple(s for lane in lanes for s in lane.shared_specs)
            units = [
                total if counts_bytes else count
                for lane in lanes
                for _, counts_bytes in lane.buckets
            ]
        if not keys:
            return None, 0.0
        try:
            admitted, wait = shared.take_all(keys, specs, units)
        except Exception as exc:  # Redis unreachable, hung or failing: this process decides
            with self._lock:
                first, self._shared_down = not self._shared_down, True
                local = take_buckets(lanes, count, total, self._clock())
            if first:
                log.warning(
                    "publish_limits_shared_unavailable",
                    error_type=type(exc).__name__,
                    error=str(exc),
                    fallback="per-process buckets",
                )
            return local
        if self._shared_down:
            with self._lock:
                restored, self._shared_down = self._shared_down, False
            if restored:
                log.info("publish_limits_shared_restored")
        return (None, 0.0) if admitted else ("rate", wait)

    def _sweep(self, now: float) -> None:
        # Called with the lock held, at most every idle_s / 2: a lane idle for idle_s whose
        # buckets have refilled goes (a new one starts full anyway); one still repaying a
        # deficit stays, so going quiet does not forgive a debt.
        self._last_sweep = now
        for lanes in (self._lanes, self._queue_lanes):
            for key, lane in list(lanes.items()):
                if now - lane.used_at >= self._idle_s and all(b.full(now) for b, _ in lane.buckets):
                    del lanes[key]  # type: ignore[arg-type]

    def _refuse(self, tenant: TenantId, queue: str, reason: str) -> None:
        with self._lock:
            key = (tenant, reason)
            self._refused[key] = self._refused.get(key, 0) + 1
        if self._on_refused is not None:
            self._on_refused(tenant, queue, reason)

    def refused(self) -> Mapping[tuple[TenantId, str], int]:
        """Refusals so far by (tenant, reason)."""
        with self._lock:
            return dict(self._refused)


def _queue(queue: str | None) -> str | None:
    return None if queue is None else check_queue_name(queue)


__all__ = ["PUBLISH_REFUSAL_REASONS", "OnRefused", "PublishGuard", "wire_size"]
