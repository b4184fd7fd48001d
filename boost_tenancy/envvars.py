"""Values parsed from environment variables, with errors that name the variable: numbers,
waits, flags, choices, lists, addresses and secrets (from a file too); and the names the project
reads (KNOWN_VARIABLES), with those it no longer reads (RENAMED), refused when set.

A leaf module (it imports only the error root), so any settings class can use it without
import cycles. It reads no setting of its own: application/environment.py, the one reader of
the BOOST_* variables, hands it each name.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypeVar

from boost_tenancy.errors import ConfigError

N = TypeVar("N", int, float)

KNOWN_VARIABLES: Final = frozenset(
    {
        # the broker, its login, TLS and waits (application/environment.py, the URL schemes)
        "BOOST_BROKER_URL",
        "BOOST_BROKER_USER",
        "BOOST_BROKER_PASSWORD",
        "BOOST_BROKER_PASSWORD_FILE",
        "BOOST_BROKER_CA_FILE",
        "BOOST_BROKER_CERT_FILE",
        "BOOST_BROKER_KEY_FILE",
        "BOOST_BROKER_KEY_PASSWORD",
        "BOOST_BROKER_KEY_PASSWORD_FILE",
        "BOOST_BROKER_VERIFY_HOST",
        "BOOST_BROKER_CONNECT_TIMEOUT_S",
        "BOOST_BROKER_CONFIRM_TIMEOUT_S",
        "BOOST_BROKER_RECONNECT_WAIT_S",
        "BOOST_BROKER_RECONNECT_INITIAL_S",
        "BOOST_BROKER_RECONNECT_MAX_S",
        "BOOST_BROKER_HEARTBEAT_S",
        "BOOST_ARTEMIS_WINDOW_BYTES",
        "BOOST_STOMP_SUBSCRIPTIONS_PER_CONNECTION",
        # the runner and its policies (application/environment.py)
        "BOOST_TENANTS",
        "BOOST_WORKERS",
        "BOOST_PREFETCH",
        "BOOST_MAX_ATTEMPTS",
        "BOOST_RETRY_BASE_MS",
        "BOOST_RETRY_MAX_MS",
        "BOOST_SHUTDOWN_GRACE_S",
        "BOOST_ERROR_STORE",
        "BOOST_LOG_FORMAT",
        "BOOST_LOG_LEVEL",
        "BOOST_LOOP_STALL_S",
        "BOOST_METRICS_HOST",
        "BOOST_METRICS_PORT",
        "BOOST_METRICS_TENANT_LABEL",
        "BOOST_QUEUE_GAUGES_S",
        "BOOST_QUEUE_STATE_POLL_S",
        "BOOST_ROUTING",
        "BOOST_ROUTING_OVERRIDES",
        "BOOST_SEND_ROUTES",
        "BOOST_DEFAULT_TENANT",
        "BOOST_MESSAGE_TTL_S",
        "BOOST_MAX_MESSAGE_BYTES",
        "BOOST_MAX_QUEUED_MESSAGES",
        "BOOST_FAIRNESS",
        "BOOST_FAIRNESS_EXEMPT_QUEUES",
        "BOOST_FAIRNESS_EXEMPT_TENANTS",
        "BOOST_FAIRNESS_HOLD_S",
        "BOOST_TENANT_CONCURRENCY",
        "BOOST_DEFER_MS",
        "BOOST_DEFER_JITTER_MS",
        "BOOST_RATE_PER_S",
        "BOOST_RATE_BURST_S",
        "BOOST_PUBLISH_RATE_PER_S",
        "BOOST_PUBLISH_BYTES_PER_S",
        "BOOST_PUBLISH_BURST_S",
        "BOOST_PUBLISH_REDIS_URL",
        "BOOST_REDIS_URL",
        "BOOST_POLICY_STORE",
        "BOOST_TIER_STORE",
        "BOOST_TIER_FREE_LIMIT",
        "BOOST_TIER_PRO_LIMIT",
        "BOOST_TIER_PRO_PLUS_LIMIT",
        "BOOST_TIER_ENTERPRISE_LIMIT",
        "BOOST_USAGE_STORE",
        "BOOST_USAGE_FLUSH_S",
        "BOOST_ACTOR",
        # the sample services (services/)
        "BOOST_BLOB_DIR",
        "BOOST_DOCUMENT_STORE",
        "BOOST_REVIEW_THRESHOLD",
        "BOOST_RULES_DIR",
        "BOOST_HTTP_HOST",
        "BOOST_HTTP_PORT",
        "BOOST_HTTP_MAX_UPLOAD_BYTES",
        "BOOST_HTTP_TENANT_IN_FLIGHT",
        "BOOST_HTTP_TENANT_REQUESTS_PER_MIN",
        "BOOST_JWT_ALGORITHMS",
        "BOOST_JWT_AUDIENCE",
        "BOOST_JWT_ISSUER",
        "BOOST_JWT_TENANT_CLAIM",
        "BOOST_JWT_SECRET",
        "BOOST_JWT_PUBLIC_KEY_FILE",
        "BOOST_JWT_LEEWAY_S",
        "BOOST_JWT_MAX_LIFETIME_S",
        # the local brokers (devtools/), which read the same environment
        "BOOST_BROKER_HOME",
        "BOOST_BROKER_OPENWIRE_PORT",
        "BOOST_BROKER_HEAP_MB",
        "BOOST_BROKER_KEYSTORE",
        "BOOST_BROKER_KEYSTORE_PASSWORD",
        "BOOST_BROKER_KEYSTORE_PASSWORD_FILE",
        "BOOST_BROKER_ROUTES",
        "BOOST_BROKER_ROUTED_QUEUES",
        "BOOST_BROKER_AMQP_URL",
        "BOOST_ARTEMIS_HOME",
        "BOOST_ARTEMIS_CACHE",
        "BOOST_ARTEMIS_PORT_OFFSET",
        "BOOST_ARTEMIS_ROUTED_QUEUES",
        "BOOST_ARTEMIS_KEYSTORE",
        "BOOST_ARTEMIS_KEYSTORE_PASSWORD",
        "BOOST_ARTEMIS_KEYSTORE_PASSWORD_FILE",
        "BOOST_ARTEMIS_PAIR_HOME",
        "BOOST_ARTEMIS_CLUSTER_HOME",
        "BOOST_ARTEMIS_CLUSTER_QUEUES",
        # scripts/test: the short benchmark runs
        "BOOST_BENCH_SMOKE",
        # scripts/rabbitmq and scripts/services: how long each waits for what it starts
        "BOOST_RABBITMQ_WAIT_S",
        "BOOST_SERVICES_WAIT_S",
    }
)
"""Every BOOST_* variable something of the project reads. One that is set and not here is a
mistake (BOOST_WORKER=8 for BOOST_WORKERS) and is refused, not ignored."""
KNOWN_PREFIXES: Final = ("BOOST_TEST_",)
"""Families read by the project's own test suite and scripts (BOOST_TEST_BROKER_FLAVOUR, ...)."""

