"""Every BOOST_* variable the toolkit reads is read here, or for the fairness gate in
fairness_config.py, and nowhere else; validated at start-up into AppSettings."""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from boost_tenancy.application.fairness_config import fairness_from_env
from boost_tenancy.application.publishing_config import (
    message_ttl_from_env,
    publish_limits_from_env,
)
from boost_tenancy.envvars import env_flag, env_float, env_int, env_seconds
from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.fairness.accounting_server import DEFAULT_METRICS_HOST
from boost_tenancy.fairness.settings import FairnessSettings
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.event_loop import EventLoopSettings
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.shared import ENV_PUBLISH_REDIS_URL, check_redis_url
from boost_tenancy.quotas.ttl import MessageTtl
from boost_tenancy.routing import Routing, Topology, check_logical_queue, parse_topology
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.options import DEFAULT_URL, ENV_URL, ConnectOptions
from boost_tenancy.transports.registry import parse_transport_url
from boost_tenancy.transports.stomp import StompSettings
from boost_tenancy.transports.stomp.settings import SCHEMES as STOMP_SCHEMES

ERROR_STORE_FILE = "boost-tenancy/errors.sqlite3"
"""The default error store's file, under the user's state folder (default_error_store)."""


def default_error_store(env: Mapping[str, str]) -> str:
    """The error store when BOOST_ERROR_STORE is unset: one SQLite file per user, wherever the
    command runs, $XDG_STATE_HOME/boost-tenancy/errors.sqlite3, else under ~/.local/state.

    Absolute on purpose: a runner and an operator's `errors` started in different folders read
    the same store. A relative XDG_STATE_HOME is ignored, as the XDG specification says.
    """
    state = env.get("XDG_STATE_HOME", "").strip()
    if not (state and os.path.isabs(state)):
        home = env.get("HOME", "").strip() or os.path.expanduser("~")
        if not os.path.isabs(home):
            raise ConfigError(
                "no absolute home folder for the default error store (HOME is "
                f"{env.get('HOME')!r}); set BOOST_ERROR_STORE"
            )
        state = os.path.join(home, ".local", "state")
    return "sqlite:///" + os.path.join(state, ERROR_STORE_FILE)


