"""Per-tenant rate limits: token buckets per (tenant, meter), reconfigurable while running.

Deficit buckets: a batch larger than the capacity is admitted while any token remains.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.frozen import fast_init
from boost_tenancy.tenancy import TenantId

DEFAULT_BURST_S: Final = 10.0
DEFAULT_METER: Final = "messages"
# Float refills (0.1 s x 5/s) land a hair below a whole token; without a tolerance the last token
# of a window would be refused.
TOKEN_EPSILON: Final = 1e-9
# An oversized batch needs the balance above zero, not at it: this much past the repayment.
OVERSIZE_MARGIN_S: Final = 0.001


def check_idle_s(owner: str, idle_s: object) -> float:
    """How long an unused bucket is kept, seconds: a finite number > 0, else ConfigError naming
    owner (the class keeping the buckets)."""
    if not (isinstance(idle_s, int | float) and math.isfinite(idle_s) and idle_s > 0):
        raise ConfigError(f"{owner} idle_s must be a positive number, got {idle_s!r}")
    return float(idle_s)


def check_limit(owner: object, name: str, zero_means: str) -> int | float:
    """owner.name, refused (ConfigError naming both) unless a finite number >= 0."""
    value: object = getattr(owner, name)
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(
            f"{type(owner).__name__}.{name} must be a finite number >= 0 (0 = {zero_means}), "
            f"got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RatePolicy:
    """rate_per_s units per second with capacity rate_per_s * burst_s.

    rate_per_s 0 means unlimited; burst_s 0 falls back to 10 (a zero-capacity bucket would admit
    nothing); negative or non-finite values are refused.
    """

    rate_per_s: float
    burst_s: float = DEFAULT_BURST_S

    def __post_init__(self) -> None:
        for name in ("rate_per_s", "burst_s"):
            value = check_limit(
                self, name, "unlimited" if name == "rate_per_s" else "the default of 10"
            )
            object.__setattr__(self, name, float(value))
        if self.burst_s == 0:
            object.__setattr__(self, "burst_s", DEFAULT_BURST_S)

    @property
    def unlimited(self) -> bool:
        return self.rate_per_s == 0

    @property
    def capacity(self) -> float:
        """Tokens a full bucket holds (inf when unlimited)."""
        return math.inf if self.unlimited else self.rate_per_s * self.burst_s


UNLIMITED: Final = RatePolicy(rate_per_s=0)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """Whether units were admitted and, if not, how long until they would be."""

    admitted: bool
    retry_after_s: float = 0.0


def check_units(n: object) -> int:
    """Units taken at once must be a positive integer."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"units taken must be an integer of at least 1, got {n!r}")
    return n


def check_meter(meter: object) -> str:
    if not isinstance(meter, str) or not meter or not meter.isascii() or not meter.isprintable():
        raise ConfigError(f"meter must be a non-empty printable ASCII name, got {meter!r}")
    return meter


class PolicyTable:
    """Which policy applies: a (tenant, meter) override, else the meter's default, else default.

    Shared by the in-process and the Redis limiter; changes apply on the next take.
    """

    def __init__(self, default: RatePolicy) -> None:
        self._default = default
        self._meters: dict[str, RatePolicy] = {}
        self._tenants: dict[tuple[TenantId, str], RatePolicy] = {}
        self._lock = threading.Lock()

    def set(self, policy: RatePolicy, *, tenant: TenantId | None, meter: str) -> None:
        if not isinstance(policy, RatePolicy):
            raise ConfigError(f"policy must be a RatePolicy, got {type(policy).__name__}")
        check_meter(meter)
        with self._lock:
            if tenant is None:
                self._meters[meter] = policy
            else:
                self._tenants[(TenantId.parse(tenant), meter)] = policy

    def clear(self, *, tenant: TenantId, meter: str) -> None:
        with self._lock:
            self._tenants.pop((tenant, meter), None)

    def get(self, tenant: TenantId, meter: str) -> RatePolicy:
        # Dict reads are atomic under the GIL; the lock only orders writers.
        override = self._tenants.get((tenant, meter))
        if override is not None:
            return override
        return self._meters.get(meter, self._default)


