"""Settings read from the environment at the edge (entry points only), validated at start-up.

Nothing here runs at import time; a bad value raises ConfigError naming the variable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from boost_tenancy.consumer import RunnerSettings
from boost_tenancy.envvars import env_float, env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.processor import DispatchSettings
from boost_tenancy.resilience.retry import RetryPolicy
from boost_tenancy.routing import Routing
from boost_tenancy.transports.stomp import StompSettings

DEFAULT_ERROR_STORE = "sqlite:///var/boost-errors.sqlite3"


@dataclass(frozen=True, slots=True, kw_only=True)
class AppSettings:
    """Everything an entry point needs: broker, runner, error store and logging."""

    stomp: StompSettings
    runner: RunnerSettings
    error_store_url: str
    log_format: str
    log_level: str
    routing: Routing = field(default_factory=Routing)
    """The topology of every queue (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES)."""

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
        return cls(
            stomp=StompSettings.from_env(env),
            runner=runner,
            error_store_url=env.get("BOOST_ERROR_STORE", DEFAULT_ERROR_STORE),
            log_format=log_format,
            log_level=log_level,
            routing=Routing.from_env(env),
        )
