"""Per-tenant queue statistics from the real ActiveMQ Classic (its statistics plugin, which the
project's broker enables): a runner's backlog counted exactly, asking about a queue that does not
exist creates none, the command prints what the broker said, and a runner serves the counts as
gauges on its /metrics."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import TenantId, TenantProducer
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.stats import NOT_REPORTED, TenantStats
from boost_tenancy.ops.stats_metrics import queue_gauges
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.broker_target import stomp_env
from tests.conftest import unique_queue, wait_until
from tests.integration.cli_processors import GAUGES_QUEUE, RELEASE_FILE_ENV
from tests.stats_scenario import HELD, WAITING, backlog

pytestmark = [
    pytest.mark.broker,
]

CLI = Path(sys.executable).parent / "boost-tenancy"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def new_tenant() -> TenantId:
    """A tenant no other run uses: the broker is shared, its queues outlive the tests."""
    return TenantId(f"stats-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def transport(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    transport = StompTransport(stomp_settings)
    transport.connect()
    yield transport
    transport.close()


def test_a_runners_backlog_is_counted_exactly(
    stomp_settings: StompSettings, transport: StompTransport, tmp_path: Path
) -> None:
    tenant, other = new_tenant(), new_tenant()
    queue = unique_queue("cmd.stats")
    TenantProducer(transport).send(queue, other, {"kind": "plain"})
    with backlog(StompTransport(stomp_settings), transport, queue, tenant, tmp_path):
        # The runner's acknowledgements of the dead letter and the quarantined message are
        # written by its ack thread: counted once the broker has them.
        stats = TenantStats(transport)
        # Classic counts its prefetch in messages: exactly HELD are in flight. Artemis counts a
        # byte window, which may take some of the waiting ones too: they are in flight then.
        exact = transport.capabilities.prefetch_counts_messages

        def held() -> bool:
            row = stats.rows(tenant, [queue])[0]
            if exact:
                return row.in_flight == HELD
            return (row.depth or 0) + (row.in_flight or 0) == HELD + WAITING

        assert wait_until(held, timeout=10)
        row, other_row = stats.rows_for([tenant, other], [queue])
        gauges = queue_gauges([row, other_row], tenant_label=True)
    assert row.exists
    depth, in_flight = (WAITING, HELD) if exact else (row.depth, row.in_flight)
    assert in_flight >= HELD
    # Classic's scheduler serves the whole broker: no count per queue. Artemis counts them.
    scheduled = None if row.unavailable else 0
    assert row.counts() == {
        "depth": depth,
        "in_flight": in_flight,
        "scheduled": scheduled,
        "dead_lettered": 1,
        "quarantined": 1,
        "parked": 0,
    }
    assert row.unavailable in ({"scheduled": NOT_REPORTED}, {})
    assert (other_row.depth, other_row.in_flight, other_row.dead_lettered) == (1, 0, 0)
    assert f'boost_tenancy_queue_depth{{tenant="{tenant.value}",queue="{queue}"}} {depth}' in (
        gauges.splitlines()
    )


def test_asking_about_queues_the_broker_does_not_have_creates_none(
    transport: StompTransport,
) -> None:
    missing = [unique_queue("stats.missing"), dead_letter_queue(unique_queue("stats.missing"))]
    assert transport.queue_stats(missing) == dict.fromkeys(missing)
    # Asked again: still none. Had the first request created them, they would answer now.
    assert transport.queue_stats(missing) == dict.fromkeys(missing)


def test_many_queues_are_answered_in_one_call(transport: StompTransport) -> None:
    queues = [unique_queue("stats.many") for _ in range(300)]
    sent = queues[::50]
    for queue in sent:
        transport.send(queue, WireMessage(body="x", properties={}))
    stats = transport.queue_stats(queues)
    assert {q for q, s in stats.items() if s is not None} == set(sent)
    assert all((stats[q].waiting, stats[q].in_flight) == (1, 0) for q in sent)  # type: ignore[union-attr]


def test_the_command_prints_the_brokers_counts(
    stomp_settings: StompSettings, transport: StompTransport
) -> None:
    tenant = new_tenant()
    queue = unique_queue("cmd.stats")
    producer = TenantProducer(transport)
    for n in range(2):
        producer.send(queue, tenant, {"n": n})
    env = {key: value for key, value in os.environ.items() if not key.startswith("BOOST_")}
    env.update(stomp_env(stomp_settings))
    done = subprocess.run(
        [str(CLI), "stats", "--tenant", tenant.value, "--queue", queue, "--json"],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # One object per queue, and one with the tenant plugin's counts where the broker runs it
    # (the project's Artemis does; under scripts/test for the pipeline's queues alone, and this
    # one is not among them).
    shown, *plugin = (json.loads(line) for line in done.stdout.splitlines())
    assert plugin in ([], [{"tenant": tenant.value, "at_broker": []}])
    assert (shown["broker_queue"], shown["exists"]) == (f"tenant.{tenant.value}.{queue}", True)
    assert (shown["depth"], shown["in_flight"], shown["dead_lettered"]) == (2, 0, 0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape(port: int) -> str:
    """/metrics of the runner, or nothing while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body: bytes = response.read()
    except (urllib.error.URLError, ConnectionError):
        return ""
    return body.decode()


