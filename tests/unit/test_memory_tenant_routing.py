"""The in-memory Classic's model of the project's tenant routing plugin (brokers/classic), for
tests that run without a broker: the STOMP-side behaviour tests/integration/
test_tenant_routing_plugin.py checks on the real Classic (not the JMS producer's, nor the
transactions', which the model's store has no counterpart of)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from boost_tenancy import HandlerContext, IncomingMessage, ProcessorRunner, TenantProcessor
from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.dead_letter import quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.routing_plugin import plugin_target
from boost_tenancy.transports.stomp import BrokerFlavour
from tests.conftest import wait_until

QUEUE = "cmd.plugin"
OTHER = "cmd.plugin.unlisted"


@pytest.fixture
def classic() -> Iterator[InMemoryBroker]:
    made = InMemoryBroker(tenant_routed_queues=[QUEUE])
    yield made
    made.close()


def message(tenant: str | None, body: str) -> WireMessage:
    return WireMessage(body=body, properties={} if tenant is None else {"tenantUUID": tenant})


def bodies(broker: InMemoryBroker, queue: str) -> list[str | bytes]:
    return [m.body for m in broker.messages(queue)]


def test_every_tenant_is_stored_in_its_own_queue_and_the_rest_as_sent(
    classic: InMemoryBroker,
) -> None:
    for n in range(3):
        classic.put(QUEUE, message("org-heavy", f"h{n}"))
    classic.put(QUEUE, message("org-light", "l0"))
    invalid = ["it's", "org.b", "x" * 65, ""]
    for value in [None, *invalid]:
        classic.put(QUEUE, message(value, f"bad {value!r}"))
    classic.put(OTHER, message("org-light", "other"))
    assert bodies(classic, f"tenant.org-heavy.{QUEUE}") == ["h0", "h1", "h2"]
    (light,) = classic.messages(f"tenant.org-light.{QUEUE}")
    assert light.properties == {
        "tenantUUID": "org-light",
        "original-destination": f"/queue/{QUEUE}",
    }
    assert bodies(classic, f"tenant.org-light.{QUEUE}") == ["l0"]
    assert bodies(classic, QUEUE) == [f"bad {v!r}" for v in [None, *invalid]]
    assert bodies(classic, OTHER) == ["other"]
    # One that names its original destination already (a dead letter sent again) keeps it.
    resent = WireMessage(
        body="again",
        properties={"tenantUUID": "org-light", "original-destination": "/queue/elsewhere"},
    )
    classic.put(QUEUE, resent)
    assert classic.messages(f"tenant.org-light.{QUEUE}")[-1].properties == resent.properties
    assert bodies(classic, f"tenant.org-light.{OTHER}") == []


def test_a_tenant_queue_name_over_200_characters_or_no_tenant_id_has_no_target() -> None:
    long_queue = "q" * 150
    # tenant. + 42 + . + 150 is 200, the longest queue name; one more and it is no queue name.
    assert plugin_target(long_queue, "t" * 42) == f"tenant.{'t' * 42}.{long_queue}"
    assert plugin_target(long_queue, "t" * 43) is None
    assert plugin_target(QUEUE, 7) is None
    assert plugin_target(QUEUE, None) is None


@pytest.mark.parametrize(
    ("queues", "flavour", "problem"),
    [
        (["tenant.acme.cmd"], BrokerFlavour.CLASSIC, "reserved"),
        (["DLQ.cmd"], BrokerFlavour.CLASSIC, "reserved"),
        (["parked.acme.cmd"], BrokerFlavour.CLASSIC, "reserved"),
        (["cmd.quarantine"], BrokerFlavour.CLASSIC, "reserved"),
        (["ActiveMQ.DLQ"], BrokerFlavour.CLASSIC, "reserved for the broker"),
        (["cmd.>"], BrokerFlavour.CLASSIC, "invalid queue name"),
        ("cmd.plugin", BrokerFlavour.CLASSIC, "a list of queue names"),
        ([QUEUE], BrokerFlavour.ARTEMIS, "diverts"),
    ],
)
def test_what_the_plugin_would_refuse_the_model_refuses(
    queues: list[str] | str, flavour: BrokerFlavour, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        InMemoryBroker(flavour=flavour, tenant_routed_queues=queues)


class Recorder(TenantProcessor):
    queues = (QUEUE,)
    json_body = False

    def __init__(self) -> None:
        self.seen: list[object] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append(message.body)


def test_a_runner_reads_its_tenant_and_its_router_only_quarantines(
    classic: InMemoryBroker, store: ErrorStore
) -> None:
    for n in range(20):
        classic.put(QUEUE, message("org-heavy", f"h{n}"))
    for n in range(5):
        classic.put(QUEUE, message("org-light", f"l{n}"))
    classic.put(QUEUE, message(None, "no tenant"))
    processor = Recorder()
    transport = InMemoryTransport(classic)
    runner = ProcessorRunner(processor, transport, [TenantId("org-light")], error_store=store)
    runner.start()
    try:
        assert wait_until(lambda: len(processor.seen) == 5)
        router = runner.router
        assert router is not None
        assert wait_until(lambda: router.quarantined == 1)
        assert dict(router.routed) == {}  # the broker routed every tenant
    finally:
        runner.stop(grace_s=5.0)
    assert processor.seen == [f"l{n}" for n in range(5)]
    assert bodies(classic, quarantine_queue(QUEUE)) == ["no tenant"]
    assert len(bodies(classic, f"tenant.org-heavy.{QUEUE}")) == 20


def test_every_queue_routes_queues_nobody_listed_and_leaves_the_shared_ones() -> None:
    """The model of queues="*" (the decisions test_classic_plugin.py compares with the plugin)."""
    broker = InMemoryBroker(tenant_routed_queues=["*"], tenant_shared_queues=["evt.s", "old.*"])
    try:
        transport = InMemoryTransport(broker)
        transport.connect()
        for queue in ("cmd.any", "evt.s", "old.orders", "DLQ.cmd.any"):
            transport.send(queue, message("org-a", queue))
        assert bodies(broker, "tenant.org-a.cmd.any") == ["cmd.any"]
        assert bodies(broker, "cmd.any") == []
        for queue in ("evt.s", "old.orders", "DLQ.cmd.any"):
            assert bodies(broker, queue) == [queue]
        transport.close()
    finally:
        broker.close()
    with pytest.raises(ConfigError, match="both routed and shared"):
        InMemoryBroker(tenant_routed_queues=["cmd.a"], tenant_shared_queues=["cmd.a"])
