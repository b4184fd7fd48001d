"""Token buckets on an injected clock: the rate over a window, deficits, unlimited, validation,
reconfiguration while running and the lazy sweep of idle buckets; fairness settings from env."""

from __future__ import annotations

import pytest

from boost_tenancy import ConfigError, TenantId
from boost_tenancy.application.environment import fairness_from_env
from boost_tenancy.fairness import RatePolicy, TierLimits, TokenBucketLimiter
from boost_tenancy.fairness.settings import FAIRNESS_VARIABLES, default_concurrency
from tests.conftest import ManualClock as Clock

A = TenantId("org-A")
B = TenantId("org-B")


def drain(limiter: TokenBucketLimiter, tenant: TenantId = A, meter: str = "messages") -> int:
    admitted = 0
    while limiter.take(tenant, meter).admitted:
        admitted += 1
    return admitted


def test_admits_exactly_capacity_plus_rate_times_window() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=5, burst_s=2), clock=clock)
    admitted = drain(limiter)
    assert admitted == 10  # the full bucket: 5/s x 2 s
    for _ in range(100):  # 10 s in steps of 0.1 s
        clock.advance(0.1)
        admitted += drain(limiter)
    assert admitted == 10 + 5 * 10


def test_denial_says_how_long_until_admitted() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=4, burst_s=1), clock=clock)
    drain(limiter)
    denied = limiter.take(A)
    assert not denied.admitted
    assert denied.retry_after_s == pytest.approx(0.25)
    clock.advance(0.24)
    assert not limiter.take(A).admitted
    clock.advance(0.01)
    assert limiter.take(A).admitted


def test_oversized_batch_is_admitted_into_deficit_then_blocks_until_repaid() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=2, burst_s=5), clock=clock)  # capacity 10
    assert limiter.take(A, n=25).admitted  # larger than the bucket, admitted: balance -15
    after = limiter.take(A)
    assert not after.admitted
    assert after.retry_after_s == pytest.approx(8.0)  # (1 - -15) / 2
    again = limiter.take(A, n=25)
    assert not again.admitted  # an oversized batch needs a balance above zero
    assert again.retry_after_s == pytest.approx(7.5, abs=0.01)
    clock.advance(7.9)
    assert not limiter.take(A).admitted
    clock.advance(0.1)
    assert limiter.take(A).admitted


def test_oversized_batch_is_admitted_while_any_token_remains() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=1, burst_s=3), clock=clock)  # capacity 3
    assert limiter.take(A, n=3).admitted
    clock.advance(0.5)  # 0.5 tokens
    assert not limiter.take(A, n=2).admitted  # within capacity: needs the whole 2
    assert limiter.take(A, n=4).admitted  # over capacity: any token is enough


def test_rate_zero_is_unlimited_and_keeps_no_bucket() -> None:
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=0), clock=Clock())
    assert all(limiter.take(A, n=1000).admitted for _ in range(10_000))
    assert limiter.bucket_count() == 0
    assert TokenBucketLimiter(clock=Clock()).take(A).admitted  # the default is unlimited


@pytest.mark.parametrize("field", ["rate_per_s", "burst_s"])
@pytest.mark.parametrize("value", [-1, -0.001, float("nan"), float("inf")])
def test_negative_or_non_finite_policy_is_refused_naming_the_field(
    field: str, value: float
) -> None:
    values = {"rate_per_s": 1.0, "burst_s": 1.0, field: value}
    with pytest.raises(ConfigError, match=field):
        RatePolicy(**values)


def test_burst_zero_falls_back_to_ten_seconds() -> None:
    policy = RatePolicy(rate_per_s=3, burst_s=0)
    assert policy.burst_s == 10
    assert policy.capacity == 30


def test_units_must_be_positive() -> None:
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=1), clock=Clock())
    with pytest.raises(ConfigError, match="at least 1"):
        limiter.take(A, n=0)