RENAMED: Final[Mapping[str, str]] = {
    "BOOST_STOMP_HOST": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_STOMP_PORT": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_STOMP_VHOST": "BOOST_BROKER_URL (stomp://HOST:PORT/VHOST)",
    "BOOST_BROKER_HOST": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_BROKER_STOMP_PORT": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_STOMP_USER": "BOOST_BROKER_USER",
    "BOOST_STOMP_PASSWORD": "BOOST_BROKER_PASSWORD or BOOST_BROKER_PASSWORD_FILE",
    "BOOST_STOMP_CONNECT_TIMEOUT_S": "BOOST_BROKER_CONNECT_TIMEOUT_S",
    "BOOST_AMQP_CONNECT_TIMEOUT_S": "BOOST_BROKER_CONNECT_TIMEOUT_S",
    "BOOST_AMQP_CONFIRM_TIMEOUT_S": "BOOST_BROKER_CONFIRM_TIMEOUT_S",
    "BOOST_AMQP_CA_FILE": "BOOST_BROKER_CA_FILE",
    "BOOST_AMQP_CERT_FILE": "BOOST_BROKER_CERT_FILE",
    "BOOST_AMQP_KEY_FILE": "BOOST_BROKER_KEY_FILE",
    "BOOST_AMQP_KEY_PASSWORD": "BOOST_BROKER_KEY_PASSWORD",
    "BOOST_AMQP_VERIFY_HOST": "BOOST_BROKER_VERIFY_HOST",
}
"""Variables of earlier versions and what replaced them. They are refused, not read: the local
broker and the clients once read different ones, and a client then silently used another broker
on the default port."""


def refuse_renamed(env: Mapping[str, str]) -> None:
    """ConfigError naming every variable of RENAMED that is set, and what replaced it, or every
    other BOOST_* variable that nothing reads, with the nearest known name: a mistyped variable
    is refused at start-up instead of silently leaving its setting at the default. It reads no
    value, only which names are set."""
    given = [name for name in RENAMED if env.get(name, "").strip()]
    if given:
        replaced = "; ".join(f"{name} -> {RENAMED[name]}" for name in given)
        raise ConfigError(
            f"no longer read, set its replacement instead (docs/configuration.md): {replaced}"
        )
    unknown = unknown_variables({k: v for k, v in env.items() if k not in RENAMED})
    if unknown:
        raise ConfigError(
            f"unknown variable{'s' if len(unknown) > 1 else ''}, read by nothing "
            f"(docs/configuration.md lists them): {'; '.join(unknown)}"
        )


def unknown_variables(
    env: Mapping[str, str], also_known: frozenset[str] = frozenset()
) -> list[str]:
    """The BOOST_* names set in env that nothing reads, each with the nearest known name."""
    known = KNOWN_VARIABLES | also_known
    found = []
    for name in sorted(env):
        if not name.startswith("BOOST_") or name in known or name.startswith(KNOWN_PREFIXES):
            continue
        nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        found.append(f"{name} (did you mean {nearest[0]}?)" if nearest else name)
    return found


