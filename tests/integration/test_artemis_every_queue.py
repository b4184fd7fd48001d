"""The project's Artemis plugin routing every queue (queues="*", the shared ones named) on a real
Artemis 2.44, no queue and no tenant listed:

- a queue nobody listed is split per tenant from its very first message: the plugin makes its
  divert as the broker makes the queue's address, before the message is routed;
- a message without a tenantUUID is stored as sent (another application's, or for the runners'
  routers); one that names an invalid tenant is quarantined;
- the shared queues (an exact name, a prefix) and the toolkit's own queues are left alone;
- a runner makes no divert per tenant there, and handles every message once.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import ProcessorRunner, RunnerSettings
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.base import send_route_installer
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.artemis_plugin import plugin_xml
from devtools.local_artemis import HOST, PASSWORD, USER, ArtemisSettings, LocalArtemis
from tests.conftest import unavailable, wait_until
from tests.integration.send_time_support import Recorder
from tests.integration.test_artemis_tenant_plugin import fresh, read_all, send_all

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("runs an Artemis of its own with the plugin on every queue"),
    pytest.mark.own_broker("artemis"),
]

OFFSET = 1650
"""Ports 63263 (STOMP), 63266 (CORE), 7322 (AMQP): clear of every other broker of the suite."""
SHARED = "evt.every.shared"
SHARED_PREFIX = "legacy.*"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalArtemis]:
    if shutil.which("mvn") is None or shutil.which("java") is None:
        unavailable("the Artemis plugin is built with Maven and runs on Java 17")
    home = tmp_path_factory.mktemp("artemis-every-queue")
    settings = ArtemisSettings(
        home=home / "broker",
        port_offset=OFFSET,
        plugins_xml=plugin_xml(["*"], shared=[SHARED, SHARED_PREFIX]),
    )
    started = LocalArtemis(settings)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def port_of(broker: LocalArtemis) -> int:
    return broker.settings.stomp_port


def stomp_settings(broker: LocalArtemis) -> StompSettings:
    return StompSettings(host=HOST, port=port_of(broker), username=USER, password=PASSWORD)


def test_a_queue_nobody_listed_is_routed_from_its_first_message(broker: LocalArtemis) -> None:
    port = port_of(broker)
    queue = f"cmd.every-{uuid.uuid4().hex[:8]}"  # no address yet: the first send makes it
    heavy, light = fresh("org-heavy"), fresh("org-light")
    sends = [(heavy, f'{{"n": {n}}}') for n in range(300)]
    sends += [(light, f'{{"n": {n}}}') for n in range(20)]
    assert send_all(port, sends, queue) == (320, [])
    light_frames = read_all(port, f"tenant.{light}.{queue}", 20)
    assert [f.body for f in light_frames] == [f'{{"n": {n}}}' for n in range(20)]
    assert len(read_all(port, f"tenant.{heavy}.{queue}", 300)) == 300
    assert read_all(port, queue, 0) == []


def test_without_a_tenant_as_sent_and_with_an_invalid_one_quarantined(
    broker: LocalArtemis,
) -> None:
    port = port_of(broker)
    queue = f"cmd.every-{uuid.uuid4().hex[:8]}"
    assert send_all(port, [(None, "none"), ("it's", "invalid")], queue) == (2, [])
    assert [f.body for f in read_all(port, queue, 1)] == ["none"]
    quarantined = read_all(port, f"DLQ.{queue}.quarantine", 1)
    assert [f.body for f in quarantined] == ["invalid"]
    assert quarantined[0].headers["boostDeadLetterReason"] == "tenancy-violation"


@pytest.mark.parametrize("queue", [SHARED, "legacy.orders", "DLQ.cmd.every", "boost.own.queue"])
def test_the_shared_queues_and_the_toolkits_own_are_left_alone(
    broker: LocalArtemis, queue: str
) -> None:
    port = port_of(broker)
    tenant = fresh("org-a")
    assert send_all(port, [(tenant, "kept")], queue) == (1, [])
    assert [f.body for f in read_all(port, queue, 1)] == ["kept"]
    assert read_all(port, f"tenant.{tenant}.{queue}", 0) == []


def test_a_runner_makes_no_divert_per_tenant_and_handles_each_message_once(
    broker: LocalArtemis, tmp_path: Path
) -> None:
    queue = f"cmd.every-{uuid.uuid4().hex[:8]}"  # the runner makes its address
    tenant = fresh("org-run")
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    processor = Recorder(queue)
    runner = ProcessorRunner(
        processor,
        StompTransport(stomp_settings(broker)),
        [tenant],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10),
    )
    runner.start()
    try:
        assert runner.send_routes_added == 0  # the plugin routes the queue it made
        sends = [(tenant, f'{{"n": {n}, "tenantUUID": "{tenant}"}}') for n in range(10)]
        assert send_all(port_of(broker), sends, queue) == (10, [])
        assert wait_until(lambda: processor.count() == 10, 20)
        time.sleep(1.0)
        assert sorted(processor.seen) == list(range(10))  # once each, never twice
        check = StompTransport(stomp_settings(broker))
        check.connect()
        try:
            installer = send_route_installer(check)
            assert installer is not None
            assert queue in installer.routed_by_broker()
            assert [r for r in installer.send_routes() if r.source == queue] == []
        finally:
            check.close()
    finally:
        runner.stop(grace_s=5)
        store.close()


def test_a_runners_divert_on_a_queue_now_routed_is_removed_at_start(tmp_path: Path) -> None:
    """A runner made a divert for its tenant while the plugin listed other queues; the broker
    restarted routing every queue removes it, or each of that tenant's messages would be stored
    twice (once by each divert)."""
    home = tmp_path / "broker"
    queue = f"cmd.every-{uuid.uuid4().hex[:8]}"
    tenant = fresh("org-old")

    def broker_with(queues: list[str]) -> LocalArtemis:
        return LocalArtemis(
            ArtemisSettings(
                home=home,
                port_offset=OFFSET + 10,
                plugins_xml=plugin_xml(queues),
            )
        )

    listed = broker_with(["cmd.other"])
    listed.start()
    try:
        store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
        runner = ProcessorRunner(
            Recorder(queue), StompTransport(stomp_settings(listed)), [tenant], error_store=store
        )
        runner.start()
        assert runner.send_routes_added == 1  # not routed by the plugin: the runner's own divert
        runner.stop(grace_s=5)
        store.close()
    finally:
        listed.stop()
    every = broker_with(["*"])
    every.start()
    try:
        check = StompTransport(stomp_settings(every))
        check.connect()
        try:
            installer = send_route_installer(check)
            assert installer is not None
            assert [r for r in installer.send_routes() if r.source == queue] == []
            assert queue in installer.routed_by_broker()
        finally:
            check.close()
        port = port_of(every)
        assert send_all(port, [(tenant, "once")], queue) == (1, [])
        time.sleep(1.0)
        assert [f.body for f in read_all(port, f"tenant.{tenant}.{queue}", 2, 3.0)] == ["once"]
    finally:
        every.stop()
