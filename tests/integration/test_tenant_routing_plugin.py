"""The project's Classic plugin (brokers/classic, TenantRoutingPlugin) on a real ActiveMQ Classic:
a broker started with its queue listed, and no tenant listed, stores every tenant's messages sent
to the shared queue (plain STOMP, a JMS producer, in a transaction) in tenant.<tenant>.<queue> at
send time, before any runner exists; a message without a valid tenantUUID stays on the shared
queue, where the runner's TenantRouter quarantines it and counts it. With queues="*" it does so
for every queue nobody listed, and leaves the shared ones and the toolkit's own as sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import stomp

from boost_tenancy import TenantId
from boost_tenancy.resilience.error_store import FailureOutcome
from boost_tenancy.transports.stomp import StompSettings
from tests.conftest import recorded, wait_until
from tests.integration.send_time_support import light_runner, own_broker, read_back
from tests.integration.send_time_support import raw_send as send_to
from tests.jms.peer import JmsPeer

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("starts a Classic broker with the project's tenant routing plugin"),
]

QUEUE = "cmd.plugin"
OTHER = "cmd.plugin.unlisted"
"""A queue the plugin is not configured for: never routed."""
HEAVY_COUNT = 600
LIGHT_COUNT = 20


@dataclass(frozen=True)
class RoutedBroker:
    stomp: StompSettings
    openwire_url: str


@pytest.fixture(scope="module")
def routed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedBroker]:
    with own_broker(tmp_path_factory.mktemp("plugin-broker"), routed_queues=(QUEUE,)) as (
        settings,
        openwire_url,
    ):
        yield RoutedBroker(settings, openwire_url)


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def raw_send(
    settings: StompSettings, messages: list[tuple[str | None, int]], queue: str = QUEUE
) -> None:
    send_to(settings, queue, messages)


def test_every_tenant_is_stored_in_its_own_queue_at_send_time(
    routed_broker: RoutedBroker,
) -> None:
    """No runner, no tenant listed: a heavy backlog and a light tenant are apart as sent."""
    broker = routed_broker.stomp
    heavy, light = fresh("org-heavy"), fresh("org-light")
    raw_send(broker, [(heavy, n) for n in range(HEAVY_COUNT)])
    raw_send(broker, [(light, n) for n in range(LIGHT_COUNT)])
    light_frames = read_back(broker, f"tenant.{light}.{QUEUE}", LIGHT_COUNT, 10)
    assert [n for _, n in light_frames] == list(range(LIGHT_COUNT))  # in the order sent
    assert {h["tenantUUID"] for h, _ in light_frames} == {light}
    assert {h["original-destination"] for h, _ in light_frames} == {f"/queue/{QUEUE}"}
    heavy_frames = read_back(broker, f"tenant.{heavy}.{QUEUE}", HEAVY_COUNT, 20)
    assert sorted(n for _, n in heavy_frames) == list(range(HEAVY_COUNT))
    assert {(h["tenantUUID"], h["persistent"]) for h, _ in heavy_frames} == {(heavy, "true")}
    assert read_back(broker, QUEUE, 1, timeout=1.0) == []


def test_a_queue_not_listed_and_a_message_without_a_valid_tenant_are_stored_as_sent(
    routed_broker: RoutedBroker,
) -> None:
    broker = routed_broker.stomp
    tenant = fresh("org-a")
    raw_send(broker, [(tenant, 1)], queue=OTHER)
    # Not tenant ids: a quote, a dot (it would choose another queue), too long, empty.
    invalid = ["it's", "org.b", "x" * 65, ""]
    raw_send(broker, [(None, 0), *((value, i + 1) for i, value in enumerate(invalid))])
    assert [n for _, n in read_back(broker, OTHER, 1, 10)] == [1]
    assert read_back(broker, f"tenant.{tenant}.{OTHER}", 1, timeout=1.0) == []
    shared = read_back(broker, QUEUE, 5, 10)
    assert [n for _, n in shared] == [0, 1, 2, 3, 4]
    assert [h.get("tenantUUID") for h, _ in shared] == [None, *invalid]


def test_a_transaction_stores_in_the_tenant_queue_on_commit_and_nothing_on_abort(
    routed_broker: RoutedBroker,
) -> None:
    broker = routed_broker.stomp
    tenant = fresh("org-tx")
    connection = stomp.Connection12([(broker.host, broker.port)], auto_content_length=False)
    connection.connect(wait=True)
    try:
        for n, end in ((1, connection.abort), (2, connection.commit)):
            tx = connection.begin()
            headers = {"persistent": "true", "tenantUUID": tenant}
            connection.send(
                f"/queue/{QUEUE}", json.dumps({"n": n}), headers=headers, transaction=tx
            )
            end(tx)
    finally:
        connection.disconnect()
    assert [n for _, n in read_back(broker, f"tenant.{tenant}.{QUEUE}", 2, timeout=3.0)] == [2]
    assert read_back(broker, QUEUE, 1, timeout=1.0) == []


@pytest.mark.java
def test_a_jms_producer_bound_to_the_shared_queue_is_routed_message_by_message(
    routed_broker: RoutedBroker, jms_peer: JmsPeer
) -> None:
    """One JMS producer, its destination fixed: the broker caches that destination for it, and
    each message must still go where its own tenantUUID says (a message with none first, so
    the cache is filled with the shared queue before the routed ones)."""
    a, b = fresh("org-jms-a"), fresh("org-jms-b")
    jms_peer.send_each(routed_broker.openwire_url, QUEUE, "hello", ["", a, b, "", a])
    broker = routed_broker.stomp
    assert [h["tenantUUID"] for h, _ in read_back(broker, f"tenant.{a}.{QUEUE}", 2, 10)] == [a, a]
    assert [h["tenantUUID"] for h, _ in read_back(broker, f"tenant.{b}.{QUEUE}", 1, 10)] == [b]
    received = jms_peer.receive(routed_broker.openwire_url, QUEUE, count=2, timeout_ms=5_000)
    assert [m["tenantUUID"] for m in received] == [None, None]
    assert [m["class"] for m in received] == ["TextMessage", "TextMessage"]


def test_a_runner_reads_its_tenant_and_its_router_quarantines_what_the_broker_left(
    routed_broker: RoutedBroker, tmp_path: Path
) -> None:
    broker = routed_broker.stomp
    heavy, light = fresh("org-heavy"), fresh("org-light")
    raw_send(
        broker,
        [(heavy, n) for n in range(HEAVY_COUNT)]
        + [(light, n) for n in range(LIGHT_COUNT)]
        + [(None, -1)],
    )
    with light_runner(broker, QUEUE, light, tmp_path / "errors.sqlite3", LIGHT_COUNT) as (
        processor,
        router,
        store,
    ):
        assert wait_until(lambda: router.quarantined == 1)
        (record,) = recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)
        assert router.routed == {}  # the broker routed every tenant: nothing left to move
    assert record.queue == QUEUE
    assert processor.seen == list(range(LIGHT_COUNT))
    assert len(read_back(broker, f"tenant.{heavy}.{QUEUE}", HEAVY_COUNT, 20)) == HEAVY_COUNT
    assert read_back(broker, QUEUE, 1, timeout=1.0) == []
    assert TenantId(light) not in router.routed


SHARED_EXACT = "evt.plugin.shared"
SHARED_PREFIX = "legacy.*"


@pytest.fixture(scope="module")
def every_queue_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StompSettings]:
    """The recommended configuration: every queue routed but the shared ones."""
    with own_broker(
        tmp_path_factory.mktemp("every-queue-broker"),
        routed_queues=("*",),
        shared_queues=(SHARED_EXACT, SHARED_PREFIX),
    ) as (settings, _):
        yield settings


def test_every_queue_routes_a_queue_nobody_listed_at_send_time(
    every_queue_broker: StompSettings,
) -> None:
    """A backlog sent by plain producers to a queue named nowhere is apart per tenant as sent,
    before any runner exists: what makes a heavy tenant's backlog harmless by default."""
    broker = every_queue_broker
    queue = f"cmd.unlisted-{uuid.uuid4().hex[:8]}"
    heavy, light = fresh("org-heavy"), fresh("org-light")
    send_to(broker, queue, [(heavy, n) for n in range(HEAVY_COUNT)])
    send_to(broker, queue, [(light, n) for n in range(LIGHT_COUNT)])
    light_frames = read_back(broker, f"tenant.{light}.{queue}", LIGHT_COUNT, 10)
    assert [n for _, n in light_frames] == list(range(LIGHT_COUNT))
    assert len(read_back(broker, f"tenant.{heavy}.{queue}", HEAVY_COUNT, 20)) == HEAVY_COUNT
    assert read_back(broker, queue, 1, timeout=1.0) == []


