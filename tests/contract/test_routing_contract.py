"""Routing topologies and parking on every transport: per-tenant queues with the same processor
code, mixed overrides, the router that empties a routed shared queue into the tenants' queues
(raw sends, as the Java services make them), the exclusion selector, the parking sweeper and the
parked re-drive."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.dead_letters import DeadLetterAdmin
from boost_tenancy.ops.parking import ParkingSweeper
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.routing import DEFAULT_ROUTING, PARKED_QUEUE_PREFIX, Topology, parked_queue
from boost_tenancy.selectors import TenantExclusion, tenant_selector
from boost_tenancy.transports.base import queue_lister
from tests.conftest import Inbox, TransportFactory, recorded, unique_queue, wait_until
from tests.contract.conftest import needs_selectors

FAST_RETRY = RetryPolicy(max_attempts=2, base_delay_ms=50, max_delay_ms=100)
PER_TENANT = Routing(Topology.PER_TENANT)
SHARED = Routing(Topology.SHARED)


def new_tenant(name: str) -> str:
    """A tenant no other run uses: the real broker keeps queues between runs."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


class Recorder(TenantProcessor):
    """Records what it handles, as the handler sees it; publishes or fails as the body says."""

    def __init__(self, *queues: str) -> None:
        self.queues = queues
        self.seen: list[tuple[str, str, str, Any]] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append((ctx.tenant.value, message.queue, ctx.queue, message.data))
        mode = message.data.get("mode")
        if mode == "publish":
            ctx.publish(message.data["to"], {"result": message.data["n"]})
        if mode == "fail":
            raise RuntimeError("always fails")

    def count(self) -> int:
        with self._lock:
            return len(self.seen)


def start_runner(
    factory: TransportFactory,
    processor: TenantProcessor,
    tenants: list[str],
    store: ErrorStore,
    *,
    routing: Routing = DEFAULT_ROUTING,
    **options: Any,
) -> ProcessorRunner:
    runner = ProcessorRunner(
        processor,
        factory(),
        tenants,
        error_store=store,
        settings=RunnerSettings(
            workers=3, prefetch=20, dispatch=DispatchSettings(retry=FAST_RETRY)
        ),
        routing=routing,
        **options,
    )
    runner.start()
    return runner


def collect(factory: TransportFactory, queue: str, tenant: str | None = None) -> Inbox:
    inbox = Inbox()
    transport = factory()
    # On a broker without selectors, the per-tenant queues these read hold one tenant anyway.
    selector = transport.capabilities.guard_selector(tenant_selector(tenant)) if tenant else None
    transport.subscribe(queue, selector=selector, prefetch=500, on_delivery=inbox)
    return inbox


# -- per-tenant queues ----------------------------------------------------------------------------
def test_per_tenant_producer_runner_handler_and_publish(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    queue, out = unique_queue("cmd"), unique_queue("evt")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, [a, b], store, routing=PER_TENANT)
    on_shared = collect(transport_factory, queue)
    out_a = collect(transport_factory, f"tenant.{a}.{out}")
    producer = TenantProducer(transport_factory(), routing=PER_TENANT)
    for n in range(3):
        producer.send(queue, a, {"mode": "publish", "to": out, "n": n})
    with producer.batch() as batch:
        batch.send(queue, b, {"n": 99})
    assert wait_until(lambda: processor.count() == 4 and len(out_a) == 3)
    assert runner.stop(grace_s=5)
    # The handler sees the logical queue: service code does not change with the topology.
    assert {(seen[1], seen[2]) for seen in processor.seen} == {(queue, queue)}
    assert sorted(seen[0] for seen in processor.seen) == sorted([a, a, a, b])
    assert {d.queue for d in out_a.items} == {f"tenant.{a}.{out}"}
    assert {d.properties["tenantUUID"] for d in out_a.items} == {a}
    assert len(on_shared) == 0


