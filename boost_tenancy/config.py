"""Every BOOST_* variable the toolkit reads, read here and only here, validated at start-up.

Entry points (the CLI, the sample services) call AppSettings.from_env once; nothing reads the
environment at import time, and a bad value raises ConfigError naming the variable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from boost_tenancy.envvars import env_flag, env_float, env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.middleware import DEFAULT_TIER_STORE, FairnessSettings
from boost_tenancy.fairness.rates import DEFAULT_BURST_S, RatePolicy
from boost_tenancy.fairness.tiers import TierLimits
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.runner import RunnerSettings
from boost_tenancy.resilience.retry import RetryPolicy
from boost_tenancy.routing import Routing, Topology, check_logical_queue, parse_topology
from boost_tenancy.transports.stomp import StompSettings

DEFAULT_ERROR_STORE = "sqlite:///var/boost-errors.sqlite3"


@dataclass(frozen=True, slots=True, kw_only=True)
class AppSettings:
    """Everything an entry point needs: broker, runner, error store, fairness and logging."""

    stomp: StompSettings
    runner: RunnerSettings
    error_store_url: str
    log_format: str
    log_level: str
    routing: Routing = field(default_factory=Routing)
    """The topology of every queue (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES)."""
    fairness: FairnessSettings | None = None
    """The limits, when BOOST_FAIRNESS is on; None runs without them."""
    metrics_port: int = 0
    """BOOST_METRICS_PORT: where the per-tenant accounting is served; 0 = not served."""
    metrics_tenant_label: bool = False
    broker_url: str = ""
    """BOOST_BROKER_URL: the transport by URL (transports/registry.py); empty means
    stomp://BOOST_STOMP_HOST:BOOST_STOMP_PORT."""

    def transport_url(self) -> str:
        """The URL the transport is opened from."""
        return self.broker_url or f"stomp://{self.stomp.host}:{self.stomp.port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AppSettings:
        """Read BOOST_* variables (documented in docs/configuration.md)."""
        base_ms = env_int(env, "BOOST_RETRY_BASE_MS", 1_000)
        max_ms = env_int(env, "BOOST_RETRY_MAX_MS", 60_000)
        if base_ms > max_ms:
            raise ConfigError(
                f"BOOST_RETRY_BASE_MS ({base_ms}) must not exceed BOOST_RETRY_MAX_MS ({max_ms})"
            )
        retry = RetryPolicy(
            max_attempts=env_int(env, "BOOST_MAX_ATTEMPTS", 5, minimum=1),
            base_delay_ms=base_ms,
            max_delay_ms=max_ms,
        )
        runner = RunnerSettings(
            workers=env_int(env, "BOOST_WORKERS", 4, minimum=1),
            prefetch=env_int(env, "BOOST_PREFETCH", 10, minimum=1),
            shutdown_grace_s=env_float(env, "BOOST_SHUTDOWN_GRACE_S", 30.0),
            dispatch=DispatchSettings(retry=retry),
        )
        log_format = env.get("BOOST_LOG_FORMAT", "console")
        if log_format not in ("console", "json"):
            raise ConfigError(f"BOOST_LOG_FORMAT must be 'console' or 'json', got {log_format!r}")
        log_level = env.get("BOOST_LOG_LEVEL", "INFO")
        if not isinstance(logging.getLevelName(log_level.upper()), int):
            raise ConfigError(
                f"BOOST_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL: {log_level!r}"
            )
        metrics_port = env_int(env, "BOOST_METRICS_PORT", 0)
        if metrics_port > 65535:
            raise ConfigError(
                f"BOOST_METRICS_PORT must be 0 (off) or a TCP port, got {metrics_port}"
            )
        return cls(
            stomp=StompSettings.from_env(env),
            runner=runner,
            error_store_url=env.get("BOOST_ERROR_STORE", DEFAULT_ERROR_STORE),
            log_format=log_format,
            log_level=log_level,
            routing=routing_from_env(env),
            fairness=fairness_from_env(env) if env_flag(env, "BOOST_FAIRNESS") else None,
            metrics_port=metrics_port,
            metrics_tenant_label=env_flag(env, "BOOST_METRICS_TENANT_LABEL"),
            broker_url=env.get("BOOST_BROKER_URL", "").strip(),
        )


def routing_from_env(env: Mapping[str, str]) -> Routing:
    """BOOST_ROUTING (shared|per_tenant) and BOOST_ROUTING_OVERRIDES (queue=topology,...)."""
    raw_default = env.get("BOOST_ROUTING", "").strip()
    default = parse_topology(raw_default, "BOOST_ROUTING") if raw_default else Topology.SHARED
    overrides: dict[str, Topology] = {}
    for item in env.get("BOOST_ROUTING_OVERRIDES", "").split(","):
        entry = item.strip()
        if not entry:
            continue
        queue, eq, value = (part.strip() for part in entry.partition("="))
        if not eq or not queue or not value:
            raise ConfigError(f"BOOST_ROUTING_OVERRIDES: expected queue=topology, got {entry!r}")
        if queue in overrides:
            raise ConfigError(f"BOOST_ROUTING_OVERRIDES: queue {queue!r} given twice")
        try:
            check_logical_queue(queue)
        except ConfigError as exc:
            raise ConfigError(f"BOOST_ROUTING_OVERRIDES: {exc}") from None
        overrides[queue] = parse_topology(value, "BOOST_ROUTING_OVERRIDES")
    return Routing(default=default, overrides=overrides)


def tier_limits_from_env(env: Mapping[str, str]) -> TierLimits:
    """BOOST_TIER_FREE_LIMIT, _PRO_, _PRO_PLUS_ and _ENTERPRISE_LIMIT (each >= 1)."""
    defaults = TierLimits()
    return TierLimits(
        free=env_int(env, "BOOST_TIER_FREE_LIMIT", defaults.free, minimum=1),
        pro=env_int(env, "BOOST_TIER_PRO_LIMIT", defaults.pro, minimum=1),
        pro_plus=env_int(env, "BOOST_TIER_PRO_PLUS_LIMIT", defaults.pro_plus, minimum=1),
        enterprise=env_int(env, "BOOST_TIER_ENTERPRISE_LIMIT", defaults.enterprise, minimum=1),
    )


def fairness_from_env(env: Mapping[str, str]) -> FairnessSettings:
    """BOOST_RATE_PER_S (0 = unlimited; negative refused), BOOST_RATE_BURST_S (0 = 10),
    BOOST_TIER_*_LIMIT, BOOST_TIER_STORE, BOOST_REDIS_URL, BOOST_DEFER_MS and
    BOOST_DEFER_JITTER_MS; a bad value raises ConfigError naming the variable.
    """
    tier_store = env.get("BOOST_TIER_STORE", "").strip() or DEFAULT_TIER_STORE
    return FairnessSettings(
        rate=RatePolicy(
            rate_per_s=env_float(env, "BOOST_RATE_PER_S", 0.0),
            burst_s=env_float(env, "BOOST_RATE_BURST_S", DEFAULT_BURST_S),
        ),
        tier_limits=tier_limits_from_env(env),
        tier_store_url=tier_store,
        redis_url=env.get("BOOST_REDIS_URL", "").strip(),
        defer_ms=env_int(env, "BOOST_DEFER_MS", 1000),
        jitter_ms=env_int(env, "BOOST_DEFER_JITTER_MS", 1000),
    )


__all__ = [
    "DEFAULT_ERROR_STORE",
    "AppSettings",
    "fairness_from_env",
    "routing_from_env",
    "tier_limits_from_env",
]