def test_a_runner_serves_its_tenants_queue_depth_on_metrics(
    stomp_settings: StompSettings, transport: StompTransport, tmp_path: Path
) -> None:
    tenant = new_tenant()
    waiting = 4
    # Sent before the runner starts: it takes one (a prefetch of one, one worker) and holds it
    # in its handler, the others wait on the tenant's queue.
    producer = TenantProducer(transport)
    for n in range(1 + waiting):
        producer.send(GAUGES_QUEUE, tenant, {"n": n})
    port = free_port()
    release = tmp_path / "release"
    env = {key: value for key, value in os.environ.items() if not key.startswith("BOOST_")}
    env.update(
        {
            **stomp_env(stomp_settings),
            "BOOST_ERROR_STORE": f"sqlite:///{tmp_path / 'errors.sqlite3'}",
            "BOOST_METRICS_PORT": str(port),
            "BOOST_METRICS_TENANT_LABEL": "on",
            "BOOST_QUEUE_GAUGES_S": "1",
            "BOOST_WORKERS": "1",
            "BOOST_PREFETCH": "1",
            "BOOST_FAIRNESS": "off",
            RELEASE_FILE_ENV: str(release),
            "PYTHONPATH": os.pathsep.join(
                [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
    )
    labels = f'{{tenant="{tenant.value}",queue="{GAUGES_QUEUE}"}}'
    run_log = tmp_path / "run.log"
    with run_log.open("w") as log_file:
        runner = subprocess.Popen(
            [
                str(CLI),
                "run",
                "tests.integration.cli_processors:HoldsUntilReleased",
                "--tenant",
                tenant.value,
            ],
            env=env,
            cwd=PROJECT_ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:

            def gauge(lines: list[str], name: str) -> int | None:
                prefix = f"boost_tenancy_queue_{name}{labels} "
                found = [
                    int(float(line[len(prefix) :])) for line in lines if line.startswith(prefix)
                ]
                return found[0] if found else None

            def served(depth: int, in_flight: int) -> bool:
                assert runner.poll() is None, run_log.read_text()
                lines = scrape(port).splitlines()
                return (gauge(lines, "depth"), gauge(lines, "in_flight")) == (depth, in_flight)

            def holding() -> bool:
                # Classic takes one (a prefetch of one); Artemis's byte window may take more,
                # which are then in flight, not waiting.
                assert runner.poll() is None, run_log.read_text()
                lines = scrape(port).splitlines()
                depth, in_flight = gauge(lines, "depth"), gauge(lines, "in_flight")
                if transport.capabilities.prefetch_counts_messages:
                    return (depth, in_flight) == (waiting, 1)
                return (
                    depth is not None
                    and in_flight is not None
                    and (depth + in_flight == 1 + waiting and in_flight >= 1)
                )

            assert wait_until(holding, timeout=30, interval=0.5), run_log.read_text()
            release.touch()
            # Read again every second: the drained queue shows within a few.
            assert wait_until(lambda: served(0, 0), timeout=30, interval=0.5), run_log.read_text()
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(timeout=40) == 0, run_log.read_text()
        finally:
            release.touch()
            if runner.poll() is None:
                runner.kill()
                runner.wait()
