"""Usage that survives a restart: the accounting's counters per tenant and day, added up in the
SQL store (SQLite or PostgreSQL) by every process, for billing and for a tenant's history.

The Accounting counts in memory and starts from zero with every process. A UsageRecorder writes
what it counted since its last write to boost_tenant_usage every flush_s seconds (and once more
when it closes), adding to the day's row of each tenant and counter, so every process of a
deployment adds to the same totals. While the store is down nothing is lost and nothing blocks:
the counts stay in memory and go with the next write that succeeds. What a process counted after
its last successful write is lost only if it dies, or closes while the store is down (logged
with the counts).

A delta is booked on the UTC day it is written, so counts made in the last seconds of a day
may land on the next one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Final

import structlog

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.fairness.accounting import Accounting
from boost_tenancy.sqlstore import PostgresBackend, SqlBackend, SQLiteBackend
from boost_tenancy.storage import parse_store_url
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.fairness.usage")

USAGE_TABLE: Final = "boost_tenant_usage"
DEFAULT_FLUSH_S: Final = 60.0
ROWS_PER_STATEMENT: Final = 200
"""Rows one statement adds (4 parameters each, far below SQLite's and PostgreSQL's limits)."""
_DERIVED: Final = frozenset({"failed"})
"""Snapshot fields computed from others (failed = retried + dead_lettered): not stored."""

_SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {USAGE_TABLE} ("
    "tenant TEXT NOT NULL, day TEXT NOT NULL, counter TEXT NOT NULL, count BIGINT NOT NULL, "
    "PRIMARY KEY (tenant, day, counter))",
)

Key = tuple[str, str, str]
"""(tenant label, ISO day, counter)."""


class UsageStoreError(BoostTenancyError):
    """The usage store could not read or write."""


class UsageStore:
    """boost_tenant_usage over one backend connection: add deltas, read totals."""

    def __init__(self, backend: SqlBackend) -> None:
        self._backend = backend
        p = backend.placeholder
        self._row = f"({p}, {p}, {p}, {p})"
        self._read = (
            f"SELECT day, counter, count FROM {USAGE_TABLE} "  # noqa: S608  # constant name
            f"WHERE tenant = {p} AND day >= {p} AND day <= {p} ORDER BY day, counter"
        )

    def add(self, deltas: Mapping[Key, int]) -> None:
        """Add each delta to its row, all in one statement: all of them or none (at most
        ROWS_PER_STATEMENT; UsageRecorder splits larger sets)."""
        rows = [(key, count) for key, count in sorted(deltas.items()) if count]
        if not rows:
            return
        if len(rows) > ROWS_PER_STATEMENT:
            raise ValueError(f"at most {ROWS_PER_STATEMENT} rows per add, got {len(rows)}")
        # ON CONFLICT ... DO UPDATE is understood by SQLite (3.24+) and PostgreSQL alike; the
        # keys of one statement are distinct, as PostgreSQL requires.
        sql = (
            f"INSERT INTO {USAGE_TABLE} (tenant, day, counter, count) VALUES "  # noqa: S608  # constant name
            + ", ".join([self._row] * len(rows))
            + f" ON CONFLICT (tenant, day, counter) DO UPDATE SET count = {USAGE_TABLE}.count"
            " + excluded.count"
        )
        params = [
            value
            for (tenant, day, counter), count in rows
            for value in (tenant, day, counter, count)
        ]
        self._backend.execute("add", sql, params, fetch=False)

    def days(
        self, tenant: TenantId | str, *, since: date = date.min, until: date = date.max
    ) -> dict[str, dict[str, int]]:
        """ISO day -> counter -> count for tenant ("_unknown" for messages with no tenant)."""
        label = tenant if tenant == "_unknown" else TenantId.parse(tenant).value
        rows = self._backend.execute(
            "read", self._read, (label, since.isoformat(), until.isoformat()), fetch=True
        )
        found: dict[str, dict[str, int]] = {}
        for day, counter, count in rows:
            found.setdefault(str(day), {})[str(counter)] = int(count)
        return found

    def close(self) -> None:
        self._backend.close()


def open_usage_store(url: str) -> UsageStore:
    """The usage store a URL names: postgresql://, postgres://, sqlite:///path or a path."""
    parsed = parse_store_url(url, what="usage store")
    backend: SqlBackend
    if parsed.backend == "postgresql":
        backend = PostgresBackend(
            parsed.target,
            error=UsageStoreError,
            what="usage store",
            needed_by="the usage store",
            schema=_SCHEMA,
        )
    else:
        backend = SQLiteBackend(
            os.fspath(parsed.target), error=UsageStoreError, what="usage store", schema=_SCHEMA
        )
    return UsageStore(backend)


class UsageRecorder:
    """Writes an Accounting's counts since the last write to a UsageStore, on a daemon thread
    every flush_s seconds, and once more at close."""

    def __init__(
        self,
        accounting: Accounting,
        store: UsageStore,
        *,
        flush_s: float = DEFAULT_FLUSH_S,
        today: Callable[[], date] = lambda: datetime.now(UTC).date(),
    ) -> None:
        if not flush_s > 0:
            raise ConfigError(f"UsageRecorder flush_s must be positive, got {flush_s!r}")
        self._accounting = accounting
        self._store = store
        self._flush_s = float(flush_s)
        self._today = today
        self._written: dict[tuple[str, str], int] = {}
        """(tenant, counter) -> the cumulative count already written."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="boost-usage", daemon=True)
            self._thread.start()

    def flush(self) -> bool:
        """Write what was counted since the last successful write; False if the store failed
        (the counts stay for the next flush)."""
        with self._lock:
            day = self._today().isoformat()
            current = self._counts()
            changed = sorted(
                (key, count) for key, count in current.items() if count != self._written.get(key, 0)
            )
            for start in range(0, len(changed), ROWS_PER_STATEMENT):
                chunk = changed[start : start + ROWS_PER_STATEMENT]
                deltas = {
                    (tenant, day, counter): count - self._written.get((tenant, counter), 0)
                    for (tenant, counter), count in chunk
                }
                try:
                    self._store.add(deltas)
                except Exception as exc:  # a store outage must not stop the counting
                    log.warning("usage_write_failed", error_type=type(exc).__name__, error=str(exc))
                    return False
                # Each statement is all or nothing: what it added is written, and only that,
                # so a retry after a failure never adds a row twice.
                self._written.update(chunk)
            return True

    def _loop(self) -> None:
        while not self._stop.wait(self._flush_s):
            self.flush()

    def close(self) -> None:
        """Stop the thread, write what is left, close the store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._flush_s + 5)
        if not self.flush():
            log.error("usage_lost_at_close", unwritten=self._unwritten())
        self._store.close()

    def _counts(self) -> dict[tuple[str, str], int]:
        """(tenant, counter) -> the accounting's cumulative count, derived counters aside."""
        return {
            (tenant, counter): count
            for tenant, view in self._accounting.snapshot_all().items()
            for counter, count in view.items()
            if counter not in _DERIVED
        }

    def _unwritten(self) -> dict[str, int]:
        return {
            f"{tenant}/{counter}": count - self._written.get((tenant, counter), 0)
            for (tenant, counter), count in self._counts().items()
            if count != self._written.get((tenant, counter), 0)
        }


__all__ = [
    "DEFAULT_FLUSH_S",
    "USAGE_TABLE",
    "UsageRecorder",
    "UsageStore",
    "UsageStoreError",
    "open_usage_store",
]
