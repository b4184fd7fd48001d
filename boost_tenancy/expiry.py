"""Absolute expiry times as messages carry them: epoch milliseconds, set from a tenant's
time-to-live when sent and read back off the wire, and the clock they are compared with.

A message's expiry is a field of its own (WireMessage.expires_at_ms), never a property: each
transport writes it as its broker expects it (STOMP `expires`, AMQP absolute-expiry-time).
"""

from __future__ import annotations

import re
import time
from typing import Final, Protocol

from boost_tenancy.errors import ConfigError
from boost_tenancy.tenancy import TenantId

LATEST_EXPIRY_MS: Final = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z. A later expiry is read as none: it fits neither a Java Date nor,
exactly, a float of seconds (what python-qpid-proton hands over)."""
_EPOCH_MS_RE: Final = re.compile(r"[0-9]{1,15}")


def now_ms() -> int:
    """The wall clock in epoch milliseconds: what brokers compare an expiry with."""
    return time.time_ns() // 1_000_000


def check_expiry(value: object) -> int | None:
    """An expiry a message may be given: None, or epoch milliseconds in 1..LATEST_EXPIRY_MS."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= LATEST_EXPIRY_MS:
        raise ConfigError(
            f"an expiry must be epoch milliseconds between 1 and {LATEST_EXPIRY_MS}, got {value!r}"
        )
    return value


def read_expiry(value: object) -> int | None:
    """An expiry as read off the wire (digits or an integer): None for 0 or less, for anything
    beyond LATEST_EXPIRY_MS and for what is no number. Both STOMP brokers send `expires:0` on
    every message that has none."""
    if isinstance(value, str):
        if _EPOCH_MS_RE.fullmatch(value) is None:
            return None
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= LATEST_EXPIRY_MS else None


def expiry_after(ttl_ms: int | None, now: int | None = None) -> int | None:
    """The absolute expiry (epoch milliseconds) of a message with a time-to-live of ttl_ms sent
    at now (epoch milliseconds, the wall clock by default); None for no time-to-live."""
    if ttl_ms is None:
        return None
    return (now_ms() if now is None else now) + ttl_ms


class ExpiryPolicy(Protocol):
    """The expiry a tenant's message sent now gets, or None; quotas.MessageTtl is the toolkit's."""

    def ttl_ms_of(self, tenant: TenantId) -> int | None:
        """The tenant's time-to-live in milliseconds, or None: its messages never expire."""
        ...

    def expiry_of(self, tenant: TenantId, now: int | None = None) -> int | None:
        """Epoch milliseconds (now: the wall clock in epoch milliseconds, by default now_ms())."""
        ...


__all__ = [
    "LATEST_EXPIRY_MS",
    "ExpiryPolicy",
    "check_expiry",
    "expiry_after",
    "now_ms",
    "read_expiry",
]
