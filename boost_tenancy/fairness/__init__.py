"""Tenant fairness: per-tenant concurrency by subscription tier and per-tenant rate limits.

Over-limit messages are deferred, never dropped; limits are per process or shared through Redis.
"""

from boost_tenancy.fairness.accounting import Accounting, AccountingServer
from boost_tenancy.fairness.concurrency import ConcurrencyLimiter, InMemoryConcurrencyLimiter
from boost_tenancy.fairness.middleware import (
    DEFAULT_TIER_STORE,
    FairnessEvent,
    FairnessMiddleware,
    FairnessSettings,
    build_fairness,
)
from boost_tenancy.fairness.rates import Admission, RatePolicy, TokenBucketLimiter
from boost_tenancy.fairness.redis_backend import (
    RedisConcurrencyLimiter,
    RedisTokenBucketLimiter,
    redis_client,
)
from boost_tenancy.fairness.scheduling import FairWorkQueue
from boost_tenancy.fairness.tiers import (
    PostgresTierStore,
    SQLiteTierStore,
    Tier,
    TierLimits,
    TierResolver,
    TierStore,
    TierStoreError,
    open_tier_store,
)
from boost_tenancy.fairness.wiring import FairnessWiring

__all__ = [
    "DEFAULT_TIER_STORE",
    "Accounting",
    "AccountingServer",
    "Admission",
    "ConcurrencyLimiter",
    "FairWorkQueue",
    "FairnessEvent",
    "FairnessMiddleware",
    "FairnessSettings",
    "FairnessWiring",
    "InMemoryConcurrencyLimiter",
    "PostgresTierStore",
    "RatePolicy",
    "RedisConcurrencyLimiter",
    "RedisTokenBucketLimiter",
    "SQLiteTierStore",
    "Tier",
    "TierLimits",
    "TierResolver",
    "TierStore",
    "TierStoreError",
    "TokenBucketLimiter",
    "build_fairness",
    "open_tier_store",
    "redis_client",
]
