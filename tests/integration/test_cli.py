"""The boost-tenancy command against the real broker: publish, run to the dead-letter queue, list
and re-drive dead letters, list recorded failures; every tenant validated, each kept apart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from boost_tenancy.messages import build_message
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.transports.base import Delivery
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.broker_target import stomp_env
from tests.conftest import wait_until
from tests.integration.cli_processors import ALWAYS_FAILS_QUEUE

pytestmark = pytest.mark.broker

CLI = Path(sys.executable).parent / "boost-tenancy"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cli:
    env: dict[str, str]
    error_store: Path

    def __call__(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLI), *args],
            env=self.env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str) -> list[dict[str, Any]]:
        """Run a command that must succeed; its stdout as JSON lines."""
        done = self(*args)
        assert done.returncode == 0, f"{args} failed ({done.returncode}): {done.stderr}"
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture
def cli(stomp_settings: StompSettings, tmp_path: Path) -> Cli:
    assert CLI.is_file(), f"the boost-tenancy script is missing next to {sys.executable}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("BOOST_")}
    store = tmp_path / "e.sqlite3"
    env.update(
        {
            **stomp_env(stomp_settings),
            "BOOST_ERROR_STORE": f"sqlite:///{store}",
            "PYTHONPATH": os.pathsep.join(
                [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
    )
    return Cli(env, store)


def new_tenant(label: str) -> str:
    """A tenant no other run uses, so the shared broker's queues cannot leak into the test."""
    return f"cli-{label}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def consumer(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    transport = StompTransport(stomp_settings)
    transport.connect()
    yield transport
    transport.close()


def take(transport: StompTransport, queue: str, tenant: str, count: int) -> list[Delivery]:
    """Consume (and acknowledge) count messages of tenant from queue; fails if fewer arrive."""
    got: list[Delivery] = []
    lock = threading.Lock()

    def on_delivery(delivery: Delivery) -> None:
        with lock:
            got.append(delivery)

    subscription = transport.subscribe(
        queue, selector=tenant_selector(tenant), prefetch=count + 5, on_delivery=on_delivery
    )
    try:
        assert wait_until(lambda: len(got) >= count, timeout=15), f"{len(got)} of {count} arrived"
        with lock:
            taken = list(got)
        for delivery in taken:
            transport.ack(delivery)
        return taken
    finally:
        transport.unsubscribe(subscription)


def test_publish_prints_one_message_id_per_message_sent(cli: Cli, consumer: StompTransport) -> None:
    tenant = new_tenant("pub")
    queue = f"test.cli.publish.{uuid.uuid4().hex[:10]}"
    lines = cli.ok(
        "publish", "--queue", queue, "--tenant", tenant, "--json", '{"n": 1}', "--count", "2"
    )
    assert [(line["queue"], line["tenant"]) for line in lines] == [(queue, tenant)] * 2
    # The default routing stores the tenant's messages in its own queue.
    assert {line["broker_queue"] for line in lines} == {f"tenant.{tenant}.{queue}"}
    ids = [line["message_id"] for line in lines]
    assert len(set(ids)) == 2
    received = take(consumer, f"tenant.{tenant}.{queue}", tenant, 2)
    assert sorted(d.properties["boostMessageId"] for d in received) == sorted(ids)
    for delivery in received:
        assert delivery.properties["tenantUUID"] == tenant
        assert json.loads(str(delivery.body)) == {"n": 1, "tenantUUID": tenant}


@pytest.mark.parametrize("bad", ["org'A", "x' OR '1'='1", "org A", "-org"])
def test_publish_refuses_an_invalid_tenant_with_exit_code_2_naming_it(cli: Cli, bad: str) -> None:
    done = cli("publish", "--queue", "test.cli.refused", f"--tenant={bad}", "--text", "x")
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"boost-tenancy: error: invalid tenant id {bad!r}" in done.stderr


def test_publish_refuses_a_json_body_naming_another_tenant(cli: Cli) -> None:
    tenant = new_tenant("pub")
    done = cli(
        "publish", "--queue", "test.cli.refused", "--tenant", tenant,
        "--json", '{"organizationId": "org-other"}',
    )  # fmt: skip
    assert done.returncode == 2
    assert "org-other" in done.stderr
    assert done.stdout == ""


