"""The metrics endpoint for library users (start_metrics_server) over real HTTP: the runner's
gauges beside the handling metrics, /healthz and /readyz answering 200 or 503 with the failed
checks, a port in use as a ConfigError naming it, and BOOST_METRICS_HOST."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    ConfigError,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantId,
    TenantProcessor,
    start_metrics_server,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.fairness.handling_metrics import HandlingMetrics
from boost_tenancy.processing.runner_health import RunnerHealth
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport


class Idle(TenantProcessor):
    queues = ("probed", "other")

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Nothing to do."""


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def transport() -> Iterator[InMemoryTransport]:
    broker = InMemoryBroker()
    yield InMemoryTransport(broker)
    broker.close()


@pytest.fixture
def runner(transport: InMemoryTransport, tmp_path: Path) -> Iterator[ProcessorRunner]:
    built = ProcessorRunner(
        Idle(),
        transport,
        ["org-a", "org-b"],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
    )
    yield built
    built.stop(grace_s=5)


def test_readiness_follows_start_the_connection_and_every_subscription(
    runner: ProcessorRunner, transport: InMemoryTransport
) -> None:
    server = start_metrics_server(port=0, health=runner.health)
    try:
        status, body = _get(f"{server.url}/readyz")
        assert status == 503
        assert json.loads(body) == {
            "status": "fail",
            "failed": ["connected", "started", "subscriptions"],
            "checks": {"started": False, "connected": False, "subscriptions": False},
        }
        runner.start()
        status, body = _get(f"{server.url}/readyz")
        assert (status, json.loads(body)["failed"]) == (200, [])
        # One subscription gone (closed by the broker side): not ready, and the check says so.
        transport.unsubscribe(transport_subscription(runner))
        status, body = _get(f"{server.url}/readyz")
        assert status == 503
        assert json.loads(body)["failed"] == ["subscriptions"]
        transport.close()
        status, body = _get(f"{server.url}/readyz")
        assert json.loads(body)["failed"] == ["connected", "subscriptions"]
    finally:
        server.stop()


def test_a_drained_queue_leaves_the_runner_ready(runner: ProcessorRunner) -> None:
    """An operator's drain ends one subscription on purpose: that is not a failure to take
    messages, so readiness (and a rolling restart waiting on it) is not held back by it."""
    runner.start()
    drained = (TenantId.parse("org-a"), "probed")
    runner.drains.apply({drained})
    assert drained not in runner.drains.subscribed()
    health = runner.health()
    assert (health.subscriptions, health.subscriptions_open) == (3, 3)
    assert health.readiness()["subscriptions"] is True


def transport_subscription(runner: ProcessorRunner) -> object:
    _, subscriptions = runner.drains.serving()
    return subscriptions[0]


def test_liveness_fails_once_the_runner_stopped(runner: ProcessorRunner) -> None:
    server = start_metrics_server(port=0, health=runner.health)
    try:
        runner.start()
        status, body = _get(f"{server.url}/healthz")
        assert status == 200
        assert json.loads(body) == {
            "status": "ok",
            "failed": [],
            "checks": {"running": True, "workers": True},
        }
        runner.stop(grace_s=5)
        status, body = _get(f"{server.url}/healthz")
        assert status == 503
        assert json.loads(body)["failed"] == ["running"]
    finally:
        server.stop()


def test_a_worker_that_ended_fails_liveness_until_supervise_replaces_it(
    runner: ProcessorRunner,
) -> None:
    runner.start()
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    runner._workers[0] = ended  # a worker thread that died
    assert runner.health().liveness() == {"running": True, "workers": False}
    assert runner.supervise() == 1
    assert runner.health().liveness() == {"running": True, "workers": True}


def test_a_snapshot_with_a_dead_worker_is_not_live_but_still_ready() -> None:
    health = RunnerHealth(
        started=True,
        stopped=False,
        workers=4,
        workers_alive=3,
        connected=True,
        subscriptions=2,
        subscriptions_open=2,
    )
    assert health.liveness() == {"running": True, "workers": False}
    assert all(health.readiness().values())


def test_metrics_show_the_runner_gauges_beside_the_handling_metrics(
    runner: ProcessorRunner,
) -> None:
    handling = HandlingMetrics()
    server = start_metrics_server(port=0, health=runner.health, handling=handling)
    try:
        runner.start()
        status, text = _get(f"{server.url}/metrics")
        assert status == 200
        lines = text.splitlines()
        assert "boost_tenancy_connected 1" in lines
        assert "boost_tenancy_subscriptions 4" in lines  # 2 tenants x 2 queues
        assert "boost_tenancy_subscriptions_open 4" in lines
        assert "boost_tenancy_workers_alive 4" in lines
        assert "# TYPE boost_tenancy_handling_seconds histogram" in lines
        assert "# TYPE boost_tenancy_in_flight gauge" in lines
        runner.stop(grace_s=5)
        _, text = _get(f"{server.url}/metrics")
        assert "boost_tenancy_connected 0" in text.splitlines()
        assert "boost_tenancy_subscriptions_open 0" in text.splitlines()
    finally:
        server.stop()


def test_without_a_runner_the_probes_are_not_served() -> None:
    server = start_metrics_server(port=0)
    try:
        assert _get(f"{server.url}/healthz")[0] == 404
        assert _get(f"{server.url}/metrics")[0] == 200
    finally:
        server.stop()


def test_a_port_in_use_is_a_config_error_naming_the_variable_and_the_port() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"port {port} is already in use") as raised:
            start_metrics_server(port=port)
        assert f"BOOST_METRICS_PORT={port}" in str(raised.value)
        wiring = FairnessWiring.build(None, workers=1, metrics_port=port)
        with pytest.raises(ConfigError, match=f"BOOST_METRICS_PORT={port}"):
            wiring.start()
        wiring.close()


def test_an_address_this_host_lacks_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"BOOST_METRICS_HOST=192\.0\.2\.1"):
        start_metrics_server(port=0, host="192.0.2.1")  # TEST-NET-1: never local


def test_the_server_binds_the_host_it_is_given() -> None:
    server = start_metrics_server(port=0, host="0.0.0.0")  # what is under test
    try:
        assert server.host == "0.0.0.0"
        assert _get(f"{server.url}/metrics")[0] == 200
    finally:
        server.stop()


def test_metrics_host_is_read_strictly() -> None:
    base = {"BOOST_METRICS_PORT": "9100"}
    assert AppSettings.from_env(base).metrics_host == "127.0.0.1"
    assert AppSettings.from_env({**base, "BOOST_METRICS_HOST": "0.0.0.0"}).metrics_host == (
        "0.0.0.0"
    )
    assert AppSettings.from_env({**base, "BOOST_METRICS_HOST": " ::1 "}).metrics_host == "::1"
    with pytest.raises(ConfigError, match="BOOST_METRICS_HOST must be an IP address"):
        AppSettings.from_env({**base, "BOOST_METRICS_HOST": "metrics.example"})
    with pytest.raises(ConfigError, match="without BOOST_METRICS_PORT"):
        AppSettings.from_env({"BOOST_METRICS_HOST": "0.0.0.0"})