def _env_number(
    env: Mapping[str, str],
    name: str,
    default: N,
    *,
    minimum: N,
    maximum: N | None,
    unit: str,
    parse: Callable[[str], N],
    kind: str,
) -> N:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from exc
    if not math.isfinite(value):
        # float() reads "inf" and "nan"; neither is a duration, a rate or a count.
        raise ConfigError(f"{name} must be a finite number, got {raw!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}{unit}, got {value}")
    return value


def env_int(
    env: Mapping[str, str],
    name: str,
    default: int,
    *,
    minimum: int = 0,
    maximum: int | None = None,
    unit: str = "",
) -> int:
    """An integer variable; a non-number or a value out of [minimum, maximum] names the
    variable (unit, " bytes" say, follows the maximum in the error)."""
    return _env_number(
        env,
        name,
        default,
        minimum=minimum,
        maximum=maximum,
        unit=unit,
        parse=int,
        kind="an integer",
    )


def env_float(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    minimum: float = 0.0,
    maximum: float | None = None,
    unit: str = "",
) -> float:
    """A number variable; a non-number or a value out of [minimum, maximum] names the variable
    (unit, " seconds" say, follows the maximum in the error)."""
    return _env_number(
        env,
        name,
        default,
        minimum=minimum,
        maximum=maximum,
        unit=unit,
        parse=float,
        kind="a number",
    )


def env_log_level(env: Mapping[str, str], name: str, default: str) -> str:
    """A logging level's name (any case), as written; default when unset."""
    value = env.get(name, default)
    if not isinstance(logging.getLevelName(value.upper()), int):
        raise ConfigError(f"{name} must be DEBUG, INFO, WARNING, ERROR or CRITICAL: {value!r}")
    return value


def env_choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    """One of choices, exactly as written; default when unset. Anything else names the
    variable and the choices."""
    value = env.get(name, default)
    if value not in choices:
        raise ConfigError(f"{name} must be {' or '.join(map(repr, choices))}, got {value!r}")
    return value


_TRUE, _FALSE = frozenset({"1", "true", "on", "yes"}), frozenset({"", "0", "false", "off", "no"})


MAX_DURATION_S = 86_400.0
"""The longest duration a setting in seconds may take: a day. Beyond it a value is a typo, and
one large enough overflows the timeouts it becomes (threading refuses waits past ~292 years,
and only when the wait starts, say at SIGTERM)."""


def env_seconds(
    env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0
) -> float:
    """A duration in seconds: a finite number from minimum to MAX_DURATION_S; anything else
    names the variable."""
    value = env_float(env, name, default, minimum=minimum)
    if value > MAX_DURATION_S:
        raise ConfigError(
            f"{name} must be at most {MAX_DURATION_S:g} seconds (a day), got {env.get(name)!r}"
        )
    return value


def env_flag(env: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    """An on/off variable, default when unset or blank; anything else names the variable."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name} must be on or off, got {env.get(name)!r}")


def env_wait(env: Mapping[str, str], name: str, default: float, *, zero: bool = False) -> float:
    """A wait in seconds: finite and positive (or zero where zero means "do not wait")."""
    seconds = env_float(env, name, default, minimum=-math.inf)
    if seconds < 0 or (seconds == 0 and not zero):
        need = "zero or a positive" if zero else "a positive"
        raise ConfigError(f"{name} must be {need} number of seconds, got {env[name]!r}")
    return seconds


def env_list(env: Mapping[str, str], name: str) -> list[str]:
    """A comma-separated list, its items stripped and the empty ones dropped."""
    return [item.strip() for item in env.get(name, "").split(",") if item.strip()]


def given_variables(env: Mapping[str, str], names: Iterable[str]) -> list[str]:
    """The names set to something other than blanks, in the order given."""
    return [name for name in names if env.get(name, "").strip()]


def env_ip_address(env: Mapping[str, str], name: str) -> str | None:
    """An IP address in its normal form; None when unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise ConfigError(
            f"{name} must be an IP address (127.0.0.1, 0.0.0.0, ::), got {raw!r}"
        ) from None


def secret_from_env(env: Mapping[str, str], name: str) -> str | None:
    """The secret in name, or in the file name_FILE names (one trailing newline dropped); None
    when neither is set. Errors name the variable and the file, never the secret.

    A file readable by others is accepted: container secrets (Docker, Kubernetes) are mounted
    0444/0644 by default, and who may read them is decided by the mount.
    """
    file_name = f"{name}_FILE"
    value = env.get(name, "")
    path = env.get(file_name, "").strip()
    if value and path:
        raise ConfigError(f"set {name} or {file_name}, not both")
    if not path:
        return value or None
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"{file_name}={path!r}: cannot read it: {reason}") from None
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise ConfigError(f"{file_name}={path!r} is empty")
    if "\n" in secret:
        raise ConfigError(f"{file_name}={path!r} holds more than one line")
    return secret
