"""FairnessGate: a tenant over its limits is held, in order and unacknowledged, never re-sent;
exemptions, failing open and the hold time; and on the in-memory transport with a
ProcessorRunner, tier concurrency and rate limits that hold messages without one broker write."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from structlog.testing import capture_logs

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.fairness import (
    FairnessGate,
    InMemoryConcurrencyLimiter,
    RatePolicy,
    Tier,
    TierLimits,
    TierResolver,
    TokenBucketLimiter,
)
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery
from tests.conftest import WriteCount, count_writes, unique_queue, wait_until
from tests.fairness_support import Admissions, Events

FREE = TenantId("org-free")
ENTERPRISE = TenantId("org-enterprise")
SYSTEM = TenantId("org-system")
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_ms=10, max_delay_ms=10, jitter=0.0)


class DictTierStore:
    def __init__(self, tiers: dict[TenantId, Tier]) -> None:
        self.tiers = tiers

    def get(self, tenant: TenantId) -> Tier | None:
        return self.tiers.get(tenant)

    def set(self, tenant: TenantId, tier: Tier) -> None:
        self.tiers[tenant] = tier

    def close(self) -> None:
        pass


def warm_resolver(tiers: dict[TenantId, Tier]) -> TierResolver:
    """A resolver that already knows the tiers (the first lookup runs in the background)."""
    resolver = TierResolver(DictTierStore(tiers))
    for tenant in tiers:
        resolver.tier_of(tenant)
    assert wait_until(lambda: all(resolver.tier_of(t) is tier for t, tier in tiers.items()))
    return resolver


# -- the gate alone -------------------------------------------------------------------------------
def delivery(n: int, queue: str = "cmd.test") -> Delivery:
    return Delivery(
        queue=queue,
        body="{}",
        properties={"boostMessageId": f"m-{n}"},
        correlation_id=None,
        redelivered=False,
        subscription_id="sub-1",
    )


def fixed_limit(limit: int) -> Callable[[TenantId], int]:
    return lambda _tenant: limit


@pytest.fixture
def started() -> Iterator[Callable[..., tuple[FairnessGate, Admissions]]]:
    gates: list[FairnessGate] = []

    def start(**kwargs: object) -> tuple[FairnessGate, Admissions]:
        kwargs.setdefault("concurrency", InMemoryConcurrencyLimiter())
        kwargs.setdefault("limit_of", fixed_limit(1))
        gate = FairnessGate(**kwargs)  # type: ignore[arg-type]
        admissions = Admissions()
        gate.start(admissions)
        gates.append(gate)
        return gate, admissions

    yield start
    for gate in gates:
        gate.close()


def test_a_tenant_at_its_limit_is_held_in_order_until_a_slot_comes_back(
    started: Callable[..., tuple[FairnessGate, Admissions]],
) -> None:
    events = Events()
    gate, admissions = started(on_event=events)
    for n in range(3):
        gate.offer(FREE, delivery(n))
    tenant, first = admissions.next()
    assert (tenant, first.delivery.properties["boostMessageId"]) == (FREE, "m-0")
    assert first.slot is not None and not first.expired
    assert admissions.none_within(0.3), "limit 1: the second waits for the first's slot"
    assert wait_until(lambda: events.of(FREE, "held_concurrency") == 1)
    gate.done(FREE, first.slot)
    _, second = admissions.next()
    assert second.delivery.properties["boostMessageId"] == "m-1"
    gate.done(FREE, second.slot)
    _, third = admissions.next()
    assert third.delivery.properties["boostMessageId"] == "m-2"
    assert events.of(FREE, "admitted") == 3
    assert events.of(FREE, "held_concurrency") == 2, "once per held delivery, not per poll"


def test_one_tenant_held_does_not_hold_another(
    started: Callable[..., tuple[FairnessGate, Admissions]],
) -> None:
    gate, admissions = started()
    gate.offer(FREE, delivery(0))
    gate.offer(FREE, delivery(1))
    gate.offer(ENTERPRISE, delivery(2))
    seen = {admissions.next()[0], admissions.next()[0]}
    assert seen == {FREE, ENTERPRISE}


def test_rate_holds_until_the_bucket_allows(
    started: Callable[..., tuple[FairnessGate, Admissions]],
) -> None:
    events = Events()
    gate, admissions = started(
        limit_of=fixed_limit(10),
        rates=TokenBucketLimiter(RatePolicy(rate_per_s=10, burst_s=0.2)),  # capacity 2
        on_event=events,
    )
    for n in range(3):
        gate.offer(ENTERPRISE, delivery(n))
    assert [admissions.next()[1].delivery.properties["boostMessageId"] for _ in range(2)] == [
        "m-0",
        "m-1",
    ]
    assert wait_until(lambda: events.of(ENTERPRISE, "held_rate") == 1)
    _, third = admissions.next()  # about 0.1 s later, when a token is back
    assert third.delivery.properties["boostMessageId"] == "m-2"


def test_exempt_tenants_and_queues_pass_without_limits(
    started: Callable[..., tuple[FairnessGate, Admissions]],
) -> None:
    gate, admissions = started(exempt_tenants={SYSTEM}, exempt_queues={"sys.jobs"})
    for n in range(3):
        gate.offer(SYSTEM, delivery(n))
    for n in range(3, 6):
        gate.offer(FREE, delivery(n, queue="sys.jobs"))
    got = [admissions.next()[1] for _ in range(6)]
    assert all(admitted.slot is None for admitted in got)


def test_limiter_failures_fail_open_with_one_warning(
    started: Callable[..., tuple[FairnessGate, Admissions]],
) -> None:
    class Broken:
        def try_acquire(self, tenant: TenantId, message_id: str, limit: int) -> bool:
            raise ConnectionError("redis is down")

        def release(self, tenant: TenantId, message_id: str) -> None:
            raise ConnectionError("redis is down")

    with capture_logs() as logs:
        gate, admissions = started(concurrency=Broken())
        for n in range(5):
            gate.offer(FREE, delivery(n))
        got = [admissions.next()[1] for _ in range(5)]
        for admitted in got:
            gate.done(FREE, admitted.slot)
        time.sleep(0.2)
    warnings = [e for e in logs if e["event"] == "fairness_concurrency_unavailable"]
    assert len(warnings) == 1


def test_a_delivery_held_past_the_hold_time_is_handed_on_expired(
    started: Callable[..., tuple[FairnessGate, Admissions]],
) -> None:
    events = Events()
    gate, admissions = started(hold_s=0.2, on_event=events)
    gate.offer(FREE, delivery(0))
    gate.offer(FREE, delivery(1))
    _, first = admissions.next()
    _, second = admissions.next(timeout=3)  # the first never gives its slot back
    assert second.expired and second.slot is None
    assert second.delivery.properties["boostMessageId"] == "m-1"
    assert events.of(FREE, "expired") == 1
    assert first.slot is not None


def test_defer_delay_is_the_defer_time_plus_jitter() -> None:
    gate = FairnessGate(
        concurrency=InMemoryConcurrencyLimiter(),
        limit_of=fixed_limit(1),
        defer_ms=100,
        jitter_ms=50,
        rand=lambda: 0.5,
    )
    assert gate.defer_delay_ms() == 125


# -- on a runner ----------------------------------------------------------------------------------
class SlowHandler(TenantProcessor):
    """Tracks handlers running at once per tenant, and every (message id, attempt) it ran."""

    def __init__(self, queue: str, work_s: float) -> None:
        self.queues = (queue,)
        self.work_s = work_s
        self._lock = threading.Lock()
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.ran: list[tuple[str, str, int, float]] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        tenant = ctx.tenant.value
        with self._lock:
            self.running[tenant] += 1
            self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
            self.ran.append((tenant, ctx.message_id, ctx.attempt, time.monotonic()))
        time.sleep(self.work_s)
        with self._lock:
            self.running[tenant] -= 1

    def ids(self, tenant: TenantId) -> list[str]:
        with self._lock:
            return [entry[1] for entry in self.ran if entry[0] == tenant.value]


def run(
    broker: InMemoryBroker,
    store: ErrorStore,
    processor: SlowHandler,
    tenants: list[TenantId],
    gate: FairnessGate,
    *,
    workers: int,
) -> tuple[ProcessorRunner, WriteCount]:
    transport = InMemoryTransport(broker)
    writes = count_writes(transport)
    runner = ProcessorRunner(
        processor,
        transport,
        tenants,
        error_store=store,
        settings=RunnerSettings(
            workers=workers, prefetch=20, dispatch=DispatchSettings(retry=FAST_RETRY)
        ),
        gate=gate,
    )
    runner.start()
    return runner, writes


def send(broker: InMemoryBroker, queue: str, tenant: TenantId, count: int) -> list[str]:
    sender = InMemoryTransport(broker)
    sender.connect()
    producer = TenantProducer(sender)
    return [producer.send(queue, tenant, {"n": index}).message_id for index in range(count)]


def tier_gate(tiers: dict[TenantId, Tier], events: Events, **kwargs: object) -> FairnessGate:
    resolver = warm_resolver(tiers)
    limits = TierLimits()
    return FairnessGate(
        concurrency=InMemoryConcurrencyLimiter(),
        limit_of=lambda tenant: limits.for_tier(resolver.tier_of(tenant)),
        tiers=resolver,
        on_event=events,
        **kwargs,  # type: ignore[arg-type]
    )


def test_free_tenant_runs_one_at_a_time_in_order_without_a_broker_write(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.05)
    events = Events()
    gate = tier_gate({FREE: Tier.FREE}, events)
    runner, writes = run(broker, store, processor, [FREE], gate, workers=6)
    try:
        sent = send(broker, queue, FREE, 20)
        assert wait_until(lambda: len(processor.ids(FREE)) == 20, timeout=20)
        time.sleep(0.3)  # nothing more arrives: no message ran twice
    finally:
        assert runner.stop(grace_s=5)
        gate.close()
    assert processor.peak[FREE.value] == 1
    assert processor.ids(FREE) == sent, "limit 1 keeps the order they were sent in"
    assert events.of(FREE, "admitted") == 20
    assert events.of(FREE, "held_concurrency") > 0
    assert writes.writes == 0, "held, not re-sent"
    assert {entry[2] for entry in processor.ran} == {1}
    assert store.failures(tenant=FREE) == []


def test_enterprise_tenant_runs_up_to_five_at_once_beside_a_free_one(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.3)
    events = Events()
    gate = tier_gate({ENTERPRISE: Tier.ENTERPRISE, FREE: Tier.FREE}, events)
    runner, writes = run(broker, store, processor, [ENTERPRISE, FREE], gate, workers=10)
    try:
        sent = send(broker, queue, ENTERPRISE, 12)
        sent_free = send(broker, queue, FREE, 3)
        assert wait_until(
            lambda: len(processor.ids(ENTERPRISE)) == 12 and len(processor.ids(FREE)) == 3,
            timeout=20,
        )
    finally:
        assert runner.stop(grace_s=5)
        gate.close()
    assert processor.peak[ENTERPRISE.value] == 5
    assert processor.peak[FREE.value] == 1
    assert sorted(processor.ids(ENTERPRISE)) == sorted(sent)
    assert processor.ids(FREE) == sent_free
    assert events.of(ENTERPRISE, "held_concurrency") > 0
    assert writes.writes == 0


def test_rate_limit_holds_over_rate_messages_and_all_run_without_a_broker_write(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.0)
    events = Events()
    gate = tier_gate(
        {ENTERPRISE: Tier.ENTERPRISE},
        events,
        rates=TokenBucketLimiter(RatePolicy(rate_per_s=10, burst_s=0.2)),  # capacity 2
    )
    runner, writes = run(broker, store, processor, [ENTERPRISE], gate, workers=4)
    try:
        sent = send(broker, queue, ENTERPRISE, 8)
        assert wait_until(lambda: len(processor.ids(ENTERPRISE)) == 8, timeout=20)
    finally:
        assert runner.stop(grace_s=5)
        gate.close()
    assert sorted(processor.ids(ENTERPRISE)) == sorted(sent)
    assert writes.writes == 0
    assert events.of(ENTERPRISE, "held_rate") > 0
    assert events.of(ENTERPRISE, "admitted") == 8
    starts = sorted(entry[3] for entry in processor.ran)
    # 2 at once from the full bucket, then 10/s: the last of 8 no sooner than ~0.6 s after.
    assert starts[-1] - starts[0] >= 0.5
    assert {entry[2] for entry in processor.ran} == {1}


def test_a_delivery_held_past_the_hold_time_is_deferred_once_and_runs_later(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """The exception: a tenant whose slot stays taken longer than the hold time has its next
    delivery re-sent (one write), and it runs once the slot is free."""
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.6)
    events = Events()
    gate = tier_gate({FREE: Tier.FREE}, events, hold_s=0.2, defer_ms=10, jitter_ms=0)
    runner, writes = run(broker, store, processor, [FREE], gate, workers=2)
    try:
        sent = send(broker, queue, FREE, 2)
        assert wait_until(lambda: len(processor.ids(FREE)) == 2, timeout=20)
    finally:
        assert runner.stop(grace_s=5)
        gate.close()
    assert sorted(processor.ids(FREE)) == sorted(sent)
    assert events.of(FREE, "expired") >= 1
    assert writes.writes == events.of(FREE, "expired")
    assert {entry[2] for entry in processor.ran} == {1}, "a deferral is not an attempt"