def bucket_step(tokens: float, policy: RatePolicy, n: int) -> tuple[bool, float, float]:
    """One decision on a refilled balance: (admitted, new balance, retry_after_s).

    The arithmetic both limiters follow (the Redis script mirrors it).
    """
    capacity = policy.capacity
    if tokens + TOKEN_EPSILON >= n:
        return True, tokens - n, 0.0
    if n > capacity:
        if tokens > 0:
            return True, tokens - n, 0.0
        return False, tokens, -tokens / policy.rate_per_s + OVERSIZE_MARGIN_S
    return False, tokens, (n - tokens) / policy.rate_per_s


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated_at: float


class TokenBucketLimiter:
    """Token buckets of this process, one per (tenant, meter), created full on first use.

    Idle buckets are dropped by a lazy sweep, run on take at most every idle_s / 2: a bucket
    untouched for idle_s that has refilled to capacity goes (a new one would start full anyway);
    one still repaying a deficit stays, so going quiet does not forgive a debt.
    """

    def __init__(
        self,
        default: RatePolicy = UNLIMITED,
        *,
        idle_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._idle_s = check_idle_s("TokenBucketLimiter", idle_s)
        self._policies = PolicyTable(default)
        self._clock = clock
        self._buckets: dict[tuple[TenantId, str], _Bucket] = {}
        self._lock = threading.Lock()
        self._last_sweep = clock()

    def set_policy(
        self, policy: RatePolicy, *, tenant: TenantId | None = None, meter: str = DEFAULT_METER
    ) -> None:
        """Change a limit while running: one tenant's override, or the meter's default."""
        self._policies.set(policy, tenant=tenant, meter=meter)

    def clear_policy(self, *, tenant: TenantId, meter: str = DEFAULT_METER) -> None:
        """Drop a tenant's override; the meter's default applies again."""
        self._policies.clear(tenant=tenant, meter=meter)

    def policy_for(self, tenant: TenantId, meter: str = DEFAULT_METER) -> RatePolicy:
        return self._policies.get(tenant, meter)

    def take(self, tenant: TenantId, meter: str = DEFAULT_METER, n: int = 1) -> Admission:
        """Admit n units of the tenant's meter, or say how long until they would be admitted."""
        check_units(n)
        policy = self._policies.get(tenant, meter)
        now = self._clock()
        key = (tenant, meter)
        with self._lock:
            self._maybe_sweep(now)
            if policy.unlimited:
                self._buckets.pop(key, None)
                return Admission(admitted=True)
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(tokens=policy.capacity, updated_at=now)
            elapsed = max(0.0, now - bucket.updated_at)
            # min() also clamps a balance down to a capacity lowered since the last take.
            tokens = min(policy.capacity, bucket.tokens + elapsed * policy.rate_per_s)
            admitted, bucket.tokens, retry_after = bucket_step(tokens, policy, n)
            bucket.updated_at = now
            return Admission(admitted=admitted, retry_after_s=retry_after)

    def bucket_count(self) -> int:
        """Buckets held now (for tests and metrics)."""
        with self._lock:
            return len(self._buckets)

    def _maybe_sweep(self, now: float) -> None:
        # Called with the lock held; a sweep walks the map, so it runs at most every idle_s / 2.
        if now - self._last_sweep < self._idle_s / 2:
            return
        self._last_sweep = now
        for (tenant, meter), bucket in list(self._buckets.items()):
            idle = now - bucket.updated_at
            if idle < self._idle_s:
                continue
            policy = self._policies.get(tenant, meter)
            refilled = policy.unlimited or (
                bucket.tokens + idle * policy.rate_per_s >= policy.capacity
            )
            if refilled:
                del self._buckets[(tenant, meter)]


__all__ = [
    "DEFAULT_BURST_S",
    "DEFAULT_METER",
    "UNLIMITED",
    "Admission",
    "PolicyTable",
    "RatePolicy",
    "TokenBucketLimiter",
    "bucket_step",
    "check_limit",
]