def test_failing_processor_dead_letters_then_dlq_list_redrive_and_errors_show_it(
    cli: Cli, consumer: StompTransport, tmp_path: Path
) -> None:
    tenant, other = new_tenant("run"), new_tenant("other")
    queue = ALWAYS_FAILS_QUEUE
    (published,) = cli.ok("publish", "--queue", queue, "--tenant", tenant, "--json", '{"n": 5}')
    message_id = published["message_id"]

    run_log = tmp_path / "run.log"
    with run_log.open("w") as log_file:
        runner = subprocess.Popen(
            [
                str(CLI),
                "run",
                "tests.integration.cli_processors:AlwaysFails",
                "--tenant",
                tenant,
            ],
            env={**cli.env, "BOOST_MAX_ATTEMPTS": "2", "BOOST_RETRY_BASE_MS": "50"},
            cwd=PROJECT_ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:

            def dead_lettered() -> bool:
                assert runner.poll() is None, run_log.read_text()
                done = cli("errors", "--tenant", tenant, "--outcome", "dead_letter")
                return done.returncode == 0 and message_id in done.stdout

            assert wait_until(dead_lettered, timeout=30, interval=0.5), run_log.read_text()
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(timeout=40) == 0, run_log.read_text()
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
    assert "always_fails_handling" in run_log.read_text()

    (listed,) = cli.ok("dlq", "list", "--tenant", tenant, "--queue", queue)
    assert listed["message_id"] == message_id
    assert listed["tenant"] == tenant
    # The queue is routed (the default): the message was the tenant's own queue's.
    assert listed["original_queue"] == f"tenant.{tenant}.{queue}"
    assert listed["reason"] == "exhausted"
    assert listed["attempts"] == 2
    assert listed["error_type"] == "RuntimeError"
    assert listed["error"] == "RuntimeError: always fails (attempt 2)"
    assert [(f["attempt"], f["outcome"], f["error"]) for f in listed["recorded_failures"]] == [
        (1, "retry", "RuntimeError: always fails (attempt 1)"),
        (2, "dead_letter", "RuntimeError: always fails (attempt 2)"),
    ]

    assert cli.ok("dlq", "list", "--tenant", other, "--queue", queue) == []
    assert cli.ok("dlq", "redrive", "--tenant", other, "--queue", queue) == [
        {"redriven": [], "count": 0, "remaining": 0}
    ]

    assert cli.ok("dlq", "redrive", "--tenant", tenant, "--queue", queue) == [
        {"redriven": [message_id], "count": 1, "remaining": 0}
    ]
    (back,) = take(consumer, f"tenant.{tenant}.{queue}", tenant, 1)
    assert back.properties["boostMessageId"] == message_id
    assert back.properties["tenantUUID"] == tenant
    assert back.properties["boostAttempt"] == "1"
    assert "boostDeadLetterReason" not in back.properties
    assert "boostError" not in back.properties
    assert json.loads(str(back.body)) == {"n": 5, "tenantUUID": tenant}
    assert cli.ok("dlq", "list", "--tenant", tenant, "--queue", queue) == []

    errors = cli.ok("errors", "--tenant", tenant)
    assert [(e["message_id"], e["attempt"], e["outcome"]) for e in errors] == [
        (message_id, 1, "retry"),
        (message_id, 2, "dead_letter"),
        (message_id, 2, "redrive"),
    ]
    assert all(e["tenant"] == tenant and e["queue"] == queue for e in errors)
    assert all("always fails" in e["trace"] for e in errors if e["outcome"] != "redrive"), (
        "a stored failure keeps the stack trace that names the handler's line"
    )
    assert [e["attempt"] for e in cli.ok("errors", "--tenant", tenant, "--outcome", "retry")] == [1]
    assert cli.ok("errors", "--tenant", other) == []


def test_errors_refuses_an_invalid_tenant(cli: Cli) -> None:
    done = cli("errors", "--tenant", "a'--")
    assert done.returncode == 2
    assert 'invalid tenant id "a\'--"' in done.stderr


def test_dlq_list_refuses_a_wildcard_queue(cli: Cli) -> None:
    done = cli("dlq", "list", "--tenant", new_tenant("q"), "--queue", "cmd.>")
    assert done.returncode == 2
    assert "invalid queue name 'cmd.>'" in done.stderr


def test_publish_with_per_tenant_routing_sends_to_the_tenants_own_queue(
    cli: Cli, consumer: StompTransport
) -> None:
    tenant = new_tenant("route")
    queue = f"test.cli.route.{uuid.uuid4().hex[:10]}"
    routed = Cli({**cli.env, "BOOST_ROUTING_OVERRIDES": f"{queue}=per_tenant"}, cli.error_store)
    (line,) = routed.ok("publish", "--queue", queue, "--tenant", tenant, "--text", "x")
    assert (line["queue"], line["broker_queue"]) == (queue, f"tenant.{tenant}.{queue}")
    (received,) = take(consumer, f"tenant.{tenant}.{queue}", tenant, 1)
    assert received.body == "x"
    bad = Cli({**cli.env, "BOOST_ROUTING": "sharded"}, cli.error_store)
    done = bad("publish", "--queue", queue, "--tenant", tenant, "--text", "x")
    assert done.returncode == 2
    assert "BOOST_ROUTING" in done.stderr


def test_run_refuses_an_invalid_default_tenant_naming_the_variable(cli: Cli) -> None:
    bad = Cli({**cli.env, "BOOST_DEFAULT_TENANT": "x' OR '1'='1"}, cli.error_store)
    done = bad("run", "tests.integration.cli_processors:AlwaysFails", "--tenant", "org-a")
    assert done.returncode == 2
    assert "BOOST_DEFAULT_TENANT: invalid tenant id" in done.stderr


def test_park_moves_inactive_tenants_until_sigterm_and_reports_counts(
    cli: Cli, consumer: StompTransport
) -> None:
    active, idle = new_tenant("active"), new_tenant("idle")
    queue = f"test.cli.park.{uuid.uuid4().hex[:10]}"
    # Only a shared queue parks; a routed one (the default) is refused, naming its topology.
    refused = cli("park", "--queue", queue, "--active-tenant", active)
    assert refused.returncode == 2
    assert f"--queue {queue!r} is routed" in refused.stderr
    shared = Cli({**cli.env, "BOOST_ROUTING": "shared"}, cli.error_store)
    park = subprocess.Popen(
        [str(CLI), "park", "--queue", queue, "--active-tenant", active],
        env=shared.env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        shared.ok("publish", "--queue", queue, "--tenant", idle, "--text", "i", "--count", "3")
        shared.ok("publish", "--queue", queue, "--tenant", active, "--text", "a", "--count", "2")
        parked = take(consumer, f"parked.{idle}.{queue}", idle, 3)
        assert {d.body for d in parked} == {"i"}
    finally:
        park.send_signal(signal.SIGTERM)
        out, err = park.communicate(timeout=30)
    assert park.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {"parked": {idle: 3}, "quarantined": 0}
    assert len(take(consumer, queue, active, 2)) == 2  # the active tenant's stayed


def test_dlq_redrive_of_an_unknown_id_names_it_exits_1_and_moves_nothing(
    cli: Cli, consumer: StompTransport
) -> None:
    tenant = new_tenant("nope")
    queue = f"test.cli.nope.{uuid.uuid4().hex[:10]}"
    dlq = f"DLQ.tenant.{tenant}.{queue}"
    dead = build_message(tenant, "\x1b[2Jpayload", message_id=f"dead-{uuid.uuid4().hex}")
    consumer.send(dlq, dead.to_wire())

    done = cli("dlq", "redrive", "--tenant", tenant, "--queue", queue,
               "--message-id", dead.message_id, "--message-id", "nope")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "no dead letter 'nope'" in done.stderr
    assert "nothing was re-driven" in done.stderr
    assert done.stdout == ""

    # Still there, the named one included; its body shown only on request, escaped.
    (hidden,) = cli.ok("dlq", "list", "--tenant", tenant, "--queue", queue)
    assert hidden["message_id"] == dead.message_id
    assert "body" not in hidden
    shown = cli("dlq", "list", "--tenant", tenant, "--queue", queue, "--show-body", "--limit", "1")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert json.loads(shown.stdout)["body"] == "\x1b[2Jpayload"

    assert cli.ok("dlq", "redrive", "--tenant", tenant, "--queue", queue,
                  "--message-id", dead.message_id) == [
        {"redriven": [dead.message_id], "count": 1, "remaining": 0}
    ]  # fmt: skip
    (back,) = take(consumer, f"tenant.{tenant}.{queue}", tenant, 1)
    assert back.properties["boostMessageId"] == dead.message_id


def test_dlq_list_and_errors_finding_nothing_name_what_they_read(cli: Cli) -> None:
    tenant = new_tenant("empty")
    listed = cli("dlq", "list", "--tenant", tenant, "--queue", "test.cli.empty")
    assert listed.returncode == 0
    assert listed.stdout == ""
    assert f"no dead letters of tenant {tenant} in DLQ.tenant.{tenant}.test.cli.empty" in (
        listed.stderr
    )
    assert f"sqlite:///{cli.error_store}" in listed.stderr
    errors = cli("errors", "--tenant", tenant)
    assert errors.returncode == 0
    assert f"no failures found in the error store sqlite:///{cli.error_store}" in errors.stderr
