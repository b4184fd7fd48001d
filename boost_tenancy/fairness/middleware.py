"""The fairness middleware: per-tenant concurrency by tier and per-tenant rates, by deferral.

A message over a limit is deferred (re-sent later, no attempt counted), never rejected or dropped.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.concurrency import ConcurrencyLimiter, InMemoryConcurrencyLimiter
from boost_tenancy.fairness.rates import RatePolicy, TokenBucketLimiter
from boost_tenancy.fairness.redis_backend import (
    DEFAULT_PREFIX,
    RedisConcurrencyLimiter,
    RedisTokenBucketLimiter,
    redis_breaker,
    redis_client,
)
from boost_tenancy.fairness.tiers import TierLimits, TierResolver, open_tier_store
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.middleware import Handler
from boost_tenancy.processing.outcomes import Defer, Outcome
from boost_tenancy.processing.processor import HandlerContext
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.fairness")

DEFAULT_TIER_STORE: Final = "sqlite:///var/boost-tiers.sqlite3"
_WARN_EVERY_S: Final = 60.0

FairnessEvent = Callable[[TenantId, str], None]


class _ThrottledWarning:
    """One warning per event name per interval, with the count of those left out.

    A Redis outage fails every message; one line per message would drown the log.
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


class FairnessMiddleware:
    """Defers a tenant's message while the tenant is over its rate or its tier's concurrency.

    Per message: (1) take a concurrency slot for the message id, limited by the tenant's tier
    (TierLimits.for_tier(tiers.tier_of(tenant))), else Defer(defer_ms + jitter, "concurrency");
    (2) take one unit of the tenant's rate meter, else release the slot and
    Defer(max(retry_after, defer_ms) + jitter, "rate"); (3) run the handler and release the slot
    however it ends. The slot is taken before the rate unit because a slot can be given back and
    a token cannot: a message deferred for concurrency, and re-sent many times, would otherwise
    spend the tenant's rate on deliveries that never ran.

    Jitter (rand() * jitter_ms) spreads deferred messages so they do not all return at once.
    on_event(tenant, "admitted" | "deferred_rate" | "deferred_concurrency") is told of every
    decision, for accounting; it must be cheap, and an exception from it is logged and ignored.

    Limiter failures (Redis down) fail open: the message is admitted and a warning logged (at
    most once a minute per kind). Failing closed would stop every tenant's processing while Redis
    is away; fairness bounds a noisy tenant, and is not worth an outage of all of them
    (availability first). Tier lookups never fail: the resolver answers its cached tier or FREE.
    """

    def __init__(
        self,
        *,
        concurrency: ConcurrencyLimiter,
        tiers: TierResolver,
        limits: TierLimits,
        rates: TokenBucketLimiter | RedisTokenBucketLimiter | None = None,
        meter: str = "messages",
        defer_ms: int = 1000,
        jitter_ms: int = 1000,
        rand: Callable[[], float] = random.random,
        on_event: FairnessEvent | None = None,
    ) -> None:
        for name, value in (("defer_ms", defer_ms), ("jitter_ms", jitter_ms)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"FairnessMiddleware {name} must be an integer >= 0: {value!r}")
        self._concurrency = concurrency
        self._tiers = tiers
        self._limits = limits
        self._rates = rates
        self._meter = meter
        self._defer_ms = defer_ms
        self._jitter_ms = jitter_ms
        self._rand = rand
        self._on_event = on_event
        self._warn = _ThrottledWarning()

    def close(self) -> None:
        """Stop the tier refresh threads and close the tier store and the limiters' clients."""
        self._tiers.close()
        for limiter in (self._concurrency, self._rates):
            close = getattr(limiter, "close", None)
            if callable(close):
                close()

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome:
        tenant = message.tenant
        message_id = message.message_id
        limit = self._limits.for_tier(self._tiers.tier_of(tenant))
        try:
            holds_slot = self._concurrency.try_acquire(tenant, message_id, limit)
        except Exception as exc:  # fail open, see the class docstring
            self._warn(
                "fairness_concurrency_unavailable", error_type=type(exc).__name__, error=str(exc)
            )
            holds_slot = True
        if not holds_slot:
            self._event(tenant, "deferred_concurrency")
            return Defer(delay_ms=self._defer_ms + self._jitter(), reason="concurrency")
        try:
            retry_after_ms = self._rate_wait_ms(tenant)
            if retry_after_ms is not None:
                self._event(tenant, "deferred_rate")
                delay = max(retry_after_ms, self._defer_ms) + self._jitter()
                return Defer(delay_ms=delay, reason="rate")
            self._event(tenant, "admitted")
            return call_next(message, ctx)
        finally:
            self._release(tenant, message_id)

    def _rate_wait_ms(self, tenant: TenantId) -> int | None:
        """None when admitted, else the wait the bucket asks for, in whole milliseconds."""
        if self._rates is None:
            return None
        try:
            admission = self._rates.take(tenant, self._meter)
        except Exception as exc:  # fail open, see the class docstring
            self._warn("fairness_rate_unavailable", error_type=type(exc).__name__, error=str(exc))
            return None
        if admission.admitted:
            return None
        return math.ceil(admission.retry_after_s * 1000)

    def _release(self, tenant: TenantId, message_id: str) -> None:
        try:
            self._concurrency.release(tenant, message_id)
        except Exception as exc:  # a lease left behind expires by itself
            self._warn("fairness_release_failed", error_type=type(exc).__name__, error=str(exc))

    def _jitter(self) -> int:
        return int(self._rand() * self._jitter_ms) if self._jitter_ms else 0

    def _event(self, tenant: TenantId, event: str) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(tenant, event)
        except Exception as exc:  # accounting must not decide a message's outcome
            self._warn("fairness_event_hook_failed", error_type=type(exc).__name__, error=str(exc))


@dataclass(frozen=True, slots=True, kw_only=True)
class FairnessSettings:
    """What build_fairness needs; config.fairness_from_env reads it from BOOST_* variables."""

    rate: RatePolicy = field(default_factory=lambda: RatePolicy(rate_per_s=0))
    tier_limits: TierLimits = field(default_factory=TierLimits)
    tier_store_url: str = DEFAULT_TIER_STORE
    tier_ttl_s: float = 60.0
    redis_url: str = ""
    """Empty: limits are per process. Otherwise shared by every process using this Redis."""
    redis_prefix: str = DEFAULT_PREFIX
    defer_ms: int = 1000
    jitter_ms: int = 1000

    def __post_init__(self) -> None:
        for name in ("defer_ms", "jitter_ms"):
            value: object = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"FairnessSettings.{name} must be an integer >= 0: {value!r}")


def build_fairness(
    settings: FairnessSettings, *, on_event: FairnessEvent | None = None
) -> FairnessMiddleware:
    """The middleware the settings describe: Redis-backed limits when redis_url is set, else
    per-process ones; tiers from the tier store (opened here, created if missing).
    """
    tiers = TierResolver(open_tier_store(settings.tier_store_url), ttl_s=settings.tier_ttl_s)
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
    return FairnessMiddleware(
        concurrency=concurrency,
        tiers=tiers,
        limits=settings.tier_limits,
        rates=rates,
        defer_ms=settings.defer_ms,
        jitter_ms=settings.jitter_ms,
        on_event=on_event,
    )


__all__ = [
    "DEFAULT_TIER_STORE",
    "FairnessEvent",
    "FairnessMiddleware",
    "FairnessSettings",
    "build_fairness",
]
