"""Queue gauges served by a running process (QueueGauges): tenants' queue statistics read from the
in-memory Classic model in the background and rendered on /metrics with tenant and queue labels,
stale rows dropped, a failing read logged once per outage, BOOST_QUEUE_GAUGES_S and its refusals,
and run_processor serving them for its tenants and its processor's queues."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from boost_tenancy import (
    ConfigError,
    HandlerContext,
    IncomingMessage,
    TenantId,
    TenantProcessor,
    TenantProducer,
    start_metrics_server,
)
from boost_tenancy.application import run as app_module
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.runner import ProcessorRunner
from boost_tenancy.errors import InvalidTenantError, QueueStatsUnavailableError, TransportError
from boost_tenancy.ops.stats_metrics import QueueGauges
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import QueueStats, Transport
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from tests.conftest import ManualClock, unique_queue, wait_until
from tests.no_statistics import without_statistics

ORG_A, ORG_B, ORG_C = TenantId("org-a"), TenantId("org-b"), TenantId("org-c")


class CountingTransport(InMemoryTransport):
    """The Classic model's statistics, counted per request, failing while told to."""

    def __init__(self, broker: InMemoryBroker) -> None:
        super().__init__(broker)
        self.requests = 0
        self.failing = False

    def queue_stats(self, queues: Sequence[str]) -> dict[str, QueueStats | None]:
        self.requests += 1
        if self.failing:
            raise TransportError("statistics request timed out")
        return super().queue_stats(queues)


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    broker = InMemoryBroker()
    yield broker
    broker.close()


