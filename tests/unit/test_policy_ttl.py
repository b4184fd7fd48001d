"""A tenant's message time-to-live set at run time in its policy (`policy set --ttl-s`): checked
like BOOST_MESSAGE_TTL_S, stored and audited (SQLite, an older table gaining the column), winning
over the deployment's default where set, and stamped by the producer and the runner's wiring."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import boost_tenancy.application.run as app_module
from boost_tenancy import (
    ConfigError,
    HandlerContext,
    IncomingMessage,
    MessageTtl,
    Routing,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli import main
from boost_tenancy.expiry import now_ms
from boost_tenancy.quotas.policy import NO_POLICY, TenantPolicy
from boost_tenancy.quotas.policy_store import POLICY_TABLE, SqlPolicyStore, open_policy_store
from boost_tenancy.quotas.ttl import MAX_TTL_S, PolicyTtl, effective_ttl
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until

A, B, C = TenantId("org-A"), TenantId("org-B"), TenantId("org-C")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlPolicyStore]:
    opened = open_policy_store(f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    yield opened
    opened.close()


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf"), MAX_TTL_S + 1])
def test_a_policy_refuses_a_ttl_the_variable_would_refuse(seconds: float) -> None:
    with pytest.raises(ConfigError, match="ttl_s"):
        TenantPolicy(ttl_s=seconds)


def test_the_policy_ttl_wins_where_set_and_leaves_the_default_elsewhere() -> None:
    policies = {A: TenantPolicy(ttl_s=30), B: TenantPolicy(ttl_s=0)}
    default = MessageTtl(default_s=60).for_tenant(C, 5)
    ttl = PolicyTtl(default, lambda tenant: policies.get(tenant, NO_POLICY))
    assert ttl.ttl_ms_of(A) == 30_000
    assert ttl.ttl_ms_of(B) is None, "0 in a policy: never expires, whatever the default"
    assert ttl.ttl_ms_of(C) == 5_000, "no policy: the per-tenant override in code"
    assert ttl.ttl_ms_of("org-D") == 60_000
    assert ttl.expiry_of(A, now=1_000) == 31_000
    assert ttl.expiry_of(B, now=1_000) is None
    # A policy may give a TTL although no default applies; without a policy store nothing does.
    assert isinstance(effective_ttl(MessageTtl(), policies.__getitem__), PolicyTtl)
    assert effective_ttl(MessageTtl(), None) is None
    assert effective_ttl(MessageTtl(default_s=9), None) == MessageTtl(default_s=9)


def test_the_store_keeps_and_audits_a_ttl(store: SqlPolicyStore) -> None:
    changes = store.set(A, {"ttl_s": 90}, actor="alice")
    assert [(c.field, c.old, c.new) for c in changes] == [("ttl_s", None, "90")]
    assert store.get(A) == TenantPolicy(ttl_s=90.0)
    store.set(A, {"ttl_s": None}, actor="bob")
    assert store.get(A) == NO_POLICY
    assert [c.field for c in store.history(A)] == ["ttl_s", "ttl_s"]


def test_a_table_from_before_the_ttl_gains_its_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as old:
        old.execute(
            f"CREATE TABLE {POLICY_TABLE} (tenant TEXT PRIMARY KEY, messages_per_s DOUBLE "
            "PRECISION, bytes_per_s DOUBLE PRECISION, burst_s DOUBLE PRECISION, "
            "max_message_bytes BIGINT, updated_at TEXT NOT NULL, updated_by TEXT NOT NULL)"
        )
        old.execute(
            f"INSERT INTO {POLICY_TABLE} VALUES ('org-A', 5, NULL, NULL, NULL, 'then', 'alice')"
        )
    opened = open_policy_store(str(path))
    try:
        assert opened.get(A) == TenantPolicy(messages_per_s=5.0)
        opened.set(A, {"ttl_s": 12, "max_queued_messages": 100}, actor="bob")
        assert opened.get(A) == TenantPolicy(
            messages_per_s=5.0, ttl_s=12.0, max_queued_messages=100
        )
    finally:
        opened.close()
    again = open_policy_store(str(path))  # the columns are there now: opening adds nothing
    again.close()


def test_a_producer_stamps_the_policy_ttl(store: SqlPolicyStore) -> None:
    store.set(A, {"ttl_s": 30}, actor="alice")
    broker = InMemoryBroker()
    transport = InMemoryTransport(broker)
    transport.connect()
    try:
        queue = unique_queue("cmd")
        ttl = effective_ttl(MessageTtl(default_s=600), store.get)
        producer = TenantProducer(transport, routing=Routing(Topology.SHARED), ttl=ttl)
        before = now_ms()
        producer.send(queue, A, {"n": 1})
        producer.send(queue, B, {"n": 2})
        after = now_ms()
        stored = {m.properties["tenantUUID"]: m.expires_at_ms for m in broker.messages(queue)}
        assert before + 30_000 <= (stored["org-A"] or 0) <= after + 30_000
        assert before + 600_000 <= (stored["org-B"] or 0) <= after + 600_000
    finally:
        transport.close()
        broker.close()


class Quiet(TenantProcessor):
    queues = ("cmd",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        return None


def test_run_processor_stamps_under_the_policies_of_the_store_the_settings_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: ErrorStore
) -> None:
    url = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    writer = open_policy_store(url)
    writer.set(A, {"ttl_s": 7}, actor="alice")
    writer.close()
    seen: dict[str, Any] = {}

    class FakeRunner:
        health = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.update(kwargs)

        def run(self) -> int:
            # While the runner runs: the resolver reads the store in the background.
            ttl = seen["message_ttl"]
            seen["read"] = wait_until(lambda: ttl.ttl_ms_of(A) == 7_000)
            seen["other"] = ttl.ttl_ms_of(B)
            return 0

    monkeypatch.setattr(app_module, "ProcessorRunner", FakeRunner)
    settings = AppSettings.from_env({"BOOST_POLICY_STORE": url, "BOOST_FAIRNESS": "off"})
    assert app_module.run_processor(Quiet(), [A], settings, store=store) == 0
    assert isinstance(seen["message_ttl"], PolicyTtl)
    assert seen["read"], "the tenant's policy TTL reached the runner's expiry policy"
    assert seen["other"] is None, "no default and no policy: no expiry"


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    saved: dict[str, Any] = structlog.get_config()
    monkeypatch.setenv("BOOST_POLICY_STORE", f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    monkeypatch.setenv("BOOST_MESSAGE_TTL_S", "600")
    monkeypatch.setenv("BOOST_ACTOR", "ops-bot")
    yield tmp_path
    structlog.configure(**saved)


def policy(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["policy", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else None, captured.err


@pytest.mark.usefixtures("cli_env")
def test_policy_set_ttl_shows_it_effective_and_clears_back_to_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = policy(capsys, "set", "--tenant", "org-A", "--ttl-s", "45")
    assert code == 0
    assert [(c["field"], c["new"]) for c in out["changed"]] == [("ttl_s", "45")]
    _, shown, _ = policy(capsys, "show", "--tenant", "org-A")
    assert (shown["policy"], shown["effective"]["ttl_s"]) == ({"ttl_s": 45.0}, 45.0)
    _, shown, _ = policy(capsys, "show", "--tenant", "org-B")
    assert shown["effective"]["ttl_s"] == 600.0
    policy(capsys, "set", "--tenant", "org-A", "--clear", "ttl_s")
    _, shown, _ = policy(capsys, "show", "--tenant", "org-A")
    assert (shown["policy"], shown["effective"]["ttl_s"]) == ({}, 600.0)
    code, _, err = policy(capsys, "set", "--tenant", "org-A", "--ttl-s", "-3")
    assert code == 2
    assert "--ttl-s must be between 0" in err
