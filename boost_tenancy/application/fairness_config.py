"""The fairness gate's BOOST_* variables (rates, concurrency, tiers, exemptions, hold and
defer), read into FairnessSettings strictly: a limit that would do nothing stops start-up."""

from __future__ import annotations

from collections.abc import Mapping

from boost_tenancy.envvars import env_flag, env_float, env_int, env_seconds
from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.fairness.rates import DEFAULT_BURST_S, RatePolicy
from boost_tenancy.fairness.settings import DEFAULT_RATE_PER_S, FairnessSettings
from boost_tenancy.fairness.tiers import TierLimits
from boost_tenancy.routing import check_logical_queue
from boost_tenancy.tenancy import TenantId

TIER_LIMIT_VARIABLES = (
    "BOOST_TIER_FREE_LIMIT",
    "BOOST_TIER_PRO_LIMIT",
    "BOOST_TIER_PRO_PLUS_LIMIT",
    "BOOST_TIER_ENTERPRISE_LIMIT",
)
FAIRNESS_VARIABLES = (
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


def tier_limits_from_env(env: Mapping[str, str]) -> TierLimits:
    """BOOST_TIER_FREE_LIMIT, _PRO_, _PRO_PLUS_ and _ENTERPRISE_LIMIT (each >= 1)."""
    defaults = TierLimits()
    return TierLimits(
        free=env_int(env, "BOOST_TIER_FREE_LIMIT", defaults.free, minimum=1),
        pro=env_int(env, "BOOST_TIER_PRO_LIMIT", defaults.pro, minimum=1),
        pro_plus=env_int(env, "BOOST_TIER_PRO_PLUS_LIMIT", defaults.pro_plus, minimum=1),
        enterprise=env_int(env, "BOOST_TIER_ENTERPRISE_LIMIT", defaults.enterprise, minimum=1),
    )


def _given(env: Mapping[str, str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if env.get(name, "").strip()]


def _list(env: Mapping[str, str], name: str) -> list[str]:
    return [item.strip() for item in env.get(name, "").split(",") if item.strip()]


def fairness_from_env(env: Mapping[str, str]) -> FairnessSettings | None:
    """The fairness gate's settings, or None when BOOST_FAIRNESS=off (it is on by default).

    Strict, because a limit that silently does nothing is worse than none: every value is
    checked whether or not fairness is on (a negative one is refused either way), a limit given
    while its mechanism is off stops start-up naming the variable (any fairness variable with
    BOOST_FAIRNESS=off; a tier limit without BOOST_TIER_STORE; BOOST_TENANT_CONCURRENCY with
    it, where the tiers decide), and an exempt tenant or queue must be a valid name.
    """
    enabled = env_flag(env, "BOOST_FAIRNESS", default=True)
    try:
        exempt_tenants = frozenset(
            TenantId.parse(t) for t in _list(env, "BOOST_FAIRNESS_EXEMPT_TENANTS")
        )
    except InvalidTenantError as exc:
        raise ConfigError(f"BOOST_FAIRNESS_EXEMPT_TENANTS: {exc}") from None
    exempt_queues: set[str] = set()
    for queue in _list(env, "BOOST_FAIRNESS_EXEMPT_QUEUES"):
        try:
            exempt_queues.add(check_logical_queue(queue))
        except ConfigError as exc:
            raise ConfigError(f"BOOST_FAIRNESS_EXEMPT_QUEUES: {exc}") from None
    tier_store = env.get("BOOST_TIER_STORE", "").strip()
    settings = FairnessSettings(
        rate=RatePolicy(
            rate_per_s=env_float(env, "BOOST_RATE_PER_S", DEFAULT_RATE_PER_S),
            burst_s=env_seconds(env, "BOOST_RATE_BURST_S", DEFAULT_BURST_S),
        ),
        concurrency=env_int(env, "BOOST_TENANT_CONCURRENCY", 0),
        tier_limits=tier_limits_from_env(env),
        tier_store_url=tier_store,
        redis_url=env.get("BOOST_REDIS_URL", "").strip(),
        exempt_tenants=exempt_tenants,
        exempt_queues=frozenset(exempt_queues),
        hold_s=env_seconds(env, "BOOST_FAIRNESS_HOLD_S", 300.0, minimum=0.001),
        defer_ms=env_int(env, "BOOST_DEFER_MS", 1000),
        jitter_ms=env_int(env, "BOOST_DEFER_JITTER_MS", 1000),
    )
    if not enabled:
        given = _given(env, FAIRNESS_VARIABLES)
        if given:
            raise ConfigError(
                f"{', '.join(given)} set while BOOST_FAIRNESS=off: the limit would do nothing; "
                "remove it or turn fairness on"
            )
        return None
    tier_limits = _given(env, TIER_LIMIT_VARIABLES)
    if tier_limits and not tier_store:
        raise ConfigError(
            f"{', '.join(tier_limits)} set without BOOST_TIER_STORE: tier limits apply only to "
            "tenants with a tier; name the tier store, or set BOOST_TENANT_CONCURRENCY instead"
        )
    if tier_store and _given(env, ("BOOST_TENANT_CONCURRENCY",)):
        raise ConfigError(
            "BOOST_TENANT_CONCURRENCY set with BOOST_TIER_STORE: the tiers decide each tenant's "
            "concurrency (BOOST_TIER_*_LIMIT); remove one of them"
        )
    return settings


__all__ = [
    "FAIRNESS_VARIABLES",
    "TIER_LIMIT_VARIABLES",
    "fairness_from_env",
    "tier_limits_from_env",
]
