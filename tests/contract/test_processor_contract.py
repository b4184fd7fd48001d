"""TenantProcessor behaviour on every transport: isolation, retries to the cap, dead letters,
quarantine and output propagation, each failure recorded in the error store.

On shared queues (the Java services' topology, where selectors keep tenants apart); the routed and
per-tenant topologies' own contract is test_routing_contract.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.routing import Topology
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.transports.base import Delivery
from tests.conftest import Inbox, TransportFactory, recorded, unique_queue, wait_until
from tests.contract.conftest import lose_connection_now, needs_selectors

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_ms=50, max_delay_ms=200)
SHARED = Routing(Topology.SHARED)


class Recorder(TenantProcessor):
    """Records what it handles; fails as the body says."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.seen: list[tuple[str, Any, int]] = []
        self._lock = threading.Lock()

    crash: Any = None
    """Called by mode "crash": loses the runner's connection, as a worker dying would."""

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append((ctx.tenant.value, message.data, ctx.attempt))
        mode = message.data.get("mode")
        if mode == "crash" or (mode == "crash-then-fail" and ctx.attempt == 1):
            self.crash()
            return  # its ack is stale: the broker has the message back
        if mode == "crash-then-fail":
            raise RuntimeError("fails after the crash")
        if mode == "fail":
            raise RuntimeError("always fails")
        if mode == "permanent":
            raise PermanentError("document not found")
        if mode == "publish":
            ctx.publish(self.queues[0] + ".out", {"result": message.data["n"]})

    def count(self) -> int:
        with self._lock:
            return len(self.seen)


def start_runner(
    factory: TransportFactory, processor: TenantProcessor, tenants: list[str], store: ErrorStore
) -> ProcessorRunner:
    runner = ProcessorRunner(
        processor,
        factory(),
        tenants,
        error_store=store,
        settings=RunnerSettings(workers=3, prefetch=5, dispatch=DispatchSettings(retry=FAST_RETRY)),
        routing=SHARED,
    )
    runner.start()
    return runner


def collect(factory: TransportFactory, queue: str, tenant: str | None = None) -> Inbox:
    inbox = Inbox()
    selector = tenant_selector(tenant) if tenant else None
    factory().subscribe(queue, selector=selector, prefetch=100, on_delivery=inbox)
    return inbox


