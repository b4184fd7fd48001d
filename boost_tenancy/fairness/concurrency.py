"""Per-tenant concurrency slots: how many of a tenant's messages may be in handling at once.

Slots are held per message id, so acquiring or releasing the same message twice counts once.
"""

from __future__ import annotations

import threading
from typing import Protocol

from boost_tenancy.errors import ConfigError
from boost_tenancy.tenancy import TenantId


class ConcurrencyLimiter(Protocol):
    """Per-tenant slots keyed by message id; both calls are idempotent per message id."""

    def try_acquire(self, tenant: TenantId, message_id: str, limit: int) -> bool:
        """Take a slot for message_id unless the tenant already holds limit slots.

        True also when message_id already holds a slot (it is counted once).
        """
        ...

    def release(self, tenant: TenantId, message_id: str) -> None:
        """Give back message_id's slot; a message holding none is a no-op."""
        ...


def check_limit(limit: object) -> int:
    """A slot limit must be a positive integer: zero would defer a tenant's messages forever."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError(f"concurrency limit must be an integer of at least 1, got {limit!r}")
    return limit


class InMemoryConcurrencyLimiter:
    """Slots of this process only (thread-safe); each process of a fleet enforces its own."""

    def __init__(self) -> None:
        self._held: dict[TenantId, set[str]] = {}
        self._lock = threading.Lock()

    def try_acquire(self, tenant: TenantId, message_id: str, limit: int) -> bool:
        check_limit(limit)
        with self._lock:
            held = self._held.setdefault(tenant, set())
            if message_id in held:
                return True
            if len(held) >= limit:
                return False
            held.add(message_id)
            return True

    def release(self, tenant: TenantId, message_id: str) -> None:
        with self._lock:
            held = self._held.get(tenant)
            if held is None:
                return
            held.discard(message_id)
            if not held:
                # Dropping empty sets keeps the map bounded by the tenants busy right now.
                del self._held[tenant]

    def in_use(self, tenant: TenantId) -> int:
        """Slots the tenant holds now."""
        with self._lock:
            return len(self._held.get(tenant, ()))


__all__ = ["ConcurrencyLimiter", "InMemoryConcurrencyLimiter", "check_limit"]
