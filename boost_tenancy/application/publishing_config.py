"""The publishing limits and the message time-to-live every tenant gets by default, read from the
BOOST_PUBLISH_*, BOOST_MAX_* and BOOST_MESSAGE_TTL_S variables for AppSettings."""

from __future__ import annotations

from collections.abc import Mapping

from boost_tenancy.envvars import env_float, env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.rates import DEFAULT_BURST_S
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.ttl import MAX_TTL_S, TTL_VARIABLE, MessageTtl


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
    seconds = env_float(env, TTL_VARIABLE, 0.0)
    if seconds > MAX_TTL_S:
        raise ConfigError(f"{TTL_VARIABLE} must be at most {MAX_TTL_S} seconds, got {seconds}")
    return MessageTtl(default_s=seconds)


__all__ = ["message_ttl_from_env", "publish_limits_from_env"]