def test_three_tenants_on_one_queue_each_see_only_their_own(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    processors = {t: Recorder(queue) for t in ("org-A", "org-B", "org-C")}
    runners = [start_runner(transport_factory, p, [t], store) for t, p in processors.items()]
    producer = TenantProducer(transport_factory(), routing=SHARED)
    for index in range(12):
        producer.send(queue, ("org-A", "org-B", "org-C")[index % 3], {"n": index})
    assert wait_until(lambda: sum(p.count() for p in processors.values()) == 12)
    for tenant, processor in processors.items():
        assert processor.count() == 4
        assert {seen[0] for seen in processor.seen} == {tenant}
        assert {seen[1]["tenantUUID"] for seen in processor.seen} == {tenant}
    for runner in runners:
        assert runner.stop(grace_s=5)


def test_always_failing_handler_reaches_dlq_after_exactly_the_cap(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, ["org-A"], store)
    dlq = collect(transport_factory, dead_letter_queue(queue), "org-A")
    sent = TenantProducer(transport_factory(), routing=SHARED).send(
        queue, "org-A", {"mode": "fail"}
    )
    assert wait_until(lambda: len(dlq) == 1, timeout=15)
    runner.stop(grace_s=5)
    assert [seen[2] for seen in processor.seen] == [1, 2, 3]
    dead = dlq.items[0]
    assert dead.properties["tenantUUID"] == "org-A"
    assert dead.properties["boostMessageId"] == sent.message_id
    assert dead.properties["boostOriginalQueue"] == queue
    assert dead.properties["boostAttempt"] == "3"
    assert dead.properties["boostDeadLetterReason"] == "exhausted"
    assert "always fails" in dead.properties["boostError"]
    records = recorded(store, 3, tenant=TenantId("org-A"), message_id=sent.message_id)
    assert [(r.attempt, r.outcome) for r in records] == [
        (1, FailureOutcome.RETRY),
        (2, FailureOutcome.RETRY),
        (3, FailureOutcome.DEAD_LETTER),
    ]
    assert all(r.queue == queue and r.error_type == "RuntimeError" for r in records)


@pytest.mark.parametrize(
    ("mode", "error", "last_attempt"),
    [
        # The fourth delivery is past the cap: dead-lettered without calling the handler.
        ("crash", "ended without an outcome", "4"),
        ("crash-then-fail", "fails after the crash", "3"),
    ],
    ids=["always", "once-then-fails"],
)
def test_a_message_that_kills_its_worker_is_counted_and_dead_lettered_after_the_cap(
    transport_factory: TransportFactory,
    store: ErrorStore,
    mode: str,
    error: str,
    last_attempt: str,
) -> None:
    """A delivery that ends with the connection lost mid-handler has no outcome. A broker that
    counts deliveries lets the runner count it: after the cap the message is dead-lettered
    without calling the handler again. Over STOMP there is no count: such a message comes back
    for ever (docs/resilience.md), so the test needs the capability.

    once-then-fails: the first delivery crashes, the second fails and is retried; the retry's
    copy carries the attempt after the second, crash included, so the handler sees 1, 2, 3 (not
    1, 2, 2, 3, the broker's count lost with the original)."""
    needs_selectors(transport_factory)
    if not transport_factory().capabilities.native_delivery_count:
        pytest.skip("the broker counts no deliveries (native_delivery_count): docs/resilience.md")
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    runner_transport = transport_factory()
    processor.crash = lambda: lose_connection_now(runner_transport)
    runner = ProcessorRunner(
        processor,
        runner_transport,
        ["org-A"],
        error_store=store,
        settings=RunnerSettings(workers=1, prefetch=1, dispatch=DispatchSettings(retry=FAST_RETRY)),
        routing=SHARED,
    )
    runner.start()
    dlq = collect(transport_factory, dead_letter_queue(queue), "org-A")
    sent = TenantProducer(transport_factory(), routing=SHARED).send(queue, "org-A", {"mode": mode})
    assert wait_until(lambda: len(dlq) == 1, timeout=20)
    runner.stop(grace_s=5)
    assert [seen[2] for seen in processor.seen] == [1, 2, 3]
    dead = dlq.items[0]
    assert dead.properties["boostMessageId"] == sent.message_id
    assert dead.properties["boostAttempt"] == last_attempt
    assert dead.properties["boostDeadLetterReason"] == "exhausted"
    assert error in dead.properties["boostError"]


def test_permanent_error_is_dead_lettered_at_once(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, ["org-A"], store)
    dlq = collect(transport_factory, dead_letter_queue(queue), "org-A")
    TenantProducer(transport_factory(), routing=SHARED).send(queue, "org-A", {"mode": "permanent"})
    assert wait_until(lambda: len(dlq) == 1)
    runner.stop(grace_s=5)
    assert processor.count() == 1
    assert dlq.items[0].properties["boostDeadLetterReason"] == "permanent"
    records = recorded(store, 1, tenant=TenantId("org-A"))
    assert [(r.attempt, r.outcome, r.error_type) for r in records] == [
        (1, FailureOutcome.DEAD_LETTER, "boost_tenancy.errors.PermanentError")
    ]


def test_undecodable_body_is_dead_lettered_without_calling_the_handler(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, ["org-A"], store)
    dlq = collect(transport_factory, dead_letter_queue(queue), "org-A")
    TenantProducer(transport_factory(), routing=SHARED).send(queue, "org-A", "{not json")
    assert wait_until(lambda: len(dlq) == 1)
    runner.stop(grace_s=5)
    assert processor.count() == 0
    assert dlq.items[0].properties["boostDeadLetterReason"] == "undecodable"
    assert dlq.items[0].body == "{not json"


def test_published_output_carries_tenant_correlation_and_a_stable_derived_id(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, ["org-B"], store)
    out = collect(transport_factory, queue + ".out")
    sent = TenantProducer(transport_factory(), routing=SHARED).send(
        queue, "org-B", {"mode": "publish", "n": 7}, correlation_id="corr-7"
    )
    assert wait_until(lambda: len(out) == 1)
    runner.stop(grace_s=5)
    result = out.items[0]
    assert result.properties["tenantUUID"] == "org-B"
    assert result.correlation_id == "corr-7"
    assert '"tenantUUID":"org-B"' in str(result.body)
    assert result.properties["boostMessageId"] != sent.message_id
    from boost_tenancy.header_values import derived_id

    assert result.properties["boostMessageId"] == derived_id(sent.message_id, queue + ".out", 0)


def test_body_naming_another_tenant_is_quarantined_not_handled(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    needs_selectors(transport_factory)
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    runner = start_runner(transport_factory, processor, ["org-A"], store)
    quarantine = collect(transport_factory, quarantine_queue(queue))
    raw = transport_factory()
    raw.send(
        queue,
        WireMessage(
            body='{"organizationId": "org-B"}',
            properties={"tenantUUID": "org-A", "boostMessageId": "m-x"},
        ),
    )
    assert wait_until(lambda: len(quarantine) == 1)
    runner.stop(grace_s=5)
    assert processor.count() == 0
    assert quarantine.items[0].properties["boostDeadLetterReason"] == "tenancy-violation"
    records = recorded(store, 1, tenant=TenantId("org-A"), outcome=FailureOutcome.QUARANTINE)
    assert len(records) == 1


def test_delivery_of_another_tenant_never_reaches_the_handler(
    transport_factory: TransportFactory, store: ErrorStore
) -> None:
    """Defence in depth: even if the broker delivered a foreign message, the dispatcher stops it."""
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    transport = transport_factory()
    dispatcher = Dispatcher(processor, transport, store)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    quarantine = collect(transport_factory, quarantine_queue(queue))
    sender = transport_factory()
    sender.send(queue, WireMessage(body="{}", properties={"tenantUUID": "org-B"}))
    sender.send(queue, WireMessage(body="{}", properties={}))
    assert wait_until(lambda: len(inbox) == 2)
    outcomes = [dispatcher.dispatch(TenantId("org-A"), d) for d in list(inbox.items)]
    assert outcomes == ["quarantined", "quarantined"]
    assert processor.count() == 0
    assert wait_until(lambda: len(quarantine) == 2)
    records = recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)
    assert [r.raw_tenant for r in records] == [None]
    foreign = recorded(store, 1, tenant=TenantId("org-B"), outcome=FailureOutcome.QUARANTINE)
    assert [r.raw_tenant for r in foreign] == ["org-B"]


def test_stale_delivery_is_skipped(transport_factory: TransportFactory, store: ErrorStore) -> None:
    queue = unique_queue("cmd")
    processor = Recorder(queue)
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    transport_factory().send(queue, WireMessage(body="{}", properties={"tenantUUID": "org-A"}))
    assert wait_until(lambda: len(inbox) == 1)
    delivery: Delivery = inbox.items[0]
    transport.close()
    assert Dispatcher(processor, transport, store).dispatch(TenantId("org-A"), delivery) == "stale"
    assert processor.count() == 0
