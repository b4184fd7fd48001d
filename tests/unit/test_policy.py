"""Run-time tenant policies: validation, the audited SQL store (SQLite and PostgreSQL), the
resolver a running process reads them through, the publishing guard applying them, and the
`boost-tenancy policy` command."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from boost_tenancy import (
    ConfigError,
    MessageTooLargeError,
    PublishGuard,
    PublishLimits,
    PublishRateExceededError,
    TenantId,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.cli import main
from boost_tenancy.messages import WireMessage
from boost_tenancy.quotas.policy import NO_POLICY, PolicyResolver, TenantPolicy
from boost_tenancy.quotas.policy_store import (
    AUDIT_TABLE,
    POLICY_TABLE,
    PolicyStoreError,
    SqlPolicyStore,
    open_policy_store,
)
from tests.conftest import ManualClock, reachable_postgres_dsn, wait_until

A = TenantId("org-A")
B = TenantId("org-B")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlPolicyStore]:
    opened = open_policy_store(f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    yield opened
    opened.close()


# -- TenantPolicy ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [("messages_per_s", -1.0), ("bytes_per_s", float("nan")), ("max_message_bytes", -5)],
)
def test_a_policy_refuses_what_the_limits_refuse(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        TenantPolicy(**{field: value})  # type: ignore[arg-type]


def test_a_policy_overrides_only_the_fields_it_sets() -> None:
    default = PublishLimits(messages_per_s=100, bytes_per_s=1_000, max_message_bytes=500)
    policy = TenantPolicy(messages_per_s=5, max_message_bytes=0)
    assert policy.applied_to(default) == PublishLimits(
        messages_per_s=5, bytes_per_s=1_000, max_message_bytes=0
    )
    assert NO_POLICY.applied_to(default) is default
    with pytest.raises(ConfigError, match="unknown policy field"):
        policy.changed({"ttl": 3})


# -- the store ------------------------------------------------------------------------------------
def test_set_audits_each_changed_field_and_nothing_else(store: SqlPolicyStore) -> None:
    assert store.get(A) == NO_POLICY
    first = store.set(A, {"messages_per_s": 5, "max_message_bytes": 1_000}, actor="alice")
    assert [(c.field, c.old, c.new, c.actor) for c in first] == [
        ("messages_per_s", None, "5", "alice"),
        ("max_message_bytes", None, "1000", "alice"),
    ]
    assert store.get(A) == TenantPolicy(messages_per_s=5.0, max_message_bytes=1_000)
    assert store.set(A, {"messages_per_s": 5.0}, actor="bob") == []  # no change, no audit
    second = store.set(A, {"messages_per_s": None, "burst_s": 2}, actor="bob")
    assert [(c.field, c.old, c.new) for c in second] == [
        ("messages_per_s", "5", None),
        ("burst_s", None, "2"),
    ]
    assert store.get(A) == TenantPolicy(burst_s=2.0, max_message_bytes=1_000)
    assert store.get(B) == NO_POLICY
    history = store.history(A)
    assert [c.actor for c in history] == ["bob", "bob", "alice", "alice"]  # newest first
    assert len(store.history(A, limit=1)) == 1
    assert store.history(B) == []


def test_a_refused_change_writes_nothing(store: SqlPolicyStore) -> None:
    store.set(A, {"messages_per_s": 5}, actor="alice")
    with pytest.raises(ConfigError, match="messages_per_s"):
        store.set(A, {"messages_per_s": -1}, actor="alice")
    with pytest.raises(ConfigError, match="actor"):
        store.set(A, {"messages_per_s": 7}, actor=" ")
    with pytest.raises(ConfigError, match="actor"):
        store.set(A, {"messages_per_s": 7}, actor="a\nb")
    assert store.get(A) == TenantPolicy(messages_per_s=5.0)
    assert len(store.history(A)) == 1


def test_an_invalid_stored_row_is_named(tmp_path: Path) -> None:
    path = tmp_path / "policy.sqlite3"
    store = open_policy_store(str(path))
    try:
        store.set(A, {"messages_per_s": 5}, actor="alice")
        with sqlite3.connect(path) as db:
            db.execute(f"UPDATE {POLICY_TABLE} SET messages_per_s = -3")
        with pytest.raises(PolicyStoreError, match=r"invalid policy for 'org-A'"):
            store.get(A)
    finally:
        store.close()


@pytest.mark.postgres
def test_the_store_on_postgresql() -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn = reachable_postgres_dsn()
    tenant = TenantId(f"org-{uuid.uuid4().hex[:12]}")
    store = open_policy_store(dsn)
    try:
        store.set(
            tenant, {"bytes_per_s": 2_048, "max_message_bytes": 64, "ttl_s": 30}, actor="alice"
        )
        store.set(tenant, {"bytes_per_s": None}, actor="bob")
        assert store.get(tenant) == TenantPolicy(max_message_bytes=64, ttl_s=30.0)
        newest, *older = store.history(tenant)
        assert (newest.actor, newest.field) == ("bob", "bytes_per_s")
        # One change's fields share its time: their order among themselves is not defined.
        assert sorted((c.actor, c.field) for c in older) == [
            ("alice", "bytes_per_s"),
            ("alice", "max_message_bytes"),
            ("alice", "ttl_s"),
        ]
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            for table in (POLICY_TABLE, AUDIT_TABLE):
                admin.execute(f"DELETE FROM {table} WHERE tenant = %s", (tenant.value,))


# -- the resolver ---------------------------------------------------------------------------------
class FlakyStore:
    """A PolicyStore whose get can fail or wait."""

    def __init__(self, inner: SqlPolicyStore) -> None:
        self.inner = inner
        self.fail: Exception | None = None
        self.gets = 0

    def get(self, tenant: TenantId) -> TenantPolicy:
        self.gets += 1
        if self.fail is not None:
            raise self.fail
        return self.inner.get(tenant)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_resolver_picks_a_change_up_within_its_ttl_and_keeps_unchanged_objects(
    store: SqlPolicyStore,
) -> None:
    clock = ManualClock()
    resolver = PolicyResolver(store, ttl_s=60, clock=clock)
    try:
        assert resolver.policy_of(A) is NO_POLICY  # not read yet: no override, at once
        assert wait_until(lambda: resolver.pending() == 0)
        first = resolver.policy_of(A)
        assert first == NO_POLICY
        store.set(A, {"max_message_bytes": 10}, actor="alice")
        clock.advance(30)
        assert resolver.policy_of(A) is first  # within the TTL: the cached one
        clock.advance(31)
        resolver.policy_of(A)  # expired: refreshed in the background
        assert wait_until(lambda: resolver.policy_of(A) == TenantPolicy(max_message_bytes=10))
        changed = resolver.policy_of(A)
        clock.advance(61)
        resolver.policy_of(A)
        assert wait_until(lambda: resolver.pending() == 0)
        assert resolver.policy_of(A) is changed  # unchanged in the store: the same object
    finally:
        resolver.close()


def test_a_store_outage_keeps_the_last_policy_and_warns(store: SqlPolicyStore) -> None:
    store.set(A, {"messages_per_s": 3}, actor="alice")
    flaky = FlakyStore(store)
    clock = ManualClock()
    resolver = PolicyResolver(flaky, ttl_s=60, clock=clock)  # type: ignore[arg-type]
    try:
        resolver.policy_of(A)
        assert wait_until(lambda: resolver.policy_of(A) == TenantPolicy(messages_per_s=3.0))
        flaky.fail = PolicyStoreError("database is down")
        clock.advance(61)
        with capture_logs() as logs:
            assert resolver.policy_of(A) == TenantPolicy(messages_per_s=3.0)
            assert wait_until(lambda: resolver.pending() == 0 and flaky.gets == 2)
        assert resolver.policy_of(A) == TenantPolicy(messages_per_s=3.0)
        (warning,) = [e for e in logs if e["event"] == "policy_lookup_failed"]
        assert warning["log_level"] == "warning"
        assert warning["kept"] == {"messages_per_s": 3.0}
    finally:
        resolver.close()


# -- the guard ------------------------------------------------------------------------------------
def test_the_guard_applies_a_tenants_policy_and_restarts_only_its_buckets() -> None:
    policies = {A: NO_POLICY, B: NO_POLICY}
    lock = threading.Lock()

    def policy_of(tenant: TenantId) -> TenantPolicy:
        with lock:
            return policies[tenant]

    clock = ManualClock()
    guard = PublishGuard(
        PublishLimits(messages_per_s=1, burst_s=2), clock=clock, policy_of=policy_of
    )
    message = WireMessage(body="0123456789", properties={})
    for tenant in (A, B):
        guard.check(tenant, "q", [message, message])  # each tenant's bucket of 2 emptied
    with lock:
        policies[A] = TenantPolicy(max_message_bytes=5)
    with pytest.raises(MessageTooLargeError, match="over the limit of 5 bytes"):
        guard.check(A, "q", [message])
    assert guard.limits_for(A) == PublishLimits(messages_per_s=1, burst_s=2, max_message_bytes=5)
    with lock:
        policies[A] = TenantPolicy(messages_per_s=100)
    guard.check(A, "q", [message] * 50)  # A's new policy: a fresh, larger bucket
    with pytest.raises(PublishRateExceededError):
        guard.check(B, "q", [message])  # B's bucket was not restarted by A's change


def test_setting_one_tenants_limits_leaves_another_tenants_balance() -> None:
    clock = ManualClock()
    guard = PublishGuard(PublishLimits(messages_per_s=1, burst_s=1), clock=clock)
    message = WireMessage(body="x", properties={})
    guard.check(B, "q", [message])
    guard.set_limits(PublishLimits(messages_per_s=50), tenant=A)
    with pytest.raises(PublishRateExceededError):
        guard.check(B, "q", [message])


def test_the_wiring_reads_policies_from_the_store_the_settings_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    writer = open_policy_store(url)
    writer.set(A, {"max_message_bytes": 4}, actor="alice")
    writer.close()
    settings = AppSettings.from_env({"BOOST_POLICY_STORE": url})
    assert settings.policy_store_url == url
    wiring = FairnessWiring.build(None, workers=2, policy_store_url=settings.policy_store_url)
    try:
        guard = wiring.publish_guard(settings.publish)
        assert wiring.policies is not None
        wiring.policies.policy_of(A)
        assert wait_until(lambda: wiring.policies is not None and wiring.policies.pending() == 0)
        with pytest.raises(MessageTooLargeError):
            guard.check(A, "q", [WireMessage(body="12345", properties={})])
        guard.check(B, "q", [WireMessage(body="12345", properties={})])
    finally:
        wiring.close()


def test_the_tier_store_doubles_as_the_policy_store() -> None:
    settings = AppSettings.from_env({"BOOST_TIER_STORE": "sqlite:///t.sqlite3"})
    assert settings.policy_store_url == "sqlite:///t.sqlite3"
    assert AppSettings.from_env({}).policy_store_url == ""


# -- the command ----------------------------------------------------------------------------------
@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    saved: dict[str, Any] = structlog.get_config()
    monkeypatch.setenv("BOOST_POLICY_STORE", f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    monkeypatch.setenv("BOOST_TIER_STORE", f"sqlite:///{tmp_path / 'tiers.sqlite3'}")
    monkeypatch.setenv("BOOST_ACTOR", "ops-bot")
    yield tmp_path
    structlog.configure(**saved)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["policy", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else None, captured.err


def test_policy_set_and_show(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "set", "--tenant", "org-A", "--messages-per-s", "5", "--tier", "pro")
    assert code == 0
    assert [(c["field"], c["new"], c["actor"]) for c in out["changed"]] == [
        ("messages_per_s", "5", "ops-bot"),
        ("tier", "pro", "ops-bot"),
    ]
    code, out, _ = run(capsys, "set", "--tenant", "org-A", "--clear", "messages_per_s")
    assert code == 0
    code, shown, _ = run(capsys, "show", "--tenant", "org-A")
    assert code == 0
    assert shown["tier"] == "pro"
    assert shown["policy"] == {}
    assert shown["effective"]["messages_per_s"] == 0.0
    assert [c["field"] for c in shown["history"]] == ["messages_per_s", "tier", "messages_per_s"]


def test_policy_set_refuses_bad_values_and_empty_changes_writing_nothing(
    cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "set", "--tenant", "org-A", "--max-message-bytes", "-1", "--tier", "pro"
    )
    assert code == 2
    assert "--max-message-bytes must be a finite number >= 0" in err, "named by its flag"
    code, _, err = run(capsys, "set", "--tenant", "org-A")
    assert code == 2
    assert "nothing to change" in err
    code, shown, _ = run(capsys, "show", "--tenant", "org-A")
    assert shown["history"] == []
    assert shown["tier"] == "free"


def test_policy_needs_a_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    saved: dict[str, Any] = structlog.get_config()
    try:
        monkeypatch.delenv("BOOST_POLICY_STORE", raising=False)
        monkeypatch.delenv("BOOST_TIER_STORE", raising=False)
        assert main(["policy", "show", "--tenant", "org-A"]) == 2
        assert "no policy store" in capsys.readouterr().err
    finally:
        structlog.configure(**saved)


def test_policy_show_from_a_file_that_does_not_exist_names_it_and_makes_nothing(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped path showed a tenant with no policy, and made the file and its folders."""
    missing = cli_env / "typo" / "policy.sqlite3"
    monkeypatch.setenv("BOOST_POLICY_STORE", f"sqlite:///{missing}")
    code, shown, err = run(capsys, "show", "--tenant", "org-A")
    assert (code, shown) == (2, None)
    assert f"BOOST_POLICY_STORE names the SQLite file '{missing}', which does not exist" in err
    assert not missing.parent.exists()