@pytest.fixture
def transport(broker: InMemoryBroker) -> Iterator[CountingTransport]:
    transport = CountingTransport(broker)
    transport.connect()
    yield transport
    transport.close()


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def samples(text: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


def send(transport: Transport, queue: str, tenant: TenantId, count: int) -> None:
    producer = TenantProducer(transport)
    for n in range(count):
        producer.send(queue, tenant, {"n": n})


# -- served on /metrics ---------------------------------------------------------------------------


@pytest.mark.parametrize("tenant_label", [True, False])
def test_a_started_server_serves_each_tenants_queue_counts_read_in_the_background(
    transport: CountingTransport, tenant_label: bool
) -> None:
    queue, other = unique_queue("cmd.g"), unique_queue("cmd.h")
    send(transport, queue, ORG_A, 3)
    send(transport, queue, ORG_B, 2)
    send(transport, other, ORG_B, 1)
    gauges = QueueGauges(transport, [ORG_A, ORG_B], [queue, other], refresh_s=30)
    server = start_metrics_server(port=0, tenant_label=tenant_label, sources=[gauges])
    try:
        gauges.start()  # the first read at once, then every 30 s
        assert wait_until(lambda: "boost_tenancy_queue_depth" in scrape(server.url), timeout=5)
        text = scrape(server.url)
        scrape(server.url)
    finally:
        gauges.close()
        server.stop()
    # One broker request per pass, whatever the number of tenants and queues; none on a scrape.
    assert transport.requests == 1
    assert "# TYPE boost_tenancy_queue_depth gauge" in text
    found = samples(text)
    if tenant_label:
        assert found[f'boost_tenancy_queue_depth{{tenant="org-a",queue="{queue}"}}'] == "3"
        assert found[f'boost_tenancy_queue_depth{{tenant="org-b",queue="{queue}"}}'] == "2"
        assert found[f'boost_tenancy_queue_depth{{tenant="org-b",queue="{other}"}}'] == "1"
        assert found[f'boost_tenancy_queue_depth{{tenant="org-a",queue="{other}"}}'] == "0"
        assert found[f'boost_tenancy_queue_dead_lettered{{tenant="org-a",queue="{queue}"}}'] == "0"
    else:
        assert 'tenant="' not in text.split("boost_tenancy_queue_depth", 1)[1]
        assert found[f'boost_tenancy_queue_depth{{queue="{queue}"}}'] == "5"
        assert found[f'boost_tenancy_queue_depth{{queue="{other}"}}'] == "1"
        assert found[f'boost_tenancy_queue_in_flight{{queue="{queue}"}}'] == "0"
    # Classic counts no scheduled messages per queue: no sample rather than a false 0.
    assert not any(name.startswith("boost_tenancy_queue_scheduled") for name in found)


def test_a_source_added_after_construction_is_served(transport: CountingTransport) -> None:
    queue = unique_queue("cmd.g")
    send(transport, queue, ORG_A, 2)
    gauges = QueueGauges(transport, [ORG_A], [queue], refresh_s=30)
    gauges.refresh()
    server = start_metrics_server(port=0)
    try:
        assert "boost_tenancy_queue_depth" not in scrape(server.url)
        server.add_source(gauges)
        assert f'boost_tenancy_queue_depth{{queue="{queue}"}} 2' in scrape(server.url)
    finally:
        server.stop()


def test_figures_follow_the_broker_on_the_next_pass(transport: CountingTransport) -> None:
    queue = unique_queue("cmd.g")
    gauges = QueueGauges(transport, [ORG_A], [queue], refresh_s=0.05)
    gauges.start()
    try:
        assert wait_until(lambda: f'depth{{queue="{queue}"}} 0' in gauges(False), timeout=5)
        send(transport, queue, ORG_A, 4)
        assert wait_until(lambda: f'depth{{queue="{queue}"}} 4' in gauges(False), timeout=5)
    finally:
        gauges.close()


# -- stale and failing reads ----------------------------------------------------------------------


def test_rows_older_than_three_refreshes_are_not_served(transport: CountingTransport) -> None:
    clock = ManualClock()
    queue = unique_queue("cmd.g")
    send(transport, queue, ORG_A, 1)
    gauges = QueueGauges(transport, [ORG_A], [queue], refresh_s=10, clock=clock)
    assert gauges(True) == ""  # nothing read yet: nothing served
    assert gauges.refresh()
    clock.advance(30)
    assert f'boost_tenancy_queue_depth{{tenant="org-a",queue="{queue}"}} 1' in gauges(True)
    clock.advance(0.5)
    assert gauges(True) == ""
    assert gauges.rows() == ()
    assert gauges.refresh()
    assert gauges.rows()[0].depth == 1


def test_a_failing_read_is_logged_once_per_outage_and_nothing_stale_is_served(
    transport: CountingTransport,
) -> None:
    clock = ManualClock()
    queue = unique_queue("cmd.g")
    gauges = QueueGauges(transport, [ORG_A], [queue], refresh_s=10, clock=clock)
    transport.failing = True
    with capture_logs() as logs:
        for _ in range(3):
            assert not gauges.refresh()
            clock.advance(10)
        assert gauges(False) == ""
        transport.failing = False
        assert gauges.refresh()
        assert gauges.refresh()
        served = gauges(False)
        transport.failing = True
        assert not gauges.refresh()
        assert not gauges.refresh()
        # The rows read before the failure are served until they are stale, and not after.
        assert gauges(False) == served
        clock.advance(31)
        assert gauges(False) == ""
    events = [(entry["event"], entry["log_level"]) for entry in logs]
    assert events == [
        ("queue_gauges_read_failed", "warning"),
        ("queue_gauges_read_recovered", "info"),
        ("queue_gauges_read_failed", "warning"),
    ]
    assert logs[0]["error_type"] == "TransportError"
    assert logs[0]["error"] == "statistics request timed out"
    assert f'boost_tenancy_queue_depth{{queue="{queue}"}} 0' in served


def test_the_thread_outlives_failing_reads(transport: CountingTransport) -> None:
    transport.failing = True
    gauges = QueueGauges(transport, [ORG_A], [unique_queue("cmd.g")], refresh_s=0.02)
    gauges.start()
    try:
        assert wait_until(lambda: transport.requests >= 3, timeout=5)
        assert gauges(True) == ""
        transport.failing = False
        assert wait_until(lambda: gauges(True) != "", timeout=5)
    finally:
        gauges.close()


# -- refusals -------------------------------------------------------------------------------------


def test_a_transport_without_queue_statistics_is_refused_at_start() -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    transport = without_statistics(CountingTransport(broker))
    transport.connect()
    gauges = QueueGauges(transport, [ORG_A], ["cmd.g"], refresh_s=0.02)
    try:
        with pytest.raises(QueueStatsUnavailableError, match="no queue statistics"):
            gauges.start()
    finally:
        gauges.close()
        transport.close()
        broker.close()
    assert transport.requests == 0


def test_bad_tenants_queues_and_intervals_are_refused_when_built(
    transport: CountingTransport,
) -> None:
    with pytest.raises(ConfigError, match="refresh_s"):
        QueueGauges(transport, [ORG_A], ["cmd.g"], refresh_s=0)
    with pytest.raises(InvalidTenantError):
        QueueGauges(transport, ["x' OR '1'='1"], ["cmd.g"])
    with pytest.raises(ConfigError):
        QueueGauges(transport, [ORG_A], ["tenant.org-a.cmd"])


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 0.0),
        ({"BOOST_QUEUE_GAUGES_S": "0"}, 0.0),
        ({"BOOST_QUEUE_GAUGES_S": "2.5", "BOOST_METRICS_PORT": "9100"}, 2.5),
    ],
)
def test_the_setting_is_off_unless_set(env: dict[str, str], expected: float) -> None:
    assert AppSettings.from_env(env).queue_gauges_s == expected


