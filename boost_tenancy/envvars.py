"""Numbers read from environment variables, with errors that name the variable.

A leaf module (it imports only the error root), so any settings class can use it without
import cycles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

from boost_tenancy.errors import ConfigError

N = TypeVar("N", int, float)


def _env_number(
    env: Mapping[str, str],
    name: str,
    default: N,
    *,
    minimum: N,
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
    return value


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    """An integer variable; a non-number or a value below minimum names the variable."""
    return _env_number(env, name, default, minimum=minimum, parse=int, kind="an integer")


def env_float(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    """A number variable; a non-number or a value below minimum names the variable."""
    return _env_number(env, name, default, minimum=minimum, parse=float, kind="a number")


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
