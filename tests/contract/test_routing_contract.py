"""Routing topologies and parking on both transports: per-tenant queues with the same processor
code, mixed overrides, the exclusion selector, the parking sweeper and the parked re-drive."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
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
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Topology, parked_queue
from boost_tenancy.selectors import TenantExclusion, tenant_selector
from tests.conftest import Inbox, TransportFactory, recorded, unique_queue, wait_until
from tests.contract.conftest import needs_selectors

FAST_RETRY = RetryPolicy(max_attempts=2, base_delay_ms=50, max_delay_ms=100)
PER_TENANT = Routing(Topology.PER_TENANT)


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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ErrorStore]:
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()


def start_runner(
    factory: TransportFactory,
    processor: TenantProcessor,
    tenants: list[str],
    store: ErrorStore,
    *,
    routing: Routing = DEFAULT_ROUTING,
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
    routing = Routing(overrides={x: Topology.PER_TENANT})
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
    runner_a = start_runner(transport_factory, processor_a, [a], store)
    sweeper = ParkingSweeper(transport_factory(), [queue], [a], error_store=store)
    sweeper.start()
    producer = TenantProducer(transport_factory())
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
    runner_b = start_runner(transport_factory, processor_b, [b], store)
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