@dataclass(frozen=True, slots=True, kw_only=True)
class AppSettings:
    """Everything an entry point needs: broker, runner, error store, fairness and logging."""

    stomp: StompSettings | None
    """The STOMP transport's settings when BOOST_BROKER_URL names a STOMP broker, else None."""
    runner: RunnerSettings
    error_store_url: str
    log_format: str
    log_level: str
    routing: Routing = field(default_factory=Routing)
    """The topology of every queue (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES)."""
    default_tenant: TenantId | None = None
    """BOOST_DEFAULT_TENANT: the tenant the router gives a message sent to a routed shared queue
    with no tenantUUID at all (legacy producers); None quarantines it."""
    send_routes: bool = True
    """BOOST_SEND_ROUTES (on by default): runners make the broker store their tenants' messages
    sent to a routed shared queue in the tenants' queues at send time, where it can be told so
    at run time (Artemis: ops/send_routes.py); off leaves every such message to the router."""
    fairness: FairnessSettings | None = field(default_factory=FairnessSettings)
    """The limits (on by default); None when BOOST_FAIRNESS=off."""
    metrics_port: int = 0
    """BOOST_METRICS_PORT: where the metrics, the per-tenant accounting and the probes
    (/healthz, /readyz) are served; 0 = not served."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """BOOST_METRICS_HOST: the address the metrics server binds; the loopback one unless set,
    since its endpoints have no authentication (0.0.0.0 for Kubernetes probes)."""
    metrics_tenant_label: bool = False
    queue_gauges_s: float = 0.0
    """BOOST_QUEUE_GAUGES_S: how often a runner reads its tenants' queue statistics from the
    broker for the queue gauges of its /metrics (ops/stats_metrics.py); 0 = not served."""
    publish: PublishLimits = field(default_factory=PublishLimits)
    """Every tenant's publishing limits (BOOST_PUBLISH_*, BOOST_MAX_MESSAGE_BYTES); unlimited
    unless set."""
    publish_redis_url: str = ""
    """BOOST_PUBLISH_REDIS_URL: the Redis where every producing process takes the tenants'
    publishing buckets (quotas/shared.py); empty means each process keeps its own."""
    message_ttl: MessageTtl = field(default_factory=MessageTtl)
    """Every tenant's message time-to-live (BOOST_MESSAGE_TTL_S); no expiry unless set.
    Per-tenant overrides are set in code (MessageTtl.for_tenant)."""
    usage_store_url: str = ""
    """BOOST_USAGE_STORE: where the accounting's counts are added up per tenant and day, to
    survive restarts (fairness/usage.py); empty means they live in memory only."""
    usage_flush_s: float = 60.0
    """BOOST_USAGE_FLUSH_S: how often counts are written to the usage store."""
    policy_store_url: str = ""
    """BOOST_POLICY_STORE, else BOOST_TIER_STORE: where operators' run-time policies per tenant
    live (quotas/policy_store.py); empty means none, the defaults apply to every tenant."""
    actor: str = ""
    """BOOST_ACTOR: who an operator's command acts as (policy set, quarantine redrive), for the
    audit; empty means the command's --actor, else the user running it."""
    queue_state_poll_s: float = 5.0
    """BOOST_QUEUE_STATE_POLL_S: how often a runner reads the queue states operators set in the
    policy store (`queues drain`, `resume`, `delete`; ops/queue_states.py)."""
    broker_url: str = DEFAULT_URL
    """BOOST_BROKER_URL: the transport by URL (transports/registry.py), the one address the
    clients, the local broker (scripts/broker) and the tests share."""
    broker: ConnectOptions = field(default_factory=ConnectOptions)
    """The other BOOST_BROKER_* settings: credentials, TLS and the waits."""

    def transport_url(self) -> str:
        """The URL the transport is opened from."""
        return self.broker_url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AppSettings:
        """Read BOOST_* variables (documented in docs/configuration.md).

        Entry points (the CLI, the sample services) call it once; nothing reads the environment
        at import time, and a bad value raises ConfigError naming the variable.
        """
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
            shutdown_grace_s=env_seconds(env, "BOOST_SHUTDOWN_GRACE_S", 30.0),
            dispatch=DispatchSettings(retry=retry),
            event_loop=EventLoopSettings(
                stall_s=env_float(env, "BOOST_LOOP_STALL_S", 10.0, minimum=0.1)
            ),
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
        broker_url = env.get(ENV_URL, "").strip() or DEFAULT_URL
        # Parsed here so a malformed URL or a bad BOOST_BROKER_* value stops start-up.
        try:
            scheme = parse_transport_url(broker_url).scheme
        except ConfigError as exc:
            raise ConfigError(f"{ENV_URL}: {exc}") from None
        broker = ConnectOptions.from_env(env)
        return cls(
            stomp=StompSettings.from_env(env) if scheme in STOMP_SCHEMES else None,
            runner=runner,
            error_store_url=(env.get("BOOST_ERROR_STORE", "").strip() or default_error_store(env)),
            log_format=log_format,
            log_level=log_level,
            routing=routing_from_env(env),
            default_tenant=default_tenant_from_env(env),
            send_routes=env_flag(env, "BOOST_SEND_ROUTES", default=True),
            fairness=fairness_from_env(env),
            metrics_port=metrics_port,
            metrics_host=_metrics_host(env, metrics_port),
            metrics_tenant_label=env_flag(env, "BOOST_METRICS_TENANT_LABEL"),
            queue_gauges_s=_queue_gauges_s(env, metrics_port),
            publish=publish_limits_from_env(env),
            publish_redis_url=_publish_redis_url(env),
            message_ttl=message_ttl_from_env(env),
            policy_store_url=(
                env.get("BOOST_POLICY_STORE", "").strip() or env.get("BOOST_TIER_STORE", "").strip()
            ),
            usage_store_url=env.get("BOOST_USAGE_STORE", "").strip(),
            usage_flush_s=_usage_flush_s(env),
            queue_state_poll_s=_queue_state_poll_s(env),
            actor=env.get("BOOST_ACTOR", "").strip(),
            broker_url=broker_url,
            broker=broker,
        )


