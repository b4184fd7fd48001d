"""Concurrency slots under many threads and their idempotence; tier stores; the tier resolver
answering at once (FREE for an unknown tenant) and the stored tier after a background refresh."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from boost_tenancy import ConfigError, TenantId
from boost_tenancy.application.environment import tier_limits_from_env
from boost_tenancy.fairness import (
    InMemoryConcurrencyLimiter,
    SQLiteTierStore,
    Tier,
    TierLimits,
    TierResolver,
    TierStoreError,
    open_tier_store,
)
from tests.conftest import reachable_postgres_dsn, wait_until

A = TenantId("org-A")
B = TenantId("org-B")


# -- concurrency ----------------------------------------------------------------------------------
def test_limit_holds_under_sixteen_threads() -> None:
    limiter = InMemoryConcurrencyLimiter()
    holding = 0
    peak = 0
    acquired = 0
    lock = threading.Lock()
    start = threading.Barrier(16)

    def hammer(index: int) -> None:
        nonlocal holding, peak, acquired
        start.wait()
        for attempt in range(300):
            message_id = f"m-{index}-{attempt}"
            if not limiter.try_acquire(A, message_id, 3):
                continue
            with lock:
                holding += 1
                peak = max(peak, holding)
                acquired += 1
            time.sleep(0)  # let other threads run while the slot is held
            with lock:
                holding -= 1
            limiter.release(A, message_id)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 1 <= peak <= 3
    assert acquired > 0
    assert limiter.in_use(A) == 0


def test_acquire_and_release_are_idempotent_per_message_id() -> None:
    limiter = InMemoryConcurrencyLimiter()
    assert limiter.try_acquire(A, "m-1", 1)
    assert limiter.try_acquire(A, "m-1", 1)  # the same message: counted once
    assert limiter.in_use(A) == 1
    assert not limiter.try_acquire(A, "m-2", 1)
    assert limiter.try_acquire(B, "m-2", 1)  # another tenant has its own slots
    limiter.release(A, "m-1")
    limiter.release(A, "m-1")
    limiter.release(A, "never-acquired")
    limiter.release(TenantId("org-unknown"), "m-9")
    assert limiter.in_use(A) == 0
    assert limiter.try_acquire(A, "m-2", 1)


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ConfigError, match="limit"):
        InMemoryConcurrencyLimiter().try_acquire(A, "m-1", limit)


# -- tiers ----------------------------------------------------------------------------------------
def test_tier_limits_default_to_the_seed_table() -> None:
    limits = TierLimits()
    assert [limits.for_tier(t) for t in Tier] == [1, 3, 3, 5]
    assert tier_limits_from_env({"BOOST_TIER_PRO_LIMIT": "7"}).for_tier(Tier.PRO) == 7


def test_sqlite_tier_store_round_trip(tmp_path: Path) -> None:
    store = open_tier_store(f"sqlite:///{tmp_path}/tiers.sqlite3")
    assert isinstance(store, SQLiteTierStore)
    assert store.get(A) is None
    store.set(A, Tier.PRO)
    store.set(A, Tier.ENTERPRISE)
    assert store.get(A) is Tier.ENTERPRISE
    assert store.get(B) is None
    store.close()
    reopened = SQLiteTierStore(tmp_path / "tiers.sqlite3")
    assert reopened.get(A) is Tier.ENTERPRISE
    reopened.close()


def test_unknown_stored_tier_is_a_store_error(tmp_path: Path) -> None:
    store = SQLiteTierStore(tmp_path / "tiers.sqlite3")
    with sqlite3.connect(tmp_path / "tiers.sqlite3") as other:
        other.execute("INSERT INTO boost_tenant_tiers VALUES (?, 'platinum')", (A.value,))
    with pytest.raises(TierStoreError, match="platinum"):
        store.get(A)
    store.close()


def test_bad_tier_store_url_names_the_store() -> None:
    with pytest.raises(ConfigError, match="tier store"):
        open_tier_store("mysql://db/tiers")


class MemoryTierStore:
    """Tiers in a dict; get can be made slow, blocked or failing, and counts its calls."""

    def __init__(self, tiers: dict[TenantId, Tier] | None = None) -> None:
        self.tiers = dict(tiers or {})
        self.gets = 0
        self.delay_s = 0.0
        self.gate: threading.Event | None = None
        self.fail: Exception | None = None
        self._lock = threading.Lock()

    def get(self, tenant: TenantId) -> Tier | None:
        with self._lock:
            self.gets += 1
        if self.gate is not None:
            self.gate.wait(10)
        time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return self.tiers.get(tenant)

    def set(self, tenant: TenantId, tier: Tier) -> None:
        self.tiers[tenant] = tier


def timed(call: Callable[[], Tier]) -> tuple[Tier, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def test_tier_of_never_waits_for_a_slow_store() -> None:
    store = MemoryTierStore({A: Tier.ENTERPRISE})
    store.delay_s = 2.0
    resolver = TierResolver(store)
    tier, elapsed = timed(lambda: resolver.tier_of(A))
    assert tier is Tier.FREE  # not known yet: the default, at once
    assert elapsed < 0.5  # the store takes 2 s; generous bound, a behaviour check not a benchmark
    assert resolver.tier_of(A) is Tier.FREE
    assert wait_until(lambda: resolver.tier_of(A) is Tier.ENTERPRISE, timeout=10)
    assert store.gets == 1


def test_unknown_tenant_resolves_to_free() -> None:
    resolver = TierResolver(MemoryTierStore())
    assert resolver.tier_of(B) is Tier.FREE
    assert wait_until(lambda: resolver.pending() == 0)
    assert resolver.tier_of(B) is Tier.FREE


def test_one_lookup_per_tenant_at_a_time() -> None:
    store = MemoryTierStore({A: Tier.PRO})
    store.gate = threading.Event()
    resolver = TierResolver(store)
    for _ in range(200):
        assert resolver.tier_of(A) is Tier.FREE
    store.gate.set()
    assert wait_until(lambda: resolver.tier_of(A) is Tier.PRO)
    assert store.gets == 1


def test_expired_entry_answers_its_last_value_while_refreshing() -> None:
    now = [0.0]
    store = MemoryTierStore({A: Tier.PRO})
    resolver = TierResolver(store, ttl_s=60, clock=lambda: now[0])
    resolver.tier_of(A)
    assert wait_until(lambda: resolver.tier_of(A) is Tier.PRO)
    store.set(A, Tier.ENTERPRISE)
    now[0] = 30.0
    assert resolver.tier_of(A) is Tier.PRO  # cached, within the TTL
    assert store.gets == 1
    store.gate = threading.Event()
    now[0] = 61.0
    assert resolver.tier_of(A) is Tier.PRO  # expired: the last value while the lookup runs
    store.gate.set()
    assert wait_until(lambda: resolver.tier_of(A) is Tier.ENTERPRISE)


def test_invalidate_looks_up_again_keeping_the_old_value_meanwhile() -> None:
    store = MemoryTierStore({A: Tier.PRO})
    resolver = TierResolver(store)
    resolver.tier_of(A)
    assert wait_until(lambda: resolver.tier_of(A) is Tier.PRO)
    store.set(A, Tier.PRO_PLUS)
    store.gate = threading.Event()
    resolver.invalidate(A)
    assert resolver.tier_of(A) is Tier.PRO
    store.gate.set()
    assert wait_until(lambda: resolver.tier_of(A) is Tier.PRO_PLUS)


def test_store_errors_keep_the_previous_tier_and_warn() -> None:
    now = [0.0]
    store = MemoryTierStore({A: Tier.ENTERPRISE})
    resolver = TierResolver(store, ttl_s=60, clock=lambda: now[0])
    resolver.tier_of(A)
    assert wait_until(lambda: resolver.tier_of(A) is Tier.ENTERPRISE)
    store.fail = TierStoreError("database is down")
    now[0] = 100.0
    with capture_logs() as logs:
        assert resolver.tier_of(A) is Tier.ENTERPRISE
        assert wait_until(lambda: resolver.pending() == 0 and store.gets == 2)
    assert resolver.tier_of(A) is Tier.ENTERPRISE
    warnings = [entry for entry in logs if entry["event"] == "tier_lookup_failed"]
    assert warnings and warnings[0]["log_level"] == "warning"
    assert warnings[0]["tenant"] == "org-A"
    # Tried again after at most five seconds, not a whole TTL.
    store.fail = None
    store.set(A, Tier.PRO)
    now[0] = 105.5
    resolver.tier_of(A)
    assert wait_until(lambda: resolver.tier_of(A) is Tier.PRO)


def test_store_error_for_a_new_tenant_keeps_free() -> None:
    store = MemoryTierStore()
    store.fail = RuntimeError("boom")
    resolver = TierResolver(store)
    with capture_logs():
        assert resolver.tier_of(A) is Tier.FREE
        assert wait_until(lambda: resolver.pending() == 0)
    assert resolver.tier_of(A) is Tier.FREE


def test_resolver_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="ttl_s"):
        TierResolver(MemoryTierStore(), ttl_s=0)


@pytest.mark.postgres
def test_postgres_tier_store_round_trip() -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn = reachable_postgres_dsn()
    table = f"tiers_{uuid.uuid4().hex[:12]}"
    store = open_tier_store(dsn, table=table)
    try:
        assert store.get(A) is None
        store.set(A, Tier.PRO_PLUS)
        store.set(A, Tier.PRO)
        assert store.get(A) is Tier.PRO
        assert store.get(B) is None
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP TABLE IF EXISTS "{table}"')
