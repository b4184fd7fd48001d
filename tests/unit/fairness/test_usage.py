"""Usage that survives restarts: the usage store (SQLite and PostgreSQL), the recorder's deltas
through store outages, the settings, and `boost-tenancy usage`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from boost_tenancy import ConfigError, TenantId
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.cli import main
from boost_tenancy.fairness.accounting import Accounting
from boost_tenancy.fairness.usage import (
    ROWS_PER_STATEMENT,
    USAGE_TABLE,
    UsageRecorder,
    UsageStore,
    UsageStoreError,
    open_usage_store,
)
from tests.conftest import reachable_postgres_dsn

A = TenantId("org-A")
B = TenantId("org-B")
DAY1, DAY2 = date(2026, 11, 23), date(2026, 11, 24)


class Days:
    """A settable 'today' for the recorder."""

    def __init__(self) -> None:
        self.day = DAY1

    def __call__(self) -> date:
        return self.day


class FailingStore:
    """A UsageStore whose add fails on request, or after a number of statements."""

    def __init__(self, inner: UsageStore) -> None:
        self.inner = inner
        self.fail = False
        self.adds = 0

    def add(self, deltas: Any) -> None:
        if self.fail:
            raise UsageStoreError("usage store: add failed: database is down")
        self.adds += 1
        self.inner.add(deltas)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'usage.sqlite3'}"


def read(url: str, tenant: str | TenantId) -> dict[str, dict[str, int]]:
    store = open_usage_store(url)
    try:
        return store.days(tenant)
    finally:
        store.close()


def processed(accounting: Accounting, tenant: TenantId | None, n: int) -> None:
    for _ in range(n):
        accounting.on_outcome(tenant, "q", "processed")


def test_the_recorder_writes_deltas_per_day_and_processes_add_up(url: str) -> None:
    days = Days()
    first = Accounting()
    recorder = UsageRecorder(first, open_usage_store(url), today=days)
    processed(first, A, 3)
    first.on_outcome(A, "q", "dead_lettered")
    processed(first, None, 1)
    assert recorder.flush()
    processed(first, A, 2)
    days.day = DAY2
    assert recorder.flush()
    assert recorder.flush()  # nothing new: nothing added
    recorder.close()
    # A restart: a new process starts from zero and adds to the same rows.
    second = Accounting()
    restarted = UsageRecorder(second, open_usage_store(url), today=days)
    processed(second, A, 4)
    restarted.close()  # close writes what is left
    usage = read(url, A)
    assert usage[DAY1.isoformat()]["processed"] == 3
    assert usage[DAY1.isoformat()]["dead_lettered"] == 1
    assert usage[DAY2.isoformat()]["processed"] == 6
    assert "failed" not in usage[DAY1.isoformat()]  # derived: not stored
    assert read(url, "_unknown")[DAY1.isoformat()]["processed"] == 1
    assert read(url, B) == {}


def test_an_outage_loses_nothing_and_counts_nothing_twice(url: str) -> None:
    accounting = Accounting()
    store = FailingStore(open_usage_store(url))
    recorder = UsageRecorder(accounting, store, today=Days())  # type: ignore[arg-type]
    processed(accounting, A, 2)
    assert recorder.flush()
    store.fail = True
    processed(accounting, A, 5)
    with capture_logs() as logs:
        assert not recorder.flush()
    assert [e["event"] for e in logs] == ["usage_write_failed"]
    processed(accounting, A, 1)
    store.fail = False
    assert recorder.flush()
    assert read(url, A)[DAY1.isoformat()]["processed"] == 8
    recorder.close()
    assert read(url, A)[DAY1.isoformat()]["processed"] == 8


def test_a_failure_between_statements_adds_no_row_twice(url: str) -> None:
    accounting = Accounting()
    tenants = [TenantId(f"org-{n:04d}") for n in range(ROWS_PER_STATEMENT + 50)]
    for tenant in tenants:
        processed(accounting, tenant, 1)
    store = FailingStore(open_usage_store(url))
    recorder = UsageRecorder(accounting, store, today=Days())  # type: ignore[arg-type]
    original = store.add
    failed_once: list[bool] = []

    def fail_second(deltas: Any) -> None:
        if store.adds == 1 and not failed_once:
            failed_once.append(True)
            raise UsageStoreError("usage store: add failed: connection lost")
        original(deltas)

    store.add = fail_second  # type: ignore[method-assign]
    with capture_logs():
        assert not recorder.flush()  # the first statement went in, the second did not
    assert store.adds == 1
    assert recorder.flush()
    recorder.close()
    assert all(read(url, t)[DAY1.isoformat()]["processed"] == 1 for t in tenants)


def test_closing_during_an_outage_logs_what_is_lost(url: str) -> None:
    accounting = Accounting()
    store = FailingStore(open_usage_store(url))
    recorder = UsageRecorder(accounting, store, today=Days())  # type: ignore[arg-type]
    processed(accounting, A, 2)
    store.fail = True
    with capture_logs() as logs:
        recorder.close()
    (lost,) = [e for e in logs if e["event"] == "usage_lost_at_close"]
    assert lost["unwritten"] == {"org-A/processed": 2}


@pytest.mark.postgres
def test_the_store_on_postgresql() -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn = reachable_postgres_dsn()
    tenant = TenantId(f"org-{uuid.uuid4().hex[:12]}")
    accounting = Accounting()
    recorder = UsageRecorder(accounting, open_usage_store(dsn), today=Days())
    try:
        processed(accounting, tenant, 3)
        assert recorder.flush()
        processed(accounting, tenant, 2)
    finally:
        recorder.close()
    try:
        assert read(dsn, tenant) == {DAY1.isoformat(): {"processed": 5}}
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DELETE FROM {USAGE_TABLE} WHERE tenant = %s", (tenant.value,))


def test_settings_and_wiring(url: str) -> None:
    settings = AppSettings.from_env({"BOOST_USAGE_STORE": url, "BOOST_USAGE_FLUSH_S": "5"})
    assert (settings.usage_store_url, settings.usage_flush_s) == (url, 5.0)
    with pytest.raises(ConfigError, match="BOOST_USAGE_FLUSH_S set without BOOST_USAGE_STORE"):
        AppSettings.from_env({"BOOST_USAGE_FLUSH_S": "5"})
    with pytest.raises(ConfigError, match="BOOST_USAGE_FLUSH_S"):
        AppSettings.from_env({"BOOST_USAGE_STORE": url, "BOOST_USAGE_FLUSH_S": "0"})
    wiring = FairnessWiring.build(
        None, workers=1, usage_store_url=settings.usage_store_url, usage_flush_s=5
    )
    assert wiring.usage is not None
    wiring.start()
    processed(wiring.accounting, A, 7)
    wiring.close()  # the last counts are written at close
    # Booked on the UTC day of the write.
    assert sum(counts["processed"] for counts in read(url, A).values()) == 7


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, url: str) -> Iterator[str]:
    saved: dict[str, Any] = structlog.get_config()
    monkeypatch.setenv("BOOST_USAGE_STORE", url)
    yield url
    structlog.configure(**saved)


def test_the_usage_command(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    days = Days()
    accounting = Accounting()
    recorder = UsageRecorder(accounting, open_usage_store(cli_env), today=days)
    processed(accounting, A, 2)
    recorder.flush()
    days.day = DAY2
    processed(accounting, A, 3)
    accounting.on_outcome(A, "q", "quarantined")
    recorder.close()
    assert main(["usage", "--tenant", "org-A"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["totals"] == {"processed": 5, "quarantined": 1}
    assert shown["days"][DAY1.isoformat()] == {"processed": 2}
    assert main(["usage", "--tenant", "org-A", "--since", DAY2.isoformat()]) == 0
    assert json.loads(capsys.readouterr().out)["totals"] == {"processed": 3, "quarantined": 1}
    assert main(["usage", "--tenant", "org-A", "--since", "yesterday"]) == 2
    assert "--since/--until" in capsys.readouterr().err


def test_the_usage_command_names_a_store_file_that_does_not_exist_and_makes_none(
    cli_env: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Read from a mistyped path, the usage was empty, said nothing, and the file was made."""
    missing = tmp_path / "typo" / "usage.sqlite3"
    monkeypatch.setenv("BOOST_USAGE_STORE", f"sqlite:///{missing}")
    assert main(["usage", "--tenant", "org-A"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"tenant": "org-A", "days": {}, "totals": {}}
    assert f"BOOST_USAGE_STORE names the SQLite file '{missing}', which does not exist" in (
        captured.err
    )
    assert not missing.parent.exists()