def test_raising_a_tenants_rate_takes_effect_on_the_next_take() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=1, burst_s=1), clock=clock)
    assert limiter.take(A).admitted
    assert not limiter.take(A).admitted
    limiter.set_policy(RatePolicy(rate_per_s=100, burst_s=1), tenant=A)
    clock.advance(0.01)  # one token at 100/s, a hundredth at the old 1/s
    assert limiter.take(A).admitted
    # B still has the default policy.
    assert limiter.take(B).admitted
    assert not limiter.take(B).admitted


def test_lowering_the_default_clamps_a_full_bucket_to_the_new_capacity() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=10, burst_s=10), clock=clock)
    assert limiter.take(A).admitted  # the bucket exists with 99 tokens
    limiter.set_policy(RatePolicy(rate_per_s=1, burst_s=2))
    assert drain(limiter) == 2


def test_tenant_override_can_be_cleared_and_meters_are_separate() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=1, burst_s=1), clock=clock)
    limiter.set_policy(RatePolicy(rate_per_s=0), tenant=A)
    assert drain_limited(limiter, A) == 50
    limiter.clear_policy(tenant=A)
    assert drain(limiter, A) == 1
    limiter.set_policy(RatePolicy(rate_per_s=1, burst_s=3), meter="bytes")
    assert drain(limiter, A, meter="bytes") == 3
    assert limiter.policy_for(B, "bytes").capacity == 3


def drain_limited(limiter: TokenBucketLimiter, tenant: TenantId, at_most: int = 50) -> int:
    return sum(limiter.take(tenant).admitted for _ in range(at_most))


def test_idle_refilled_buckets_are_swept_lazily_but_a_debt_is_kept() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(RatePolicy(rate_per_s=1, burst_s=10), idle_s=60, clock=clock)
    limiter.take(A)
    limiter.take(B, n=200)  # deficit of 190: needs 200 s to refill
    assert limiter.bucket_count() == 2
    clock.advance(29)
    limiter.take(TenantId("org-C"))  # too soon for a sweep (idle_s / 2 = 30 s)
    assert limiter.bucket_count() == 3
    clock.advance(32)  # A idle 61 s and refilled; B still in debt; C idle 32 s
    limiter.take(TenantId("org-D"))
    assert limiter.bucket_count() == 3  # B, C, D
    clock.advance(200)
    limiter.take(TenantId("org-E"))
    assert limiter.bucket_count() == 1  # only E, created by this very take
    assert limiter.take(B).admitted  # the swept debt had been repaid: B starts full


# -- settings -------------------------------------------------------------------------------------
def test_settings_defaults_are_on_and_generous() -> None:
    settings = fairness_from_env({})
    assert settings is not None, "fairness is on by default"
    assert settings.rate == RatePolicy(rate_per_s=1000, burst_s=10)
    assert settings.concurrency == 0, "every worker but one (default_concurrency)"
    assert default_concurrency(4) == 3
    assert default_concurrency(1) == 1
    assert settings.tier_store_url == ""
    assert settings.redis_url == ""
    assert (settings.exempt_tenants, settings.exempt_queues) == (frozenset(), frozenset())
    assert settings.hold_s == 300
    assert (settings.defer_ms, settings.jitter_ms) == (1000, 1000)


