"""What users test their processors with: RunningProcessor on the in-memory broker (waits for
final outcomes, reads outputs, dead letters and quarantine) and the pytest plugin's fixtures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor, TenantProducer
from boost_tenancy.messages import build_message
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.harness import RunningProcessor


class Echo(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("in",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if message.data.get("fail"):
            raise RuntimeError("asked to fail")
        ctx.publish("out", {"echo": message.data["n"]})


def test_wait_handled_returns_final_outcomes_only_and_outputs_are_readable(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    producer = TenantProducer(transport)
    with RunningProcessor(Echo(), ["org-a"], broker=broker, error_store=store) as run:
        producer.send("in", "org-a", {"n": 1})
        producer.send("in", "org-a", {"n": 2, "fail": True})
        handled = run.wait_handled(2)
        assert sorted(s.outcome for s in handled) == ["dead_lettered", "processed"]
        # The failing one was retried twice first (TEST_SETTINGS: 3 attempts).
        assert sorted(s.outcome for s in run.settled) == [
            "dead_lettered",
            "processed",
            "retried",
            "retried",
        ]
        assert [m.properties["tenantUUID"] for m in run.messages("out", "org-a")] == ["org-a"]
        assert len(run.dead_letters("in", "org-a")) == 1


def test_a_message_of_another_tenant_is_quarantined_and_readable(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    with RunningProcessor(Echo(), ["org-a"], broker=broker, error_store=store) as run:
        transport.send("tenant.org-a.in", build_message("org-b", {"n": 1}).to_wire())
        (handled,) = run.wait_handled(1)
        assert (handled.tenant, handled.outcome) == ("org-b", "quarantined")
        assert len(run.quarantined("in", "org-a")) == 1


def test_wait_handled_times_out_naming_the_outcomes_so_far(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    with (
        RunningProcessor(Echo(), ["org-a"], broker=broker, error_store=store) as run,
        pytest.raises(TimeoutError, match=r"0 of 1 messages handled within 0.2 s; outcomes so far"),
    ):
        run.wait_handled(1, timeout_s=0.2)


def test_stopping_twice_is_harmless(broker: InMemoryBroker, store: ErrorStore) -> None:
    run = RunningProcessor(Echo(), ["org-a"], broker=broker, error_store=store).start()
    assert run.stop() is True
    assert run.stop() is True


PLUGIN_USER_TEST = """
from boost_tenancy import TenantProcessor


class Upper(TenantProcessor):
    queues = ("words",)

    def handle(self, message, ctx):
        ctx.publish("upper", message.data["word"].upper())


def test_fixtures(boost_run, boost_producer, boost_broker, boost_transport, boost_error_store):
    run = boost_run(Upper(), ["org-a"])
    boost_producer.send("words", "org-a", {"word": "hi"})
    assert [s.outcome for s in run.wait_handled(1)] == ["processed"]
    assert [m.body for m in run.messages("upper", "org-a")] == ["HI"]
    assert boost_error_store.failures(tenant=None) == []


def test_each_test_gets_an_empty_broker(boost_broker):
    assert boost_broker.messages("tenant.org-a.upper") == []
"""


def test_the_pytest_plugin_gives_its_fixtures_to_a_users_tests(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["boost_tenancy.testing.pytest_plugin"]\n'
    )
    (tmp_path / "test_user.py").write_text(textwrap.dedent(PLUGIN_USER_TEST))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