def _metrics_host(env: Mapping[str, str], port: int) -> str:
    """BOOST_METRICS_HOST: an IP address of this host (0.0.0.0 or :: for every interface)."""
    raw = env.get("BOOST_METRICS_HOST", "").strip()
    if not raw:
        return DEFAULT_METRICS_HOST
    try:
        host = str(ipaddress.ip_address(raw))
    except ValueError:
        raise ConfigError(
            f"BOOST_METRICS_HOST must be an IP address (127.0.0.1, 0.0.0.0, ::), got {raw!r}"
        ) from None
    if not port:
        raise ConfigError(
            "BOOST_METRICS_HOST set without BOOST_METRICS_PORT: the metrics server is off"
        )
    return host


MIN_QUEUE_GAUGES_S: Final = 1.0
"""The shortest BOOST_QUEUE_GAUGES_S: a faster pace would load the broker for figures no scrape
needs."""


def _queue_gauges_s(env: Mapping[str, str], port: int) -> float:
    """BOOST_QUEUE_GAUGES_S: seconds between reads, 0 (the default) for none. Off unless asked
    for, since each read asks the broker about up to four queues per tenant and queue."""
    gauges_s = env_seconds(env, "BOOST_QUEUE_GAUGES_S", 0.0)
    if 0 < gauges_s < MIN_QUEUE_GAUGES_S:
        raise ConfigError(
            f"BOOST_QUEUE_GAUGES_S must be 0 (off) or at least {MIN_QUEUE_GAUGES_S:g} seconds "
            f"(each read asks the broker about every queue of every tenant), got {gauges_s:g}"
        )
    if gauges_s and not port:
        raise ConfigError(
            "BOOST_QUEUE_GAUGES_S set without BOOST_METRICS_PORT: the metrics server that would "
            "serve the queue gauges is off"
        )
    return gauges_s


def _publish_redis_url(env: Mapping[str, str]) -> str:
    """BOOST_PUBLISH_REDIS_URL, refused unless a Redis URL. Allowed without any publishing limit
    in the environment: operators' run-time policies may add limits later."""
    url = env.get(ENV_PUBLISH_REDIS_URL, "").strip()
    return check_redis_url(url) if url else ""


def _usage_flush_s(env: Mapping[str, str]) -> float:
    flush_s = env_seconds(env, "BOOST_USAGE_FLUSH_S", 60.0)
    if flush_s <= 0:
        raise ConfigError(
            f"BOOST_USAGE_FLUSH_S must be a positive number of seconds, got {flush_s}"
        )
    if env.get("BOOST_USAGE_FLUSH_S", "").strip() and not env.get("BOOST_USAGE_STORE", "").strip():
        raise ConfigError("BOOST_USAGE_FLUSH_S set without BOOST_USAGE_STORE: nothing to flush to")
    return flush_s


def _queue_state_poll_s(env: Mapping[str, str]) -> float:
    poll_s = env_float(env, "BOOST_QUEUE_STATE_POLL_S", 5.0)
    if poll_s <= 0:
        raise ConfigError(
            f"BOOST_QUEUE_STATE_POLL_S must be a positive number of seconds, got {poll_s}"
        )
    return poll_s


def routing_from_env(env: Mapping[str, str]) -> Routing:
    """BOOST_ROUTING (routed, the default, shared or per_tenant) and BOOST_ROUTING_OVERRIDES
    (queue=topology,...)."""
    raw_default = env.get("BOOST_ROUTING", "").strip()
    default = parse_topology(raw_default, "BOOST_ROUTING") if raw_default else Topology.ROUTED
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


def default_tenant_from_env(env: Mapping[str, str]) -> TenantId | None:
    """BOOST_DEFAULT_TENANT: opt-in; empty or unset means none (such messages are quarantined)."""
    raw = env.get("BOOST_DEFAULT_TENANT", "").strip()
    if not raw:
        return None
    try:
        return TenantId.parse(raw)
    except InvalidTenantError as exc:
        raise ConfigError(f"BOOST_DEFAULT_TENANT: {exc}") from None


__all__ = [
    "ERROR_STORE_FILE",
    "AppSettings",
    "default_error_store",
    "default_tenant_from_env",
    "routing_from_env",
]
