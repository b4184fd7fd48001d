"""Tests of the error store: one suite, run against both the SQLite and the PostgreSQL backend.

PostgreSQL comes from BOOST_TEST_POSTGRES_DSN; if unreachable, its tests skip (fail under CI=true).
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import pytest
from structlog.testing import capture_logs

from boost_tenancy.errors import ConfigError, ErrorStoreError
from boost_tenancy.resilience.error_store import (
    ErrorStore,
    FailureOutcome,
    FailureRecord,
    PostgresErrorStore,
    SQLiteErrorStore,
    open_error_store,
)
from boost_tenancy.resilience.recorder import record_failure
from boost_tenancy.tenancy import TenantId
from tests.conftest import wait_until

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MARKER = "…[truncated]"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
TENANT_A = TenantId("3f2b8c1e-5d4a-4b7e-9c1d-00000000000a")
TENANT_B = TenantId("tenant-b")

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def make(**overrides: Any) -> FailureRecord:
    fields: dict[str, Any] = {
        "tenant": TENANT_A,
        "queue": "cmd.document.process",
        "message_id": "m-1",
        "correlation_id": "c-1",
        "attempt": 1,
        "outcome": FailureOutcome.RETRY,
        "error_type": "TransientError",
        "error_text": "storage unavailable",
        "occurred_at": T0,
    }
    fields.update(overrides)
    return FailureRecord(**fields)


def new_table() -> str:
    return "t_" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def postgres_dsn() -> str:
    dsn = os.environ.get("BOOST_TEST_POSTGRES_DSN", DEFAULT_DSN)
    try:
        with psycopg.connect(dsn, connect_timeout=5):
            pass
    except psycopg.Error as exc:
        reason = f"PostgreSQL unreachable at BOOST_TEST_POSTGRES_DSN: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return dsn


@dataclass
class Backend:
    """Opens stores of one backend on the test's tables, and closes and drops them afterwards."""

    kind: str
    location: str
    table: str = field(default_factory=new_table)
    opened: list[ErrorStore] = field(default_factory=list)
    tables: set[str] = field(default_factory=set)

    def open(self, table: str | None = None, location: str | None = None) -> ErrorStore:
        name = self.table if table is None else table
        self.tables.add(name)
        where = self.location if location is None else location
        store: ErrorStore
        if self.kind == "sqlite":
            store = SQLiteErrorStore(where, table=name)
        else:
            store = PostgresErrorStore(where, table=name)
        self.opened.append(store)
        return store

    def run(self, sql: str, params: tuple[object, ...] = ()) -> None:
        """Run a statement that returns no rows on a separate connection, committed."""
        if self.kind == "sqlite":
            Path(self.location).parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.location)
            try:
                connection.execute(sql, params)
                connection.commit()
            finally:
                connection.close()
        else:
            with psycopg.connect(self.location, autocommit=True) as admin:
                admin.execute(sql.replace("?", "%s"), params)

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Run SQL on a separate connection, to look at what the store really wrote."""
        if self.kind == "sqlite":
            connection = sqlite3.connect(self.location)
            try:
                return connection.execute(sql, params).fetchall()
            finally:
                connection.close()
        with psycopg.connect(self.location, autocommit=True) as admin:
            return admin.execute(sql.replace("?", "%s"), params).fetchall()

    def columns(self, table: str) -> list[tuple[str, str, bool]]:
        """(name, type, nullable) of each column, in table order."""
        if self.kind == "sqlite":
            rows = self.query(f'PRAGMA table_info("{table}")')
            return [(row[1], row[2], not row[3]) for row in rows]
        rows = self.query(
            "SELECT column_name, data_type, is_nullable = 'YES' FROM information_schema.columns "
            "WHERE table_name = ? AND table_schema = current_schema() ORDER BY ordinal_position",
            (table,),
        )
        return [(row[0], row[1], row[2]) for row in rows]

    def indexed_columns(self, table: str) -> list[list[str]]:
        """The column list of each index on the table."""
        if self.kind == "sqlite":
            names = [row[1] for row in self.query(f'PRAGMA index_list("{table}")')]
            return [[row[2] for row in self.query(f'PRAGMA index_info("{n}")')] for n in names]
        rows = self.query(
            "SELECT array_agg(a.attname ORDER BY k.ordinality) "
            "FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ordinality) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(quote_ident(?)) AND NOT i.indisprimary "
            "GROUP BY i.indexrelid",
            (table,),
        )
        return [list(row[0]) for row in rows]

    def cleanup(self) -> None:
        for store in self.opened:
            store.close()
        if self.kind == "sqlite":
            if not Path(self.location).exists():
                return
            connection = sqlite3.connect(self.location)
            try:
                for name in self.tables:
                    connection.execute(f'DROP TABLE IF EXISTS "{name}"')
                connection.commit()
            finally:
                connection.close()
        else:
            with psycopg.connect(self.location, autocommit=True) as admin:
                for name in self.tables:
                    admin.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ErrorStore]:
    kind: str = request.param
    if kind == "sqlite":
        chosen = Backend(kind, str(tmp_path / "nested" / "errors.sqlite3"))
    else:
        chosen = Backend(kind, request.getfixturevalue("postgres_dsn"))
    request.node.stash[BACKEND_KEY] = chosen
    try:
        yield chosen.open()
    finally:
        chosen.cleanup()


BACKEND_KEY = pytest.StashKey[Backend]()


@pytest.fixture
def store_backend(store: ErrorStore, request: pytest.FixtureRequest) -> Backend:
    """The Backend behind `store`, to reopen its table or open others next to it."""
    chosen: Backend = request.node.stash[BACKEND_KEY]
    return chosen


def test_round_trip_keeps_every_field(store: ErrorStore) -> None:
    dead = make(
        message_id="m-dead",
        correlation_id="corr-42",
        attempt=5,
        outcome=FailureOutcome.DEAD_LETTER,
        error_type="builtins.ValueError",
        error_text="bad page count: 'x'\n  line 2 — ünïcode ✓",
        occurred_at=datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
    )
    mismatched = make(
        message_id="m-mismatch",
        outcome=FailureOutcome.QUARANTINE,
        error_type="TenantMismatchError",
        occurred_at=T0 + timedelta(hours=3),
        raw_tenant="tenant-b",
    )
    tenantless = make(
        tenant=None,
        message_id="m-none",
        correlation_id=None,
        outcome=FailureOutcome.QUARANTINE,
        error_type="InvalidTenantError",
        raw_tenant="not a tenant'; DROP TABLE x; --",
    )
    redriven = make(message_id="m-redrive", outcome=FailureOutcome.REDRIVE, attempt=6)
    for record in (dead, mismatched, tenantless, redriven):
        store.record(record)

    assert store.failures(tenant=TENANT_A) == [redriven, dead, mismatched]
    assert store.failures(tenant=None) == [tenantless]
    got = store.failures(tenant=TENANT_A, message_id="m-dead")[0]
    assert got.occurred_at == datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    assert got.occurred_at.tzinfo is UTC
    assert got.outcome is FailureOutcome.DEAD_LETTER
    assert isinstance(got.tenant, TenantId)


def test_filters_select_by_tenant_queue_message_and_outcome(store: ErrorStore) -> None:
    odd_queue = "evt.o'brien\"; --"
    records = [
        make(message_id="m-1", queue="cmd.a", outcome=FailureOutcome.RETRY),
        make(message_id="m-1", queue="cmd.a", outcome=FailureOutcome.DEAD_LETTER, attempt=2),
        make(message_id="m-2", queue="cmd.a", outcome=FailureOutcome.RETRY),
        make(message_id="m-1", queue=odd_queue, outcome=FailureOutcome.RETRY),
        make(tenant=TENANT_B, message_id="m-1", queue="cmd.a", outcome=FailureOutcome.RETRY),
    ]
    for offset, record in enumerate(records):
        store.record(replace(record, occurred_at=T0 + timedelta(seconds=offset)))

    def keys(**filters: Any) -> list[tuple[str, str, str]]:
        return [(r.queue, r.message_id, r.outcome.value) for r in store.failures(**filters)]

    assert keys(tenant=TENANT_A, queue="cmd.a") == [
        ("cmd.a", "m-1", "retry"),
        ("cmd.a", "m-1", "dead_letter"),
        ("cmd.a", "m-2", "retry"),
    ]
    assert keys(tenant=TENANT_A, queue=odd_queue) == [(odd_queue, "m-1", "retry")]
    assert keys(tenant=TENANT_A, message_id="m-2") == [("cmd.a", "m-2", "retry")]
    assert keys(tenant=TENANT_A, outcome=FailureOutcome.DEAD_LETTER) == [
        ("cmd.a", "m-1", "dead_letter")
    ]
    assert keys(tenant=TENANT_A, queue="cmd.a", message_id="m-1", outcome=FailureOutcome.RETRY) == [
        ("cmd.a", "m-1", "retry")
    ]
    assert keys(tenant=TENANT_B) == [("cmd.a", "m-1", "retry")]
    assert keys(tenant=TENANT_A, queue="cmd.unknown") == []


def test_failures_come_oldest_first_then_in_insertion_order(store: ErrorStore) -> None:
    inserted = [
        ("late", T0 + timedelta(seconds=3)),
        ("tie-first", T0),
        ("tie-second", T0),
        ("half-second", T0 + timedelta(microseconds=500_000)),
        ("one-second", T0 + timedelta(seconds=1)),
        ("a-day-before", T0 - timedelta(days=1)),
    ]
    for message_id, when in inserted:
        store.record(make(message_id=message_id, occurred_at=when))

    order = [r.message_id for r in store.failures(tenant=TENANT_A)]
    assert order == ["a-day-before", "tie-first", "tie-second", "half-second", "one-second", "late"]
    assert [r.message_id for r in store.failures(tenant=TENANT_A, limit=2)] == [
        "a-day-before",
        "tie-first",
    ]


def test_limit_must_be_positive(store: ErrorStore) -> None:
    with pytest.raises(ErrorStoreError, match="limit"):
        store.failures(tenant=TENANT_A, limit=0)


def test_tenant_none_returns_only_tenantless_quarantine_records(store: ErrorStore) -> None:
    store.record(make(message_id="m-retry"))
    store.record(make(message_id="m-q-a", outcome=FailureOutcome.QUARANTINE, raw_tenant="zz"))
    store.record(
        make(tenant=None, message_id="m-q-none", outcome=FailureOutcome.QUARANTINE, raw_tenant="")
    )
    store.record(make(tenant=TENANT_B, message_id="m-q-b", outcome=FailureOutcome.QUARANTINE))

    found = store.failures(tenant=None)
    assert [r.message_id for r in found] == ["m-q-none"]
    assert found[0].tenant is None
    assert found[0].raw_tenant == ""


def test_one_tenant_never_sees_another_tenants_failures(store: ErrorStore) -> None:
    for number in range(5):
        store.record(make(tenant=TENANT_A, message_id=f"m-{number}"))
        store.record(make(tenant=TENANT_B, message_id=f"m-{number}"))
    # Ids differing only in case are distinct tenants, never folded together.
    store.record(make(tenant=TenantId("Tenant-B"), message_id="m-0"))

    for tenant in (TENANT_A, TENANT_B):
        found = store.failures(tenant=tenant)
        assert len(found) == 5
        assert {r.tenant for r in found} == {tenant}
        assert [r.tenant for r in store.failures(tenant=tenant, message_id="m-0")] == [tenant]
    assert store.failures(tenant=TenantId("tenant-c")) == []


def test_concurrent_writers_lose_nothing(store: ErrorStore) -> None:
    threads, per_thread = 8, 50
    start = threading.Barrier(threads)

    def write(worker: int) -> None:
        start.wait()
        for number in range(per_thread):
            store.record(make(message_id=f"w{worker}-{number}", attempt=number + 1))

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(write, worker) for worker in range(threads)]:
            future.result()

    found = store.failures(tenant=TENANT_A)
    assert len(found) == threads * per_thread
    assert {r.message_id for r in found} == {
        f"w{worker}-{number}" for worker in range(threads) for number in range(per_thread)
    }


def test_record_survives_close_and_reopen(store: ErrorStore, store_backend: Backend) -> None:
    record = make(outcome=FailureOutcome.DEAD_LETTER, attempt=3)
    store.record(record)
    store.close()

    reopened = store_backend.open()
    assert reopened.failures(tenant=TENANT_A) == [record]
    if store_backend.kind == "sqlite":
        assert Path(store_backend.location).is_file()


def test_use_after_close_is_refused(store: ErrorStore) -> None:
    store.close()
    store.close()
    with pytest.raises(ErrorStoreError, match="after close"):
        store.record(make())
    with pytest.raises(ErrorStoreError, match="after close"):
        store.failures(tenant=TENANT_A)


EXPECTED_COLUMNS = {
    "sqlite": [
        ("id", "INTEGER", True),
        ("tenant", "TEXT", True),
        ("raw_tenant", "TEXT", True),
        ("queue", "TEXT", False),
        ("message_id", "TEXT", False),
        ("correlation_id", "TEXT", True),
        ("attempt", "INTEGER", False),
        ("outcome", "TEXT", False),
        ("error_type", "TEXT", False),
        ("error_text", "TEXT", False),
        ("occurred_at", "TEXT", False),
        ("trace", "TEXT", True),
    ],
    "postgres": [
        ("id", "bigint", False),
        ("tenant", "text", True),
        ("raw_tenant", "text", True),
        ("queue", "text", False),
        ("message_id", "text", False),
        ("correlation_id", "text", True),
        ("attempt", "integer", False),
        ("outcome", "text", False),
        ("error_type", "text", False),
        ("error_text", "text", False),
        ("occurred_at", "timestamp with time zone", False),
        ("trace", "text", True),
    ],
}


def test_schema_has_the_documented_columns_and_index(
    store: ErrorStore, store_backend: Backend
) -> None:
    # The longest allowed name checks that the index is still created when PostgreSQL would cut
    # a derived index name at 63 bytes.
    long_name = "t" + uuid.uuid4().hex + "x" * 30
    assert len(long_name) == 63
    store_backend.open(table=long_name)

    for table in (store_backend.table, long_name):
        assert store_backend.columns(table) == EXPECTED_COLUMNS[store_backend.kind]
        assert ["tenant", "queue", "message_id"] in store_backend.indexed_columns(table)


def test_occurred_at_is_stored_as_utc(store: ErrorStore, store_backend: Backend) -> None:
    plus_two = timezone(timedelta(hours=2))
    store.record(make(message_id="whole", occurred_at=datetime(2024, 5, 1, 14, 0, tzinfo=plus_two)))
    store.record(make(message_id="micro", occurred_at=T0 + timedelta(microseconds=7)))

    stored = store_backend.query(
        f'SELECT message_id, occurred_at FROM "{store_backend.table}" ORDER BY id'
    )
    if store_backend.kind == "sqlite":
        assert stored == [
            ("whole", "2024-05-01T12:00:00.000000+00:00"),
            ("micro", "2024-05-01T12:00:00.000007+00:00"),
        ]
        assert store_backend.query("PRAGMA journal_mode") == [("wal",)]
    else:
        assert stored == [("whole", T0), ("micro", T0 + timedelta(microseconds=7))]


def test_longest_table_name_is_accepted(store: ErrorStore, store_backend: Backend) -> None:
    long_name = "t" + uuid.uuid4().hex + "x" * 30
    assert len(long_name) == 63
    sibling = long_name[:-1] + "y"
    first = store_backend.open(table=long_name)
    second = store_backend.open(table=sibling)
    first.record(make(message_id="in-first"))
    second.record(make(message_id="in-second"))

    assert [r.message_id for r in first.failures(tenant=TENANT_A)] == ["in-first"]
    assert [r.message_id for r in second.failures(tenant=TENANT_A)] == ["in-second"]


def test_long_error_text_is_truncated_with_a_marker(store: ErrorStore) -> None:
    long_text = "Traceback start\n" + "".join(f"{n:05d}," for n in range(2000))
    exact = "e" * 8000
    store.record(make(message_id="long", error_text=long_text))
    store.record(make(message_id="exact", error_text=exact))

    stored = {r.message_id: r.error_text for r in store.failures(tenant=TENANT_A)}
    assert len(long_text) > 8000
    assert len(stored["long"]) == 8000
    assert stored["long"].endswith(MARKER)
    assert stored["long"] == long_text[: 8000 - len(MARKER)] + MARKER
    assert stored["exact"] == exact


def test_nul_characters_are_stored_as_replacement_characters(store: ErrorStore) -> None:
    store.record(
        make(
            tenant=None,
            outcome=FailureOutcome.QUARANTINE,
            raw_tenant="bad\x00tenant",
            error_text="nul \x00 inside",
        )
    )
    [found] = store.failures(tenant=None)
    assert found.raw_tenant == "bad\ufffdtenant"
    assert found.error_text == "nul \ufffd inside"


@pytest.mark.postgres
def test_postgres_reconnects_once_after_losing_its_connection(
    postgres_dsn: str, request: pytest.FixtureRequest
) -> None:
    application = "boost_test_" + uuid.uuid4().hex[:12]
    table = new_table()
    dsn = psycopg.conninfo.make_conninfo(postgres_dsn, application_name=application)
    store = PostgresErrorStore(dsn, table=table)
    backend = Backend("postgres", postgres_dsn, table=table, opened=[store], tables={table})
    request.addfinalizer(backend.cleanup)

    store.record(make(message_id="before"))
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        ).fetchall()
    assert killed == [(True,)]

    store.record(make(message_id="after"))
    assert [r.message_id for r in store.failures(tenant=TENANT_A)] == ["before", "after"]


@pytest.mark.postgres
def test_postgres_driver_errors_become_error_store_errors(
    postgres_dsn: str, request: pytest.FixtureRequest
) -> None:
    table = new_table()
    store = PostgresErrorStore(postgres_dsn, table=table)
    backend = Backend("postgres", postgres_dsn, table=table, opened=[store], tables={table})
    request.addfinalizer(backend.cleanup)
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'DROP TABLE "{table}"')

    with pytest.raises(ErrorStoreError, match=f"{table}.*record") as excinfo:
        store.record(make())
    assert isinstance(excinfo.value.__cause__, psycopg.Error)


def test_sqlite_driver_errors_become_error_store_errors(tmp_path: Path) -> None:
    path = tmp_path / "errors.sqlite3"
    table = new_table()
    store = SQLiteErrorStore(path, table=table)
    try:
        connection = sqlite3.connect(path)
        connection.execute(f'DROP TABLE "{table}"')
        connection.close()
        with pytest.raises(ErrorStoreError, match=f"{table}.*failures") as excinfo:
            store.failures(tenant=TENANT_A)
        assert isinstance(excinfo.value.__cause__, sqlite3.Error)
    finally:
        store.close()


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(
    "bad", ["", "1table", "bad-name", 'x"; DROP TABLE y; --', "a" * 64, "tëst", "t\n"]
)
def test_invalid_table_name_is_refused(kind: str, bad: str, tmp_path: Path) -> None:
    path = tmp_path / "errors.sqlite3"
    with pytest.raises(ConfigError) as excinfo:
        if kind == "sqlite":
            SQLiteErrorStore(path, table=bad)
        else:
            # Validation comes before connecting, so no server is needed to refuse the name.
            PostgresErrorStore("postgresql://nobody@127.0.0.1:1/none", table=bad)
    assert repr(bad) in str(excinfo.value)
    assert not path.exists()


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql://errors-db/boost", "mysql://errors-db/boost"),
        ("http://example.org/store", "http://example.org/store"),
        ("sqlite://host/file.sqlite3", "sqlite://host/file.sqlite3"),
        ("sqlite:///", "sqlite:///"),
    ],
)
def test_unusable_url_is_refused_naming_the_value(url: str, named: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        open_error_store(url)
    assert named in str(excinfo.value)
    assert "postgresql://" in str(excinfo.value)


def test_unknown_scheme_error_masks_the_password() -> None:
    with pytest.raises(ConfigError) as excinfo:
        open_error_store("mysql://boost:s3cret@errors-db/boost")
    assert "mysql://boost:***@errors-db/boost" in str(excinfo.value)
    assert "s3cret" not in str(excinfo.value)


@pytest.mark.parametrize("url", ["", "   "])
def test_empty_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="empty"):
        open_error_store(url)


def test_sqlite_url_forms_open_sqlite_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    table = new_table()
    forms = {
        "sqlite:///rel/dir/a.sqlite3": tmp_path / "rel" / "dir" / "a.sqlite3",
        f"sqlite:///{tmp_path}/abs/b.sqlite3": tmp_path / "abs" / "b.sqlite3",
        str(tmp_path / "plain" / "c.sqlite3"): tmp_path / "plain" / "c.sqlite3",
        "SQLite:///upper/d.sqlite3": tmp_path / "upper" / "d.sqlite3",
    }
    for url, expected in forms.items():
        store = open_error_store(url, table=table)
        try:
            assert isinstance(store, SQLiteErrorStore)
            store.record(make(message_id=url))
            assert [r.message_id for r in store.failures(tenant=TENANT_A)] == [url]
        finally:
            store.close()
        assert expected.is_file(), url


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls_open_postgres_stores(
    scheme: str, postgres_dsn: str, request: pytest.FixtureRequest
) -> None:
    if "://" not in postgres_dsn:
        pytest.skip("BOOST_TEST_POSTGRES_DSN is not in URL form")
    url = scheme + "://" + postgres_dsn.split("://", 1)[1]
    table = new_table()
    store = open_error_store(url, table=table)
    backend = Backend("postgres", postgres_dsn, table=table, opened=[store], tables={table})
    request.addfinalizer(backend.cleanup)

    assert isinstance(store, PostgresErrorStore)
    store.record(make())
    assert store.failures(tenant=TENANT_A) == [make()]


def test_postgres_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigError, match=r"`postgres` extra"):
        PostgresErrorStore("postgresql://nobody@127.0.0.1:1/none")


def test_naive_datetime_is_refused() -> None:
    with pytest.raises(ErrorStoreError, match="naive"):
        make(occurred_at=datetime(2024, 5, 1, 12, 0))


def test_aware_datetime_is_normalised_to_utc() -> None:
    record = make(occurred_at=datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))))
    assert record.occurred_at.tzinfo is UTC
    assert record.occurred_at == T0


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"tenant": None, "outcome": FailureOutcome.RETRY}, "only quarantine"),
        ({"tenant": "tenant-a"}, "TenantId"),
        ({"attempt": 0}, "attempt"),
        ({"outcome": "retry"}, "FailureOutcome"),
        ({"message_id": ""}, "message_id"),
    ],
)
def test_inconsistent_records_are_refused(overrides: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ErrorStoreError, match=complaint):
        make(**overrides)


# -- trace --------------------------------------------------------------------------------------
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/handler.py", line 12, in handle\n'
    "    pages = int(body['pages'])\n"
    "ValueError: invalid literal for int() with base 10: 'x'"
)


def test_trace_round_trips_and_defaults_to_none(store: ErrorStore) -> None:
    with_trace = make(message_id="traced", trace=TRACE)
    without = make(message_id="plain", occurred_at=T0 + timedelta(seconds=1))
    store.record(with_trace)
    store.record(without)

    assert store.failures(tenant=TENANT_A) == [with_trace, without]
    assert store.failures(tenant=TENANT_A)[1].trace is None


def test_long_trace_keeps_its_end_behind_a_marker(store: ErrorStore) -> None:
    long_trace = "".join(f"  frame {n:05d}\n" for n in range(1000)) + "ValueError: the cause"
    exact = "t" * 8000
    store.record(make(message_id="long", trace=long_trace))
    store.record(make(message_id="exact", trace=exact))
    store.record(make(message_id="nul", trace="bad\x00frame"))

    stored = {r.message_id: r.trace for r in store.failures(tenant=TENANT_A)}
    assert len(long_trace) > 8000
    assert stored["long"] == MARKER + long_trace[-(8000 - len(MARKER)) :]
    assert stored["long"].endswith("ValueError: the cause")
    assert stored["exact"] == exact
    assert stored["nul"] == "bad\ufffdframe"


def test_trace_must_be_text() -> None:
    with pytest.raises(ErrorStoreError, match="trace"):
        make(trace=b"Traceback")


# The schema before the trace column, as stores of earlier releases created it.
OLD_SCHEMA = {
    "sqlite": (
        'CREATE TABLE "{table}" (id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT, '
        "raw_tenant TEXT, queue TEXT NOT NULL, message_id TEXT NOT NULL, correlation_id TEXT, "
        "attempt INTEGER NOT NULL, outcome TEXT NOT NULL, error_type TEXT NOT NULL, "
        "error_text TEXT NOT NULL, occurred_at TEXT NOT NULL)"
    ),
    "postgres": (
        'CREATE TABLE "{table}" (id BIGSERIAL PRIMARY KEY, tenant TEXT, '
        "raw_tenant TEXT, queue TEXT NOT NULL, message_id TEXT NOT NULL, correlation_id TEXT, "
        "attempt INTEGER NOT NULL, outcome TEXT NOT NULL, error_type TEXT NOT NULL, "
        "error_text TEXT NOT NULL, occurred_at TIMESTAMPTZ NOT NULL)"
    ),
}


@pytest.mark.parametrize("kind", BACKENDS)
def test_table_of_the_old_schema_gains_the_trace_column_on_open(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = (
        str(tmp_path / "errors.sqlite3")
        if kind == "sqlite"
        else request.getfixturevalue("postgres_dsn")
    )
    backend = Backend(kind, location)
    request.addfinalizer(backend.cleanup)
    backend.tables.add(backend.table)
    backend.run(OLD_SCHEMA[kind].format(table=backend.table))
    stamp = T0.isoformat(timespec="microseconds") if kind == "sqlite" else T0
    backend.run(
        f'INSERT INTO "{backend.table}" (tenant, queue, message_id, attempt, outcome, '
        "error_type, error_text, occurred_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (TENANT_A.value, "cmd.old", "m-old", 1, "retry", "TransientError", "old", stamp),
    )
    assert "trace" not in [name for name, _, _ in backend.columns(backend.table)]

    store = backend.open()
    assert backend.columns(backend.table) == EXPECTED_COLUMNS[kind]
    new = make(message_id="m-new", trace=TRACE, occurred_at=T0 + timedelta(seconds=1))
    store.record(new)
    old, found = store.failures(tenant=TENANT_A)
    assert (old.message_id, old.error_text, old.trace) == ("m-old", "old", None)
    assert found == new

    # A second store on the migrated table (another worker, a restart) opens it as it is.
    assert backend.open().failures(tenant=TENANT_A) == [old, new]


# -- record_failure -------------------------------------------------------------------------------
class ScriptedStore:
    """An error store whose record() does what the test says: fail, hang, or keep the record."""

    def __init__(self, *, failures: int = 0, hang_on: set[str] | None = None) -> None:
        self.failures_left = failures
        self.hang_on = hang_on or set()
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        self.kept: list[FailureRecord] = []
        self._lock = threading.Lock()

    def record(self, record: FailureRecord) -> None:
        with self._lock:
            self.calls += 1
            failing = self.failures_left > 0
            self.failures_left -= 1
        if record.message_id in self.hang_on:
            self.entered.set()
            self.release.wait()
        if failing:
            raise ErrorStoreError("database is unavailable")
        with self._lock:
            self.kept.append(record)

    def failures(self, **_: Any) -> list[FailureRecord]:
        with self._lock:
            return list(self.kept)

    def close(self) -> None:
        pass


@pytest.fixture
def hanging() -> Iterator[ScriptedStore]:
    """A store whose record() of message "stuck" blocks until the test ends."""
    store = ScriptedStore(hang_on={"stuck"})
    yield store
    store.release.set()


def critical_records(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == "error_store_write_failed"]


def test_record_failure_stores_the_record_and_returns_true() -> None:
    store = ScriptedStore()
    with capture_logs() as logs:
        assert record_failure(store, make(trace=TRACE)) is True
    assert store.kept == [make(trace=TRACE)]
    assert critical_records(logs) == []


def test_record_failure_retries_store_errors_within_its_attempts() -> None:
    recovering = ScriptedStore(failures=2)
    assert record_failure(recovering, make(), attempts=3) is True
    assert (recovering.calls, recovering.kept) == (3, [make()])

    down = ScriptedStore(failures=10)
    with capture_logs() as logs:
        assert record_failure(down, make(), attempts=2) is False
    assert down.calls == 2
    [entry] = critical_records(logs)
    assert entry["error"] == "database is unavailable"


def test_record_failure_on_a_hung_store_returns_false_in_time_and_logs_the_whole_record(
    hanging: ScriptedStore,
) -> None:
    record = make(
        message_id="stuck", trace=TRACE, raw_tenant="raw", outcome=FailureOutcome.QUARANTINE
    )
    started = time.monotonic()
    with capture_logs() as logs:
        assert record_failure(hanging, record, timeout_s=1.0) is False
    assert time.monotonic() - started < 15, "bounded by timeout_s, not by the store"
    assert hanging.entered.is_set(), "the write was really attempted and is still hanging"

    [entry] = critical_records(logs)
    assert entry["log_level"] == "critical"
    assert "did not answer within 1 s" in entry["error"]
    assert {key: value for key, value in entry.items() if key.startswith("record_")} == {
        "record_tenant": TENANT_A.value,
        "record_raw_tenant": "raw",
        "record_queue": "cmd.document.process",
        "record_message_id": "stuck",
        "record_correlation_id": "c-1",
        "record_attempt": 1,
        "record_outcome": "quarantine",
        "record_error_type": "TransientError",
        "record_error": "storage unavailable",
        "record_trace": TRACE,
        "record_occurred_at": T0.isoformat(),
    }


def test_callers_are_not_held_behind_a_hung_write(hanging: ScriptedStore) -> None:
    healthy = ScriptedStore()
    first = threading.Thread(
        target=record_failure, args=(hanging, make(message_id="stuck")), kwargs={"timeout_s": 1.0}
    )
    first.start()
    assert hanging.entered.wait(15)

    # While the hung write goes on: the same store's other callers all return within their own
    # bound, and another store is written as if nothing happened.
    results: dict[str, bool] = {}

    def call(name: str) -> None:
        results[name] = record_failure(hanging, make(message_id=name), timeout_s=2.0)

    with capture_logs() as logs:
        callers = [threading.Thread(target=call, args=(f"m-{n}",)) for n in range(4)]
        started = time.monotonic()
        for caller in callers:
            caller.start()
        assert record_failure(healthy, make(message_id="elsewhere"), timeout_s=2.0) is True
        for caller in callers:
            caller.join(15)
        first.join(15)
    assert time.monotonic() - started < 15
    assert not first.is_alive()
    assert not any(caller.is_alive() for caller in callers)
    assert results == {f"m-{n}": False for n in range(4)}
    assert [r.message_id for r in healthy.kept] == ["elsewhere"]
    # The first caller's own record ("stuck") may be logged in this window too.
    logged = {e["record_message_id"] for e in critical_records(logs)} - {"stuck"}
    assert logged == {f"m-{n}" for n in range(4)}

    # Once the hung write has outlasted a caller's bound, a caller does not even queue behind it.
    with capture_logs() as logs:
        assert record_failure(hanging, make(message_id="later"), timeout_s=1.0) is False
    assert "has not answered a write for" in critical_records(logs)[0]["error"]


def test_a_write_still_running_when_the_caller_gives_up_is_late_but_durable(
    hanging: ScriptedStore,
) -> None:
    assert record_failure(hanging, make(message_id="stuck"), timeout_s=0.5) is False
    assert hanging.kept == []
    hanging.release.set()
    assert wait_until(lambda: [r.message_id for r in hanging.kept] == ["stuck"])
    # The writer then serves the store's later failures again.
    assert record_failure(hanging, make(message_id="next"), timeout_s=5.0) is True


def test_record_failure_never_raises_even_when_the_store_has_a_bug() -> None:
    class Broken(ScriptedStore):
        def record(self, record: FailureRecord) -> None:
            self.calls += 1
            raise RuntimeError("bug in the store")

    broken = Broken()
    with capture_logs() as logs:
        assert record_failure(broken, make(), attempts=3) is False
    assert broken.calls == 1, "only ErrorStoreError is worth another try"
    assert critical_records(logs)[0]["error"] == "RuntimeError: bug in the store"


def test_record_failure_through_a_real_store(store: ErrorStore) -> None:
    record = make(trace=TRACE)
    assert record_failure(store, record) is True
    assert store.failures(tenant=TENANT_A) == [record]
    store.close()
    with capture_logs() as logs:
        assert record_failure(store, make(message_id="after-close"), attempts=2) is False
    assert "after close" in critical_records(logs)[0]["error"]


def _open_together(path: Path, barrier: Any) -> None:
    barrier.wait()
    SQLiteErrorStore(path).close()


def test_processes_opening_one_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    """A pipeline's services start together on one SQLite file: SQLite answers 'database is
    locked' at once, without its busy wait, to the ones that find another switching the file to
    WAL or creating the schema; each tries again instead of failing its start (3 of 120
    openings failed so before)."""
    context = multiprocessing.get_context("fork")
    failed = 0
    for round_no in range(10):
        path = tmp_path / f"errors-{round_no}.sqlite3"
        barrier = context.Barrier(8)
        openers = [context.Process(target=_open_together, args=(path, barrier)) for _ in range(8)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
        failed += sum(1 for opener in openers if opener.exitcode != 0)
    assert failed == 0