@pytest.mark.parametrize("queue", [SHARED_EXACT, "legacy.orders"])
def test_every_queue_leaves_the_shared_queues_as_sent(
    every_queue_broker: StompSettings, queue: str
) -> None:
    """A Java service reads these with its selector: their messages stay where they were sent."""
    tenant = fresh("org-a")
    send_to(every_queue_broker, queue, [(tenant, 7)])
    assert [n for _, n in read_back(every_queue_broker, queue, 1, 10)] == [7]
    assert read_back(every_queue_broker, f"tenant.{tenant}.{queue}", 1, timeout=1.0) == []


def test_every_queue_leaves_the_toolkits_own_queues_and_invalid_tenants_alone(
    every_queue_broker: StompSettings,
) -> None:
    broker = every_queue_broker
    tenant = fresh("org-a")
    queue = f"cmd.own-{uuid.uuid4().hex[:8]}"
    own = [f"DLQ.{queue}", f"tenant.{tenant}.{queue}", f"DLQ.{queue}.quarantine"]
    for n, name in enumerate(own):
        send_to(broker, name, [(tenant, n)])
    for n, name in enumerate(own):
        assert [m for _, m in read_back(broker, name, 1, 10)] == [n]
    send_to(broker, queue, [(None, 0), ("org.b", 1)])
    assert [n for _, n in read_back(broker, queue, 2, 10)] == [0, 1]
