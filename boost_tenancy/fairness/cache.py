"""TenantCache: a value per tenant read from a store without ever waiting on it.

The tier resolver and the policy resolver both answer on a message's path, where a slow or
unreachable database must cost nothing: they answer from memory and look the tenant up again in
the background when the entry is old.
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.tenancy import TenantId

V = TypeVar("V")

ERROR_RETRY_S: Final = 5.0
"""After a failed lookup, the next refresh waits at most this long (or the TTL, if shorter)."""

log = structlog.get_logger("boost_tenancy.fairness")


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    expires_at: float


class TenantCache(Generic[V]):
    """lookup(tenant)'s value, cached for ttl_s and refreshed in the background.

    A tenant seen for the first time gets default until its first lookup completes; an expired
    entry keeps answering its last value meanwhile. One lookup per tenant runs at a time, on
    refresh_threads daemon threads started on first use. A failed lookup keeps the previous
    value (or the default), is logged as a warning (failure_event, with describe(kept)) and is
    tried again after at most five seconds. Subclasses name the value (TierResolver.tier_of).
    A lookup that finds a value equal to the cached one keeps the cached object.
    """

    def __init__(
        self,
        lookup: Callable[[TenantId], V],
        *,
        default: V,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        refresh_threads: int = 2,
        thread_name: str = "boost-refresh",
        failure_event: str = "tenant_lookup_failed",
        describe: Callable[[V], object] = str,
        what: str = "TenantCache",
    ) -> None:
        if not ttl_s > 0:
            raise ConfigError(f"{what} ttl_s must be positive, got {ttl_s!r}")
        if refresh_threads < 1:
            raise ConfigError(f"{what} refresh_threads must be >= 1, got {refresh_threads}")
        self._lookup = lookup
        self._default = default
        self._ttl_s = float(ttl_s)
        self._clock = clock
        self._failure_event = failure_event
        self._describe = describe
        self._cache: dict[TenantId, _Entry[V]] = {}
        self._pending: set[TenantId] = set()
        self._lock = threading.Lock()
        self._work: queue_mod.SimpleQueue[TenantId | None] = queue_mod.SimpleQueue()
        self._closed = False
        self._thread_count = refresh_threads
        self._thread_name = thread_name
        self._threads: list[threading.Thread] = []

    def get(self, tenant: TenantId) -> V:
        """The tenant's value as known now; never waits for the store."""
        now = self._clock()
        with self._lock:
            entry = self._cache.get(tenant)
            if entry is not None and entry.expires_at > now:
                return entry.value
            self._schedule(tenant)
            return self._default if entry is None else entry.value

    def invalidate(self, tenant: TenantId) -> None:
        """Look the tenant up again now (its value changed); the old value serves meanwhile."""
        with self._lock:
            entry = self._cache.get(tenant)
            if entry is not None:
                # Expired rather than dropped: dropping would answer the default meanwhile.
                entry.expires_at = float("-inf")
            self._schedule(tenant)

    def pending(self) -> int:
        """Lookups queued or running (tests wait for zero)."""
        with self._lock:
            return len(self._pending)

    def _schedule(self, tenant: TenantId) -> None:
        # Called with the lock held.
        if tenant in self._pending or self._closed:
            return
        self._pending.add(tenant)
        if not self._threads:
            for index in range(self._thread_count):
                thread = threading.Thread(
                    target=self._refresh_loop, name=f"{self._thread_name}-{index}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        self._work.put(tenant)

    def close(self) -> None:
        """End the refresh threads; get answers from the cache after."""
        with self._lock:
            threads, self._threads = list(self._threads), []
            self._closed = True
        for _ in threads:
            self._work.put(None)
        for thread in threads:
            thread.join(timeout=5.0)

    def _refresh_loop(self) -> None:
        while True:
            tenant = self._work.get()
            if tenant is None:
                return
            try:
                self._refresh(tenant)
            finally:
                with self._lock:
                    self._pending.discard(tenant)

    def _refresh(self, tenant: TenantId) -> None:
        try:
            value = self._lookup(tenant)
        except Exception as exc:  # any store failure keeps the previous value, whatever its type
            with self._lock:
                entry = self._cache.get(tenant)
                kept = self._default if entry is None else entry.value
                retry_s = min(self._ttl_s, ERROR_RETRY_S)
                self._cache[tenant] = _Entry(kept, self._clock() + retry_s)
            log.warning(
                self._failure_event,
                tenant=tenant.value,
                kept=self._describe(kept),
                error_type=type(exc).__name__,
                error=str(exc),
            )
            return
        with self._lock:
            entry = self._cache.get(tenant)
            if entry is not None and entry.value == value:
                value = entry.value  # unchanged: the same object, so callers can tell by identity
            self._cache[tenant] = _Entry(value, self._clock() + self._ttl_s)


__all__ = ["ERROR_RETRY_S", "TenantCache"]