def test_per_tenant_queue_still_checks_the_tenant_of_every_message(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    """Defence in depth: messages naming B placed on A's own queue never reach A's handler."""
    queue = unique_queue("cmd")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    physical = PER_TENANT.physical(queue, a)
    processor = Recorder(queue)
    quarantine = collect(transport_factory, quarantine_queue(physical))
    raw = transport_factory()
    # The property says B: A's runner takes everything on A's own queue, and its tenant guard
    # quarantines it (a selector would have left it there for good, counted nowhere).
    raw.send(physical, WireMessage(body="{}", properties={"tenantUUID": b}))
    # The property says A, the body says B: the runner's check quarantines it.
    body = json.dumps({"organizationId": b})
    raw.send(physical, WireMessage(body=body, properties={"tenantUUID": a}))
    # No tenant at all: quarantined too.
    raw.send(physical, WireMessage(body="{}", properties={}))
    runner = start_runner(transport_factory, processor, [a], store, routing=PER_TENANT)
    assert wait_until(lambda: len(quarantine) == 3)
    time.sleep(0.5)
    runner.stop(grace_s=5)
    assert processor.count() == 0
    assert {d.properties["boostOriginalQueue"] for d in quarantine.items} == {physical}
    assert {d.properties["boostDeadLetterReason"] for d in quarantine.items} == {
        "tenancy-violation"
    }
    records = recorded(store, 1, tenant=TenantId(a), outcome=FailureOutcome.QUARANTINE)
    assert [r.queue for r in records] == [queue]  # the error store keeps the logical queue
    assert recorded(store, 1, tenant=TenantId(b), outcome=FailureOutcome.QUARANTINE)
    assert recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)


