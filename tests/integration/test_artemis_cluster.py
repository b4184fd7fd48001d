"""A two-node Artemis cluster of the project's scripts (devtools/artemis_cluster.py), both nodes
running the tenant plugin: producers send to node 1, a tenant's runner runs on node 2, and every
message reaches it; the plugin routes and quarantines on either node; a tenant without a runner
keeps its messages in its own queue, never in front of another tenant's."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import ProcessorRunner, RunnerSettings
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.artemis_cluster import ArtemisCluster
from devtools.local_artemis import HOST, PASSWORD, USER
from tests.conftest import unavailable, wait_until
from tests.integration.send_time_support import Recorder
from tests.integration.test_artemis_tenant_plugin import read_all, send_all

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("runs a two-node Artemis cluster of its own"),
    pytest.mark.own_broker("artemis"),
]

QUEUE = "cmd.acluster"
OFFSETS = (1800, 1900)
"""Ports 63513/63613 (STOMP) and the rest: clear of every other broker of the suite."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtemisCluster]:
    if shutil.which("mvn") is None or shutil.which("java") is None:
        unavailable("the Artemis plugin is built with Maven and runs on Java 17")
    nodes = ArtemisCluster(tmp_path_factory.mktemp("artemis-cluster"), [QUEUE], OFFSETS)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def node_settings(cluster: ArtemisCluster, index: int) -> StompSettings:
    return StompSettings(
        host=HOST,
        port=cluster.nodes[index].settings.stomp_port,
        username=USER,
        password=PASSWORD,
    )


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_producer_on_one_node_reaches_a_tenants_runner_on_the_other(
    cluster: ArtemisCluster, tmp_path: Path
) -> None:
    served, idle = fresh("org-served"), fresh("org-idle")
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    processor = Recorder(QUEUE)
    runner = ProcessorRunner(
        processor,
        StompTransport(node_settings(cluster, 1)),
        [served],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10),
    )
    runner.start()
    try:
        node1 = cluster.nodes[0].settings.stomp_port
        sends = [(served, f'{{"n": {n}}}') for n in range(50)]
        sends += [(idle, f'{{"n": {n}}}') for n in range(30)]
        assert send_all(node1, sends, queue=QUEUE) == (80, [])
        assert wait_until(lambda: processor.count() == 50, 60)
        assert sorted(processor.seen) == list(range(50))
    finally:
        runner.stop(grace_s=5)
        store.close()
    # The tenant without a runner: its messages wait in its own queue, on the node they came to.
    assert len(read_all(cluster.nodes[0].settings.stomp_port, f"tenant.{idle}.{QUEUE}", 30)) == 30


def test_the_plugin_routes_and_quarantines_on_either_node(cluster: ArtemisCluster) -> None:
    for index in (0, 1):
        port = cluster.nodes[index].settings.stomp_port
        tenant, body = fresh(f"org-node{index}"), f"nobody-{uuid.uuid4().hex[:8]}"
        assert send_all(port, [(tenant, "routed"), (None, body)], queue=QUEUE) == (2, [])
        assert [f.body for f in read_all(port, f"tenant.{tenant}.{QUEUE}", 1)] == ["routed"]
        quarantined = [f for f in read_all(port, f"DLQ.{QUEUE}.quarantine", 1) if f.body == body]
        assert [f.headers["boostErrorType"] for f in quarantined] == ["MissingTenant"]


def test_a_tenant_read_on_both_nodes_keeps_its_messages_off_the_cluster_bridge(
    cluster: ArtemisCluster, tmp_path: Path
) -> None:
    """A message stays on the node it was sent to while its tenant's runner reads there
    (OFF_WITH_REDISTRIBUTION): a heavy tenant with runners on both nodes puts nothing on the
    bridge every tenant's crossing messages share in order (ON_DEMAND would send about half)."""
    tenant = fresh("org-both")
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    near, far = Recorder(QUEUE), Recorder(QUEUE)
    runners = [
        ProcessorRunner(
            processor,
            StompTransport(node_settings(cluster, index)),
            [tenant],
            error_store=store,
            settings=RunnerSettings(workers=2, prefetch=10),
        )
        for index, processor in ((0, near), (1, far))
    ]
    for runner in runners:
        runner.start()
    try:
        sends = [(tenant, f'{{"n": {n}}}') for n in range(60)]
        assert send_all(cluster.nodes[0].settings.stomp_port, sends, queue=QUEUE) == (60, [])
        assert wait_until(lambda: near.count() + far.count() == 60, 60)
        assert (near.count(), far.count()) == (60, 0)
    finally:
        for runner in runners:
            runner.stop(grace_s=5)
        store.close()
