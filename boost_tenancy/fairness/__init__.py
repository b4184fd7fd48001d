"""Tenant fairness: per-tenant concurrency (by subscription tier) and per-tenant rate limits.

A tenant over a limit is held at the gate, unacknowledged and in order, never re-sent, dropped or
rejected; limits are per process or shared through Redis.
"""

from boost_tenancy.fairness.accounting import Accounting
from boost_tenancy.fairness.accounting_server import AccountingServer
from boost_tenancy.fairness.concurrency import ConcurrencyLimiter, InMemoryConcurrencyLimiter
from boost_tenancy.fairness.gate import Admitted, FairnessEvent, FairnessGate
from boost_tenancy.fairness.rates import Admission, RatePolicy, TokenBucketLimiter
from boost_tenancy.fairness.redis_backend import (
    RedisConcurrencyLimiter,
    RedisTokenBucketLimiter,
    redis_client,
)
from boost_tenancy.fairness.settings import FairnessSettings, build_fairness
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

__all__ = [
    "Accounting",
    "AccountingServer",
    "Admission",
    "Admitted",
    "ConcurrencyLimiter",
    "FairnessEvent",
    "FairnessGate",
    "FairnessSettings",
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
