"""Every BOOST_* variable the toolkit reads is read here, and nowhere else (the broker, the
runner, fairness, publishing limits, message TTL, stores, metrics, logging), validated at
start-up: a bad value stops it with a ConfigError naming the variable, never showing a secret.

Entry points read it once (AppSettings.from_env, application.run.open_transport), never at
import time; nothing below the application layer reads it: transports take a URL and
ConnectOptions, and envvars.py parses what it is handed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from boost_tenancy.application.config import DEFAULT_URL, AppSettings, default_error_store
from boost_tenancy.envvars import (
    env_choice,
    env_flag,
    env_float,
    env_int,
    env_ip_address,
    env_list,
    env_log_level,
    env_seconds,
    env_wait,
    given_variables,
    refuse_renamed,
    secret_from_env,
)
from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.fairness.accounting_server import DEFAULT_METRICS_HOST
from boost_tenancy.fairness.rates import DEFAULT_BURST_S, RatePolicy
from boost_tenancy.fairness.settings import (
    DEFAULT_RATE_PER_S,
    FAIRNESS_VARIABLES,
    TIER_LIMIT_VARIABLES,
    FairnessSettings,
)
from boost_tenancy.fairness.tiers import TierLimits
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.event_loop import EventLoopSettings
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.shared import ENV_PUBLISH_REDIS_URL, check_redis_url
from boost_tenancy.quotas.ttl import MAX_TTL_S, TTL_VARIABLE, MessageTtl
from boost_tenancy.routing import (
    Routing,
    Topology,
    check_logical_queue,
    parse_overrides,
    parse_topology,
)
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports import registry
from boost_tenancy.transports.options import MAX_ARTEMIS_WINDOW_BYTES, ConnectOptions, TlsSettings

if TYPE_CHECKING:
    from boost_tenancy.transports.stomp import StompSettings

# -- the broker ------------------------------------------------------------------------------------
ENV_URL: Final = "BOOST_BROKER_URL"
"""The transport by URL (transports/registry.py); DEFAULT_URL when unset."""


def connect_options_from_env(env: Mapping[str, str]) -> ConnectOptions:
    """BOOST_BROKER_USER, _PASSWORD (or _PASSWORD_FILE), the TLS files, _VERIFY_HOST, the waits
    and BOOST_ARTEMIS_WINDOW_BYTES: what a broker URL cannot carry. The variables of RENAMED and
    unknown ones are refused first (refuse_renamed)."""
    refuse_renamed(env)
    username = env.get("BOOST_BROKER_USER", "").strip() or None
    password = secret_from_env(env, "BOOST_BROKER_PASSWORD")
    if (username is None) != (password is None):
        raise ConfigError(
            "set both BOOST_BROKER_USER and BOOST_BROKER_PASSWORD (or "
            "BOOST_BROKER_PASSWORD_FILE), or neither"
        )
    default = ConnectOptions()
    initial = env_wait(env, "BOOST_BROKER_RECONNECT_INITIAL_S", default.reconnect_initial_s)
    maximum = env_wait(env, "BOOST_BROKER_RECONNECT_MAX_S", default.reconnect_max_s)
    if maximum < initial:
        raise ConfigError(
            f"BOOST_BROKER_RECONNECT_MAX_S ({maximum}) must not be less than "
            f"BOOST_BROKER_RECONNECT_INITIAL_S ({initial})"
        )
    window = env_int(env, "BOOST_ARTEMIS_WINDOW_BYTES", default.artemis_window_bytes, minimum=1)
    if window > MAX_ARTEMIS_WINDOW_BYTES:
        raise ConfigError(
            f"BOOST_ARTEMIS_WINDOW_BYTES must be at most {MAX_ARTEMIS_WINDOW_BYTES} bytes per "
            f"message, got {window}"
        )
    return ConnectOptions(
        username=username,
        password=password,
        tls=_tls_from_env(env),
        connect_timeout_s=env_wait(
            env, "BOOST_BROKER_CONNECT_TIMEOUT_S", default.connect_timeout_s
        ),
        confirm_timeout_s=env_wait(
            env, "BOOST_BROKER_CONFIRM_TIMEOUT_S", default.confirm_timeout_s
        ),
        reconnect_wait_s=env_wait(
            env, "BOOST_BROKER_RECONNECT_WAIT_S", default.reconnect_wait_s, zero=True
        ),
        reconnect_initial_s=initial,
        reconnect_max_s=maximum,
        heartbeat_s=env_wait(env, "BOOST_BROKER_HEARTBEAT_S", default.heartbeat_s),
        artemis_window_bytes=window,
    )


def _tls_from_env(env: Mapping[str, str]) -> TlsSettings | None:
    """The TLS variables, None when none is set (TLS URLs then take the defaults)."""
    paths: dict[str, str | None] = {}
    for name, field in (
        ("BOOST_BROKER_CA_FILE", "ca_file"),
        ("BOOST_BROKER_CERT_FILE", "cert_file"),
        ("BOOST_BROKER_KEY_FILE", "key_file"),
    ):
        path = paths[field] = env.get(name, "").strip() or None
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"{name} names {path!r}, which is no file")
    verify_host = env_flag(env, "BOOST_BROKER_VERIFY_HOST", default=True)
    key_password = secret_from_env(env, "BOOST_BROKER_KEY_PASSWORD")
    try:
        tls = TlsSettings(**paths, key_password=key_password, verify_host=verify_host)
    except ConfigError as exc:
        # A key password may come from its _FILE variable (secret_from_env).
        given = [n for n in _TLS_VARIABLES if env.get(n, "").strip() or env.get(f"{n}_FILE")]
        raise ConfigError(f"{exc} ({', '.join(given)})") from None
    return None if tls.is_default else tls


_TLS_VARIABLES: Final = tuple(
    f"BOOST_BROKER_{name}" for name in ("CA_FILE", "CERT_FILE", "KEY_FILE", "KEY_PASSWORD")
)


def stomp_settings_from_env(env: Mapping[str, str]) -> StompSettings:
    """The STOMP settings of BOOST_BROKER_URL (default stomp://127.0.0.1:61613), the options
    beside it (connect_options_from_env) and BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION."""
    # Imported on use: a process that speaks AMQP only never loads the STOMP client library.
    from boost_tenancy.transports.stomp.settings import SCHEMES, StompSettings  # noqa: PLC0415

    options = connect_options_from_env(env)
    per_connection = env_int(env, "BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION", 0) or None
    try:
        url = registry.parse_transport_url(env.get(ENV_URL, "").strip() or DEFAULT_URL)
        if url.scheme not in SCHEMES:
            raise ConfigError(f"{url.redacted!r} is not a STOMP URL ({', '.join(SCHEMES)})")
        settings = StompSettings.from_url(url, options)
    except ConfigError as exc:
        raise ConfigError(f"{ENV_URL}: {exc}") from None
    return dataclasses.replace(settings, subscriptions_per_connection=per_connection)


# -- the runner, the stores, metrics and logging ---------------------------------------------------
def app_settings_from_env(env: Mapping[str, str]) -> AppSettings:
    """AppSettings from every BOOST_* variable (documented in docs/configuration.md)."""
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
    log_format = env_choice(env, "BOOST_LOG_FORMAT", ("console", "json"), "console")
    log_level = env_log_level(env, "BOOST_LOG_LEVEL", "INFO")
    metrics_port = env_int(env, "BOOST_METRICS_PORT", 0, maximum=65535, unit=" (0: off)")
    broker_url = env.get(ENV_URL, "").strip() or DEFAULT_URL
    # Parsed here so a malformed URL or a bad BOOST_BROKER_* value stops start-up.
    try:
        scheme = registry.parse_transport_url(broker_url).scheme
    except ConfigError as exc:
        raise ConfigError(f"{ENV_URL}: {exc}") from None
    broker = connect_options_from_env(env)
    from boost_tenancy.transports.stomp.settings import SCHEMES as STOMP  # noqa: PLC0415

    return AppSettings(
        stomp=stomp_settings_from_env(env) if scheme in STOMP else None,
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
        queue_state_poll_s=env_wait(env, "BOOST_QUEUE_STATE_POLL_S", 5.0),
        actor=env.get("BOOST_ACTOR", "").strip(),
        broker_url=broker_url,
        broker=broker,
    )


def _metrics_host(env: Mapping[str, str], port: int) -> str:
    """BOOST_METRICS_HOST: an IP address of this host (0.0.0.0 or :: for every interface)."""
    host = env_ip_address(env, "BOOST_METRICS_HOST")
    if host is None:
        return DEFAULT_METRICS_HOST
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


def routing_from_env(env: Mapping[str, str]) -> Routing:
    """BOOST_ROUTING (routed, the default, shared or per_tenant) and BOOST_ROUTING_OVERRIDES
    (queue=topology,...)."""
    raw_default = env.get("BOOST_ROUTING", "").strip()
    default = parse_topology(raw_default, "BOOST_ROUTING") if raw_default else Topology.ROUTED
    overrides = parse_overrides(env.get("BOOST_ROUTING_OVERRIDES", ""), "BOOST_ROUTING_OVERRIDES")
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


# -- the fairness gate ---------------------------------------------------------------------------
def tier_limits_from_env(env: Mapping[str, str]) -> TierLimits:
    """BOOST_TIER_FREE_LIMIT, _PRO_, _PRO_PLUS_ and _ENTERPRISE_LIMIT (each >= 1)."""
    defaults = TierLimits()
    return TierLimits(
        free=env_int(env, "BOOST_TIER_FREE_LIMIT", defaults.free, minimum=1),
        pro=env_int(env, "BOOST_TIER_PRO_LIMIT", defaults.pro, minimum=1),
        pro_plus=env_int(env, "BOOST_TIER_PRO_PLUS_LIMIT", defaults.pro_plus, minimum=1),
        enterprise=env_int(env, "BOOST_TIER_ENTERPRISE_LIMIT", defaults.enterprise, minimum=1),
    )


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
            TenantId.parse(t) for t in env_list(env, "BOOST_FAIRNESS_EXEMPT_TENANTS")
        )
    except InvalidTenantError as exc:
        raise ConfigError(f"BOOST_FAIRNESS_EXEMPT_TENANTS: {exc}") from None
    exempt_queues: set[str] = set()
    for queue in env_list(env, "BOOST_FAIRNESS_EXEMPT_QUEUES"):
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
        given = given_variables(env, FAIRNESS_VARIABLES)
        if given:
            raise ConfigError(
                f"{', '.join(given)} set while BOOST_FAIRNESS=off: the limit would do nothing; "
                "remove it or turn fairness on"
            )
        return None
    tier_limits = given_variables(env, TIER_LIMIT_VARIABLES)
    if tier_limits and not tier_store:
        raise ConfigError(
            f"{', '.join(tier_limits)} set without BOOST_TIER_STORE: tier limits apply only to "
            "tenants with a tier; name the tier store, or set BOOST_TENANT_CONCURRENCY instead"
        )
    if tier_store and given_variables(env, ("BOOST_TENANT_CONCURRENCY",)):
        raise ConfigError(
            "BOOST_TENANT_CONCURRENCY set with BOOST_TIER_STORE: the tiers decide each tenant's "
            "concurrency (BOOST_TIER_*_LIMIT); remove one of them"
        )
    return settings


# -- the publishing limits and the message time-to-live -------------------------------------------
def publish_limits_from_env(env: Mapping[str, str]) -> PublishLimits:
    """BOOST_PUBLISH_RATE_PER_S, _BYTES_PER_S, _BURST_S, BOOST_MAX_MESSAGE_BYTES and
    BOOST_MAX_QUEUED_MESSAGES: every tenant's default; a negative or non-numeric value stops
    start-up naming the variable."""
    return PublishLimits(
        messages_per_s=env_float(env, "BOOST_PUBLISH_RATE_PER_S", 0.0),
        bytes_per_s=env_float(env, "BOOST_PUBLISH_BYTES_PER_S", 0.0),
        burst_s=env_float(env, "BOOST_PUBLISH_BURST_S", DEFAULT_BURST_S),
        max_message_bytes=env_int(env, "BOOST_MAX_MESSAGE_BYTES", 0),
        max_queued_messages=env_int(env, "BOOST_MAX_QUEUED_MESSAGES", 0),
    )


def message_ttl_from_env(env: Mapping[str, str]) -> MessageTtl:
    """BOOST_MESSAGE_TTL_S, every tenant's default; a negative, non-numeric, non-finite or too
    large value stops start-up naming the variable."""
    return MessageTtl(
        default_s=env_float(env, TTL_VARIABLE, 0.0, maximum=MAX_TTL_S, unit=" seconds")
    )


__all__ = [
    "ENV_URL",
    "app_settings_from_env",
    "connect_options_from_env",
    "default_tenant_from_env",
    "fairness_from_env",
    "message_ttl_from_env",
    "publish_limits_from_env",
    "routing_from_env",
    "stomp_settings_from_env",
    "tier_limits_from_env",
]