def test_foreign_delivery_on_a_per_tenant_queue_is_quarantined_by_the_dispatcher(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    """Even if the broker delivered B's message to A's subscription, the dispatcher stops it."""
    queue = unique_queue("cmd")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    physical = PER_TENANT.physical(queue, a)
    processor = Recorder(queue)
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(physical, selector=None, prefetch=5, on_delivery=inbox)
    quarantine = collect(transport_factory, quarantine_queue(physical))
    transport_factory().send(physical, WireMessage(body="{}", properties={"tenantUUID": b}))
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(processor, transport, store, routing=PER_TENANT)
    assert dispatcher.dispatch(TenantId(a), inbox.items[0]) == "quarantined"
    assert wait_until(lambda: len(quarantine) == 1)
    assert processor.count() == 0
    assert quarantine.items[0].properties["tenantUUID"] == b
    (record,) = recorded(store, 1, tenant=TenantId(b), outcome=FailureOutcome.QUARANTINE)
    assert record.queue == queue


def test_mixed_overrides_one_queue_per_tenant_one_shared(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    x, y = unique_queue("cmd"), unique_queue("cmd")
    routing = Routing(Topology.SHARED, overrides={x: Topology.PER_TENANT})
    a = new_tenant("org-A")
    processor = Recorder(x, y)
    runner = start_runner(transport_factory, processor, [a], store, routing=routing)
    producer = TenantProducer(transport_factory(), routing=routing)
    producer.send(x, a, {"n": 1})
    producer.send(y, a, {"n": 2})
    # Outputs follow the same routing: y -> x lands on A's own queue of x and is handled there.
    producer.send(y, a, {"mode": "publish", "to": x, "n": 3})
    assert wait_until(lambda: processor.count() == 4)
    runner.stop(grace_s=5)
    handled = [(seen[1], seen[3].get("n", seen[3].get("result"))) for seen in processor.seen]
    assert sorted(handled) == sorted([(x, 1), (x, 3), (y, 2), (y, 3)])


# -- dead letters on per-tenant queues ------------------------------------------------------------
def test_retries_and_dead_letters_stay_on_the_tenants_own_queues(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, [a, b], store, routing=PER_TENANT)
    producer = TenantProducer(transport_factory(), routing=PER_TENANT)
    failed_a = [producer.send(queue, a, {"mode": "fail", "n": n}).message_id for n in range(2)]
    failed_b = producer.send(queue, b, {"mode": "fail", "n": 9}).message_id
    dlq_a = f"DLQ.tenant.{a}.{queue}"
    admin = DeadLetterAdmin(transport_factory(), store, routing=PER_TENANT)
    assert wait_until(lambda: processor.count() == 6, timeout=15)
    runner.stop(grace_s=5)
    assert dead_letter_queue(PER_TENANT.physical(queue, a)) == dlq_a

    views = admin.list(a, queue, idle_s=1.0)
    assert sorted(v.message_id for v in views) == sorted(failed_a)
    assert {v.original_queue for v in views} == {f"tenant.{a}.{queue}"}
    assert [v.message_id for v in admin.list(b, queue, idle_s=1.0)] == [failed_b]

    back = collect(transport_factory, f"tenant.{a}.{queue}", a)
    assert sorted(admin.redrive(a, queue, idle_s=1.0)) == sorted(failed_a)
    assert wait_until(lambda: len(back) == 2)
    assert {d.properties["boostAttempt"] for d in back.items} == {"1"}
    assert admin.list(a, queue, idle_s=0.5) == []
    redrives = store.failures(tenant=TenantId(a), outcome=FailureOutcome.REDRIVE)
    assert {r.queue for r in redrives} == {queue}
    assert [v.message_id for v in admin.list(b, queue, idle_s=1.0)] == [failed_b]


# -- the exclusion selector and parking -----------------------------------------------------------
def test_exclusion_selector_on_the_transport(transport_factory: TransportFactory) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue()
    a, b = new_tenant("org-A"), new_tenant("org-B")
    receiver, sender = transport_factory(), transport_factory()
    inbox = Inbox()
    receiver.subscribe(
        queue, selector=TenantExclusion((TenantId(a),)), prefetch=50, on_delivery=inbox
    )
    sender.send(queue, WireMessage(body="a", properties={"tenantUUID": a}))
    sender.send(queue, WireMessage(body="b", properties={"tenantUUID": b}))
    sender.send(queue, WireMessage(body="none", properties={}))
    sender.send(queue, WireMessage(body="quote", properties={"tenantUUID": "x' OR '1'='1"}))
    assert wait_until(lambda: len(inbox) == 3)
    assert sorted(str(body) for body in inbox.bodies()) == ["b", "none", "quote"]


def test_sweeper_parks_inactive_tenants_and_a_later_runner_redrives_its_backlog(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    a, b, c = new_tenant("org-A"), new_tenant("org-B"), new_tenant("org-C")
    per_tenant = 15
    processor_a = Recorder(queue)
    runner_a = start_runner(transport_factory, processor_a, [a], store, routing=SHARED)
    sweeper = ParkingSweeper(transport_factory(), [queue], [a], error_store=store)
    sweeper.start()
    producer = TenantProducer(transport_factory(), routing=SHARED)
    with producer.batch() as batch:
        for n in range(per_tenant):
            for tenant in (a, b, c):
                batch.send(queue, tenant, {"n": n})
    transport_factory().send(queue, WireMessage(body="{}", properties={"boostMessageId": "m-no"}))
    assert wait_until(
        lambda: (
            sweeper.parked == {TenantId(b): per_tenant, TenantId(c): per_tenant}
            and sweeper.quarantined == 1
            and processor_a.count() == per_tenant
        ),
        timeout=20,
    )
    sweeper.stop()
    assert {seen[0] for seen in processor_a.seen} == {a}
    (quarantined,) = recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)
    assert quarantined.message_id == "m-no"
    assert quarantined.queue == queue

    # B's processor starts later: its parked backlog comes back and is handled, all of it.
    processor_b = Recorder(queue)
    runner_b = start_runner(transport_factory, processor_b, [b], store, routing=SHARED)
    assert runner_b.wait_parked_redriven(timeout=30)
    assert wait_until(lambda: processor_b.count() == per_tenant, timeout=20)
    assert sorted(seen[3]["n"] for seen in processor_b.seen) == list(range(per_tenant))
    assert {(seen[0], seen[1]) for seen in processor_b.seen} == {(b, queue)}
    runner_b.stop(grace_s=5)
    runner_a.stop(grace_s=5)
    # C has no processor: its messages are still parked, B's parked queue is empty.
    parked_c = collect(transport_factory, parked_queue(queue, c), c)
    parked_b = collect(transport_factory, parked_queue(queue, b), b)
    assert wait_until(lambda: len(parked_c) == per_tenant)
    assert len(parked_b) == 0
    assert {d.properties["tenantUUID"] for d in parked_c.items} == {c}


# -- routed: the shared queue emptied into the tenants' own queues ---------------------------------
class Outcomes:
    """A dispatch observer (what accounting is): the outcomes it was told of."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str, str]] = []
        self._lock = threading.Lock()

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        with self._lock:
            self.seen.append((None if tenant is None else tenant.value, queue, outcome))


INVALID_TENANT = "x' OR '1'='1"


def raw_send(factory: TransportFactory, queue: str, body: object, **properties: str) -> None:
    """A send to the shared queue as a Java service makes it: the transport, no TenantProducer."""
    message = WireMessage(body=json.dumps(body), properties=properties, correlation_id="c-raw")
    factory().send(queue, message)


def test_a_runner_makes_no_parked_queue_for_tenants_with_nothing_parked(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    """Subscribing makes a queue that is not there: a runner re-driving every tenant's parked
    queue made one per tenant and queue at each start (Artemis journals each, Classic keeps
    them). Where the broker lists its queues, the re-drive asks which hold messages first."""
    probe = transport_factory()
    if not probe.capabilities.queue_listing:
        pytest.skip("the broker lists no queues: the re-drive subscribes to every parked queue")
    queue = unique_queue("cmd")
    tenants = [new_tenant(f"org-{n}") for n in range(3)]

    def parked_here() -> list[str]:
        listed = queue_lister(probe).list_queues([PARKED_QUEUE_PREFIX])
        return [q.name for q in listed if q.name.endswith("." + queue)]

    runner = start_runner(transport_factory, Recorder(queue), tenants, store)
    try:
        assert parked_here() == []
        assert runner.wait_parked_redriven(timeout=30)
        assert parked_here() == []
    finally:
        runner.stop(grace_s=5)


def test_raw_sends_to_the_shared_queue_are_stored_per_tenant_and_tenantless_ones_quarantined(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    per_tenant = 5
    processor, outcomes = Recorder(queue), Outcomes()
    # Only A has a processor: B's messages must not wait in front of A's, nor be lost.
    runner = start_runner(transport_factory, processor, [a], store, observers=[outcomes])
    for n in range(per_tenant):
        raw_send(transport_factory, queue, {"n": n}, tenantUUID=b, appProperty=f"b-{n}")
        raw_send(transport_factory, queue, {"n": n}, tenantUUID=a)
    raw_send(transport_factory, queue, {"n": "none"}, boostMessageId="m-none")
    raw_send(transport_factory, queue, {"n": "bad"}, tenantUUID=INVALID_TENANT)
    router = runner.router
    assert router is not None
    # Where the broker routes at send time (Artemis), A's messages never reach the router.
    routed = {TenantId(b): per_tenant}
    if runner.send_routes_added is None:
        routed[TenantId(a)] = per_tenant
    assert wait_until(
        lambda: (
            processor.count() == per_tenant and router.routed == routed and router.quarantined == 2
        ),
        timeout=20,
    )
    runner.stop(grace_s=5)
    assert router.defaulted == 0
    # A's handler saw A's messages only, under the logical queue, whatever queue held them.
    assert sorted(seen[3]["n"] for seen in processor.seen) == list(range(per_tenant))
    assert {(seen[0], seen[1], seen[2]) for seen in processor.seen} == {(a, queue, queue)}

    # B has no processor: its messages wait, unchanged, in B's own queue.
    stored_b = collect(transport_factory, f"tenant.{b}.{queue}", b)
    assert wait_until(lambda: len(stored_b) == per_tenant)
    assert sorted(json.loads(str(d.body))["n"] for d in stored_b.items) == list(range(per_tenant))
    assert {d.properties["tenantUUID"] for d in stored_b.items} == {b}
    assert sorted(d.properties["appProperty"] for d in stored_b.items) == [
        f"b-{n}" for n in range(per_tenant)
    ]
    assert {d.correlation_id for d in stored_b.items} == {"c-raw"}

    # Missing and invalid tenants: quarantined, recorded and counted, never routed.
    quarantine = collect(transport_factory, quarantine_queue(queue))
    assert wait_until(lambda: len(quarantine) == 2)
    assert {d.properties["boostDeadLetterReason"] for d in quarantine.items} == {
        "tenancy-violation"
    }
    assert {d.properties["boostOriginalQueue"] for d in quarantine.items} == {queue}
    records = recorded(store, 2, tenant=None, outcome=FailureOutcome.QUARANTINE)
    assert sorted(str(r.raw_tenant) for r in records) == sorted(["None", INVALID_TENANT])
    assert {r.queue for r in records} == {queue}
    assert "m-none" in {r.message_id for r in records}
    assert [o for o in outcomes.seen if o[2] == "quarantined"] == [(None, queue, "quarantined")] * 2

    # Nothing is left on the shared queue.
    shared = collect(transport_factory, queue)
    time.sleep(0.5)
    assert len(shared) == 0


def test_a_default_tenant_takes_messages_without_a_tenant_but_never_an_invalid_one(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    legacy, other = new_tenant("default"), new_tenant("org-O")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, [legacy], store, default_tenant=legacy)
    raw_send(transport_factory, queue, {"n": "legacy"})
    raw_send(transport_factory, queue, {"n": "bad"}, tenantUUID=INVALID_TENANT)
    raw_send(transport_factory, queue, {"n": "other"}, tenantUUID=other)
    router = runner.router
    assert router is not None
    assert router.default_tenant == TenantId(legacy)
    assert wait_until(
        lambda: (
            processor.count() == 1
            and router.routed == {TenantId(legacy): 1, TenantId(other): 1}
            and router.quarantined == 1
        ),
        timeout=20,
    )
    runner.stop(grace_s=5)
    assert router.defaulted == 1
    # The message without a tenant is the default tenant's, handled as such.
    assert [(seen[0], seen[3]["n"]) for seen in processor.seen] == [(legacy, "legacy")]
    (record,) = recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)
    assert record.raw_tenant == INVALID_TENANT
    stored_other = collect(transport_factory, f"tenant.{other}.{queue}", other)
    assert wait_until(lambda: len(stored_other) == 1)


def test_runners_of_one_queue_compete_and_route_each_message_once(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    count = 30
    first, second = Recorder(queue), Recorder(queue)
    # The routers themselves: no diverts (Artemis would store every message apart at send time).
    runners = [
        start_runner(transport_factory, first, [a], store, route_at_send=False),
        start_runner(transport_factory, second, [b], store, route_at_send=False),
    ]
    for n in range(count):
        raw_send(transport_factory, queue, {"n": n}, tenantUUID=a if n % 2 else b)
    assert wait_until(lambda: first.count() + second.count() == count, timeout=20)
    for runner in runners:
        runner.stop(grace_s=5)
    assert sorted(seen[3]["n"] for seen in first.seen) == list(range(1, count, 2))
    assert sorted(seen[3]["n"] for seen in second.seen) == list(range(0, count, 2))
    routed = [r.router.routed for r in runners if r.router is not None]
    assert sum(sum(counts.values()) for counts in routed) == count


def test_a_runner_told_not_to_route_leaves_the_shared_queue_alone(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    a = new_tenant("org-A")
    processor = Recorder(queue)
    runner = start_runner(
        transport_factory, processor, [a], store, route_shared=False, route_at_send=False
    )
    assert runner.router is None
    producer = TenantProducer(transport_factory())
    producer.send(queue, a, {"n": "direct"})  # a toolkit producer skips the router anyway
    raw_send(transport_factory, queue, {"n": "raw"}, tenantUUID=a)
    assert wait_until(lambda: processor.count() == 1)
    runner.stop(grace_s=5)
    shared = collect(transport_factory, queue)
    assert wait_until(lambda: len(shared) == 1)
    assert [seen[3]["n"] for seen in processor.seen] == ["direct"]


def test_where_the_broker_routes_at_send_a_runners_tenants_need_no_router(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    """Artemis: the runner's exclusive diverts store its tenants' messages sent to the shared
    queue in their own queues; what no divert matches stays on the shared queue."""
    if not transport_factory().capabilities.send_time_routes:
        pytest.skip("the broker takes no routes at run time (send_time_routes)")
    queue = unique_queue("cmd")
    a, b = new_tenant("org-A"), new_tenant("org-B")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, [a, b], store, route_shared=False)
    try:
        assert runner.send_routes_added == 2
        for n in range(3):
            raw_send(transport_factory, queue, {"n": n}, tenantUUID=a)
            raw_send(transport_factory, queue, {"n": n}, tenantUUID=b)
        raw_send(transport_factory, queue, {"n": "other"}, tenantUUID=new_tenant("org-C"))
        assert wait_until(lambda: processor.count() == 6, timeout=20)
    finally:
        runner.stop(grace_s=5)
    # In the order sent, each tenant under the logical queue; no router ran.
    for tenant in (a, b):
        assert [seen[3]["n"] for seen in processor.seen if seen[0] == tenant] == [0, 1, 2]
    assert {seen[1] for seen in processor.seen} == {queue}
    shared = collect(transport_factory, queue)
    assert wait_until(lambda: len(shared) == 1)
    assert json.loads(str(shared.items[0].body)) == {"n": "other"}
    # Started again, the runner finds its routes in place.
    again = start_runner(transport_factory, Recorder(queue), [a, b], store, route_shared=False)
    try:
        assert again.send_routes_added == 0
    finally:
        again.stop(grace_s=5)