def test_settings_from_env() -> None:
    settings = fairness_from_env(
        {
            "BOOST_FAIRNESS": "on",
            "BOOST_RATE_PER_S": "2.5",
            "BOOST_RATE_BURST_S": "0",
            "BOOST_TIER_FREE_LIMIT": "2",
            "BOOST_TIER_PRO_LIMIT": "4",
            "BOOST_TIER_PRO_PLUS_LIMIT": "6",
            "BOOST_TIER_ENTERPRISE_LIMIT": "9",
            "BOOST_TIER_STORE": "postgresql://postgres@db/tiers",
            "BOOST_REDIS_URL": "redis://cache:6379/1",
            "BOOST_FAIRNESS_EXEMPT_TENANTS": "org-system, org-ops",
            "BOOST_FAIRNESS_EXEMPT_QUEUES": "sys.jobs",
            "BOOST_FAIRNESS_HOLD_S": "60",
            "BOOST_DEFER_MS": "500",
            "BOOST_DEFER_JITTER_MS": "0",
        }
    )
    assert settings is not None
    assert settings.rate == RatePolicy(rate_per_s=2.5, burst_s=10)
    assert settings.tier_limits == TierLimits(free=2, pro=4, pro_plus=6, enterprise=9)
    assert settings.tier_store_url == "postgresql://postgres@db/tiers"
    assert settings.redis_url == "redis://cache:6379/1"
    assert settings.exempt_tenants == {TenantId("org-system"), TenantId("org-ops")}
    assert settings.exempt_queues == {"sys.jobs"}
    assert settings.hold_s == 60
    assert (settings.defer_ms, settings.jitter_ms) == (500, 0)


def test_off_turns_fairness_off() -> None:
    assert fairness_from_env({"BOOST_FAIRNESS": "off"}) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BOOST_RATE_PER_S", "-1"),
        ("BOOST_RATE_PER_S", "fast"),
        ("BOOST_RATE_PER_S", "nan"),
        ("BOOST_RATE_BURST_S", "-5"),
        ("BOOST_TENANT_CONCURRENCY", "-2"),
        ("BOOST_TIER_FREE_LIMIT", "0"),
        ("BOOST_TIER_PRO_LIMIT", "x"),
        ("BOOST_TIER_PRO_PLUS_LIMIT", "-3"),
        ("BOOST_TIER_ENTERPRISE_LIMIT", "0"),
        ("BOOST_FAIRNESS_HOLD_S", "0"),
        ("BOOST_FAIRNESS_EXEMPT_TENANTS", "not a tenant!"),
        ("BOOST_FAIRNESS_EXEMPT_QUEUES", "tenant.org-a.cmd"),
        ("BOOST_DEFER_MS", "-1"),
        ("BOOST_DEFER_JITTER_MS", "1.5"),
        ("BOOST_FAIRNESS", "maybe"),
    ],
)
@pytest.mark.parametrize("switch", ["on", "off"])
def test_bad_settings_are_refused_at_start_up_naming_the_variable(
    name: str, value: str, switch: str
) -> None:
    """Whether or not fairness is on: a negative limit is refused either way."""
    env = {"BOOST_FAIRNESS": switch, name: value}
    with pytest.raises(ConfigError, match=name):
        fairness_from_env(env)


@pytest.mark.parametrize("name", [n for n in FAIRNESS_VARIABLES if n != "BOOST_FAIRNESS"])
def test_a_limit_given_while_fairness_is_off_stops_start_up(name: str) -> None:
    valid = {
        "BOOST_TIER_STORE": "sqlite:///x.sqlite3",
        "BOOST_REDIS_URL": "redis://cache:6379/0",
        "BOOST_FAIRNESS_EXEMPT_TENANTS": "org-system",
        "BOOST_FAIRNESS_EXEMPT_QUEUES": "sys.jobs",
    }
    with pytest.raises(ConfigError, match=f"{name} set while BOOST_FAIRNESS=off"):
        fairness_from_env({"BOOST_FAIRNESS": "off", name: valid.get(name, "5")})


def test_tier_limits_need_a_tier_store_and_exclude_a_fixed_concurrency() -> None:
    with pytest.raises(ConfigError, match="BOOST_TIER_PRO_LIMIT set without BOOST_TIER_STORE"):
        fairness_from_env({"BOOST_TIER_PRO_LIMIT": "4"})
    with pytest.raises(ConfigError, match="BOOST_TENANT_CONCURRENCY set with BOOST_TIER_STORE"):
        fairness_from_env(
            {"BOOST_TIER_STORE": "sqlite:///x.sqlite3", "BOOST_TENANT_CONCURRENCY": "2"}
        )


def test_tier_limits_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="enterprise"):
        TierLimits(enterprise=0)