@pytest.mark.parametrize("raw", ["soon", "-1", "inf", "nan", "100000", "0.2"])
def test_the_setting_refuses_what_is_not_a_duration_naming_it(raw: str) -> None:
    with pytest.raises(ConfigError, match="BOOST_QUEUE_GAUGES_S"):
        AppSettings.from_env({"BOOST_QUEUE_GAUGES_S": raw, "BOOST_METRICS_PORT": "9100"})


def test_the_setting_without_a_metrics_port_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as raised:
        AppSettings.from_env({"BOOST_QUEUE_GAUGES_S": "15"})
    assert "BOOST_QUEUE_GAUGES_S" in str(raised.value)
    assert "BOOST_METRICS_PORT" in str(raised.value)


# -- run_processor --------------------------------------------------------------------------------


class Idle(TenantProcessor):
    def __init__(self, *queues: str) -> None:
        self.queues = queues

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Nothing to do."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_run_processor_serves_the_gauges_of_its_tenants_and_queues(
    monkeypatch: pytest.MonkeyPatch, broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue, other = unique_queue("cmd.g"), unique_queue("cmd.h")
    # Another tenant's messages of the runner's queue, and the runner's tenant's of a queue
    # its processor does not consume: neither is this runner's to show.
    sender = InMemoryTransport(broker)
    sender.connect()
    send(sender, queue, ORG_C, 2)
    send(sender, other, ORG_A, 2)
    port = free_port()
    scraped: list[str] = []

    class ScrapingRunner(ProcessorRunner):
        """The real runner, started and stopped around a scrape instead of waiting for a
        signal."""

        def run(self, *, install_signal_handlers: bool = True) -> int:
            self.start()
            try:

                def served() -> bool:
                    scraped.append(scrape(f"http://127.0.0.1:{port}"))
                    return 'boost_tenancy_queue_depth{tenant="org-b"' in scraped[-1]

                assert wait_until(served, timeout=5)
            finally:
                self.stop(grace_s=1)
            return 0

    monkeypatch.setattr(app_module, "ProcessorRunner", ScrapingRunner)
    monkeypatch.setattr(app_module, "open_broker", lambda *_: InMemoryTransport(broker))
    settings = AppSettings.from_env(
        {
            "BOOST_QUEUE_GAUGES_S": "30",
            "BOOST_METRICS_PORT": str(port),
            "BOOST_METRICS_TENANT_LABEL": "on",
            "BOOST_FAIRNESS": "off",
        }
    )
    try:
        assert app_module.run_processor(Idle(queue), [ORG_A, ORG_B], settings, store=store) == 0
    finally:
        sender.close()
    text = scraped[-1]
    found = samples(text)
    for tenant in ("org-a", "org-b"):
        assert found[f'boost_tenancy_queue_depth{{tenant="{tenant}",queue="{queue}"}}'] == "0"
    assert 'tenant="org-c"' not in text
    assert f'queue="{other}"' not in text
    # The other families are there as before.
    assert "# TYPE boost_tenancy_messages_total counter" in text
    # Closed with the runner: its reading thread is gone.
    assert "boost-queue-gauges" not in {thread.name for thread in threading.enumerate()}


def test_run_processor_refuses_a_broker_without_statistics_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, store: ErrorStore
) -> None:
    artemis = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    opened: list[InMemoryTransport] = []
    seen: dict[str, Any] = {}

    def open_artemis(*_: Any) -> InMemoryTransport:
        opened.append(without_statistics(InMemoryTransport(artemis)))
        return opened[-1]

    class StartingRunner(ProcessorRunner):
        def run(self, *, install_signal_handlers: bool = True) -> int:
            seen["runner"] = self
            self.start()
            return 0

    monkeypatch.setattr(app_module, "ProcessorRunner", StartingRunner)
    monkeypatch.setattr(app_module, "open_broker", open_artemis)
    settings = AppSettings.from_env(
        {"BOOST_QUEUE_GAUGES_S": "15", "BOOST_METRICS_PORT": str(free_port())}
    )
    try:
        with pytest.raises(ConfigError, match="BOOST_QUEUE_GAUGES_S=15 asks for queue gauges"):
            app_module.run_processor(Idle("cmd.g"), [ORG_A], settings, store=store)
        # Refused before anything was subscribed, and the connection closed again.
        assert not opened[0].is_connected
        assert seen["runner"].drains.subscribed() == frozenset()
    finally:
        artemis.close()


def test_run_processor_without_the_setting_adds_no_gauges(
    monkeypatch: pytest.MonkeyPatch, store: ErrorStore
) -> None:
    seen: dict[str, Any] = {}

    class FakeRunner:
        health = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.update(kwargs)

        def run(self) -> int:
            return 0

    monkeypatch.setattr(app_module, "ProcessorRunner", FakeRunner)
    settings = AppSettings.from_env({"BOOST_FAIRNESS": "off"})
    assert app_module.run_processor(Idle("cmd.g"), [ORG_A], settings, store=store) == 0
    assert seen["on_connected"] == ()
