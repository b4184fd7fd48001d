"""What the fairness gate is built from, with defaults generous enough to be on by default.

application.environment.fairness_from_env reads FairnessSettings from BOOST_* variables;
build_fairness turns them into a FairnessGate with per-process or Redis-backed limiters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.concurrency import ConcurrencyLimiter, InMemoryConcurrencyLimiter
from boost_tenancy.fairness.gate import FairnessEvent, FairnessGate, LimitOf
from boost_tenancy.fairness.rates import RatePolicy, TokenBucketLimiter
from boost_tenancy.fairness.redis_backend import (
    DEFAULT_PREFIX,
    RedisConcurrencyLimiter,
    RedisTokenBucketLimiter,
    redis_breaker,
    redis_client,
)
from boost_tenancy.fairness.tiers import TierLimits, TierResolver, open_tier_store
from boost_tenancy.tenancy import TenantId

TIER_LIMIT_VARIABLES: Final = (
    "BOOST_TIER_FREE_LIMIT",
    "BOOST_TIER_PRO_LIMIT",
    "BOOST_TIER_PRO_PLUS_LIMIT",
    "BOOST_TIER_ENTERPRISE_LIMIT",
)
FAIRNESS_VARIABLES: Final = (
    "BOOST_RATE_PER_S",
    "BOOST_RATE_BURST_S",
    "BOOST_TENANT_CONCURRENCY",
    *TIER_LIMIT_VARIABLES,
    "BOOST_TIER_STORE",
    "BOOST_REDIS_URL",
    "BOOST_FAIRNESS_EXEMPT_TENANTS",
    "BOOST_FAIRNESS_EXEMPT_QUEUES",
    "BOOST_FAIRNESS_HOLD_S",
    "BOOST_DEFER_MS",
    "BOOST_DEFER_JITTER_MS",
)
"""Every variable of the fairness gate: each one is refused while BOOST_FAIRNESS=off."""

DEFAULT_RATE_PER_S: Final = 1_000.0
"""A ceiling a tenant of normal volume never meets (per process, or per fleet with Redis):
10,000 messages at once (10 s of burst), then 1,000 a second."""


def default_concurrency(workers: int) -> int:
    """Every worker but one: no tenant can hold them all while another tenant waits, and a
    process serving one tenant loses little."""
    return max(1, workers - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class FairnessSettings:
    """The limits and how they are enforced; every default is on and generous."""

    rate: RatePolicy = field(default_factory=lambda: RatePolicy(rate_per_s=DEFAULT_RATE_PER_S))
    concurrency: int = 0
    """Concurrent deliveries per tenant when no tier store is given; 0 = default_concurrency."""
    tier_limits: TierLimits = field(default_factory=TierLimits)
    tier_store_url: str = ""
    """Empty: no tiers, every tenant gets `concurrency`. Otherwise tiers from this store."""
    tier_ttl_s: float = 60.0
    redis_url: str = ""
    """Empty: limits are per process. Otherwise shared by every process using this Redis."""
    redis_prefix: str = DEFAULT_PREFIX
    exempt_tenants: frozenset[TenantId] = frozenset()
    """System work: these tenants pass the gate without limits (seed 002's system bypass)."""
    exempt_queues: frozenset[str] = frozenset()
    """Logical queues whose deliveries pass without limits."""
    hold_s: float = 300.0
    """A delivery held longer is deferred (re-sent later) instead of held on."""
    defer_ms: int = 1000
    jitter_ms: int = 1000
    """The delay of such a deferral: defer_ms plus up to jitter_ms."""

    def __post_init__(self) -> None:
        for name in ("defer_ms", "jitter_ms", "concurrency"):
            value: object = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"FairnessSettings.{name} must be an integer >= 0: {value!r}")
        if not self.hold_s > 0:
            raise ConfigError(f"FairnessSettings.hold_s must be positive: {self.hold_s!r}")
        object.__setattr__(
            self, "exempt_tenants", frozenset(TenantId.parse(t) for t in self.exempt_tenants)
        )


def build_fairness(
    settings: FairnessSettings, *, workers: int, on_event: FairnessEvent | None = None
) -> FairnessGate:
    """The gate the settings describe, for a runner of `workers` workers: Redis-backed limits
    when redis_url is set, else per-process ones; tiers when a tier store is named."""
    tiers: TierResolver | None = None
    limit_of: LimitOf
    if settings.tier_store_url:
        resolver = TierResolver(open_tier_store(settings.tier_store_url), ttl_s=settings.tier_ttl_s)
        tiers = resolver
        tier_limits = settings.tier_limits

        def limit_of(tenant: TenantId) -> int:
            return tier_limits.for_tier(resolver.tier_of(tenant))

    else:
        fixed = settings.concurrency or default_concurrency(workers)

        def limit_of(tenant: TenantId) -> int:
            return fixed

    concurrency: ConcurrencyLimiter
    rates: TokenBucketLimiter | RedisTokenBucketLimiter
    if settings.redis_url:
        client = redis_client(settings.redis_url)
        # One breaker for both: one Redis, so one timeout opens the circuit for every check.
        breaker = redis_breaker()
        concurrency = RedisConcurrencyLimiter(client, prefix=settings.redis_prefix, breaker=breaker)
        rates = RedisTokenBucketLimiter(
            client, settings.rate, prefix=settings.redis_prefix, breaker=breaker
        )
    else:
        concurrency = InMemoryConcurrencyLimiter()
        rates = TokenBucketLimiter(settings.rate)
    return FairnessGate(
        concurrency=concurrency,
        limit_of=limit_of,
        rates=rates,
        tiers=tiers,
        exempt_tenants=settings.exempt_tenants,
        exempt_queues=settings.exempt_queues,
        hold_s=settings.hold_s,
        defer_ms=settings.defer_ms,
        jitter_ms=settings.jitter_ms,
        on_event=on_event,
    )


__all__ = [
    "DEFAULT_RATE_PER_S",
    "FAIRNESS_VARIABLES",
    "TIER_LIMIT_VARIABLES",
    "FairnessSettings",
    "build_fairness",
    "default_concurrency",
]
