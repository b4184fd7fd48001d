"""Subscription tiers, their concurrency limits, where a tenant's tier is stored, and its resolver.

The resolver answers from a cache at once and refreshes from the store in the background
(fairness/cache.py).
"""

from __future__ import annotations

import enum
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import structlog

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.fairness.cache import TenantCache
from boost_tenancy.sqlstore import PostgresBackend, SqlBackend, SQLiteBackend
from boost_tenancy.storage import parse_store_url
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.fairness")

_DEFAULT_TABLE: Final = "boost_tenant_tiers"
_TABLE_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class Tier(enum.StrEnum):
    """A tenant's subscription tier; the stored form is the value."""

    FREE = "free"
    PRO = "pro"
    PRO_PLUS = "pro_plus"
    ENTERPRISE = "enterprise"


class TierStoreError(BoostTenancyError):
    """The tier store could not read or write a tenant's tier."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TierLimits:
    """Concurrent messages in handling per tenant, by tier."""

    free: int = 1
    pro: int = 3
    pro_plus: int = 3
    enterprise: int = 5

    def __post_init__(self) -> None:
        for name in ("free", "pro", "pro_plus", "enterprise"):
            value: object = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"TierLimits.{name} must be an integer of at least 1: {value!r}")

    def for_tier(self, tier: Tier) -> int:
        """The concurrency limit of a tier."""
        limit: int = getattr(self, Tier(tier).name.lower())
        return limit


# -- stores ---------------------------------------------------------------------------------------
class TierStore(Protocol):
    """Where tenants' tiers live; get returns None for a tenant never assigned one."""

    def get(self, tenant: TenantId) -> Tier | None: ...

    def set(self, tenant: TenantId, tier: Tier) -> None: ...

    def close(self) -> None: ...


def _checked_table(table: object) -> str:
    # The table name is the only text put into SQL; anything but a plain identifier is refused.
    if not isinstance(table, str) or _TABLE_RE.fullmatch(table) is None:
        raise ConfigError(
            f"tier store table {table!r} is not a plain identifier: expected 1 to 63 characters "
            "from A-Z, a-z, 0-9 and '_', not starting with a digit"
        )
    return table


class _SqlTierStore:
    """What both backends share: the SQL text and decoding, over one backend connection."""

    def __init__(self, table: str, backend: SqlBackend) -> None:
        self._table = table
        self._backend = backend
        placeholder = backend.placeholder
        self._select = f'SELECT tier FROM "{table}" WHERE tenant = {placeholder}'  # noqa: S608  # checked identifier
        # ON CONFLICT ... DO UPDATE is understood by SQLite (3.24+) and PostgreSQL alike.
        self._upsert = (
            f'INSERT INTO "{table}" (tenant, tier) VALUES ({placeholder}, {placeholder}) '  # noqa: S608  # checked identifier
            "ON CONFLICT (tenant) DO UPDATE SET tier = excluded.tier"
        )

    def get(self, tenant: TenantId) -> Tier | None:
        """The tenant's stored tier, or None when none was set."""
        params = (TenantId.parse(tenant).value,)
        rows = self._backend.execute("get", self._select, params, fetch=True)
        if not rows:
            return None
        raw = rows[0][0]
        try:
            return Tier(raw)
        except ValueError as exc:
            raise TierStoreError(
                f"tier store table {self._table!r} holds the unknown tier {raw!r} "
                f"for tenant {tenant.value!r}"
            ) from exc

    def set(self, tenant: TenantId, tier: Tier) -> None:
        """Assign a tier; committed when this returns."""
        value = Tier(tier).value
        params = (TenantId.parse(tenant).value, value)
        self._backend.execute("set", self._upsert, params, fetch=False)

    def close(self) -> None:
        self._backend.close()


def _create_sql(table: str) -> tuple[str]:
    return (f'CREATE TABLE IF NOT EXISTS "{table}" (tenant TEXT PRIMARY KEY, tier TEXT NOT NULL)',)


def _what(table: str) -> str:
    return f"tier store table {table!r}"


# The tier stores keep their historic rules: SQLite keeps its default synchronous setting, a failed
# schema setup is reported as the failure to open or connect, a failed close is ignored, and a
# call after close() is left to the driver.
class SQLiteTierStore(_SqlTierStore):
    """Tiers in one SQLite file, for a single host."""

    def __init__(self, path: str | os.PathLike[str], *, table: str = _DEFAULT_TABLE) -> None:
        table = _checked_table(table)
        backend = SQLiteBackend(
            path,
            error=TierStoreError,
            what=_what(table),
            schema=_create_sql(table),
            schema_step=None,
            synchronous_full=False,
            strict=False,
        )
        super().__init__(table, backend)


class PostgresTierStore(_SqlTierStore):
    """Tiers in a PostgreSQL table shared by every worker host; needs psycopg 3."""

    def __init__(self, dsn: str, *, table: str = _DEFAULT_TABLE) -> None:
        table = _checked_table(table)
        backend = PostgresBackend(
            dsn,
            error=TierStoreError,
            what=_what(table),
            needed_by="PostgresTierStore",
            schema=_create_sql(table),
            schema_step=None,
            strict=False,
        )
        super().__init__(table, backend)


def open_tier_store(
    url: str, *, table: str = _DEFAULT_TABLE
) -> SQLiteTierStore | PostgresTierStore:
    """Open the tier store a URL names: postgresql://, postgres://, sqlite:///path or a path."""
    parsed = parse_store_url(url, what="tier store")
    if parsed.backend == "postgresql":
        return PostgresTierStore(parsed.target, table=table)
    return SQLiteTierStore(parsed.target, table=table)


# -- resolver -------------------------------------------------------------------------------------
class TierResolver(TenantCache[Tier]):
    """A tenant's tier without waiting on the store: cached for ttl_s, refreshed in the background.

    A tenant seen for the first time is FREE until its first lookup completes; an expired entry
    keeps answering its last value meanwhile. One lookup per tenant runs at a time, on
    refresh_threads daemon threads. A failed lookup keeps the previous (or default) tier, logs
    tier_lookup_failed and is tried again after at most five seconds (TenantCache).
    """

    def __init__(
        self,
        store: TierStore,
        *,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        default: Tier = Tier.FREE,
        refresh_threads: int = 2,
    ) -> None:
        self._store = store
        self._fallback = Tier(default)
        super().__init__(
            self._lookup,
            default=self._fallback,
            ttl_s=ttl_s,
            clock=clock,
            refresh_threads=refresh_threads,
            thread_name="boost-tier-refresh",
            failure_event="tier_lookup_failed",
            describe=lambda tier: tier.value,
            what="TierResolver",
        )

    def _lookup(self, tenant: TenantId) -> Tier:
        found = self._store.get(tenant)
        return self._fallback if found is None else Tier(found)

    def tier_of(self, tenant: TenantId) -> Tier:
        """The tenant's tier as known now; never waits for the store."""
        return self.get(tenant)

    def close(self) -> None:
        """End the refresh threads and close the store; tier_of answers from the cache after."""
        super().close()
        self._store.close()


__all__ = [
    "PostgresTierStore",
    "SQLiteTierStore",
    "Tier",
    "TierLimits",
    "TierResolver",
    "TierStore",
    "TierStoreError",
    "open_tier_store",
]
