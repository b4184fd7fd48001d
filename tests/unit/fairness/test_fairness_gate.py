"""FairnessMiddleware: deferral delays, slot release, failing open; and on the in-memory transport
with a ProcessorRunner, tier concurrency and rate limits that defer messages but never drop them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

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
from boost_tenancy.config import fairness_from_env
from boost_tenancy.fairness import (
    FairnessMiddleware,
    InMemoryConcurrencyLimiter,
    RatePolicy,
    Tier,
    TierLimits,
    TierResolver,
    TokenBucketLimiter,
    build_fairness,
)
from boost_tenancy.processing.outcomes import Ack, Defer, Outcome
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until

FREE = TenantId("org-free")
ENTERPRISE = TenantId("org-enterprise")
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_ms=10, max_delay_ms=10, jitter=0.0)


class DictTierStore:
    def __init__(self, tiers: dict[TenantId, Tier]) -> None:
        self.tiers = tiers

    def get(self, tenant: TenantId) -> Tier | None:
        return self.tiers.get(tenant)

    def set(self, tenant: TenantId, tier: Tier) -> None:
        self.tiers[tenant] = tier


def warm_resolver(tiers: dict[TenantId, Tier]) -> TierResolver:
    """A resolver that already knows the tiers (the first lookup runs in the background)."""
    resolver = TierResolver(DictTierStore(tiers))
    for tenant in tiers:
        resolver.tier_of(tenant)
    assert wait_until(lambda: all(resolver.tier_of(t) is tier for t, tier in tiers.items()))
    return resolver


class Events:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, tenant: TenantId, event: str) -> None:
        with self._lock:
            self.counts[(tenant.value, event)] += 1

    def of(self, tenant: TenantId, event: str) -> int:
        with self._lock:
            return self.counts[(tenant.value, event)]


# -- the middleware alone -------------------------------------------------------------------------
def message(
    tenant: TenantId = FREE, message_id: str = "m-1"
) -> tuple[IncomingMessage, HandlerContext]:
    incoming = IncomingMessage(
        tenant=tenant,
        queue="cmd.test",
        body="{}",
        message_id=message_id,
        correlation_id=message_id,
        attempt=1,
        redelivered=False,
        properties={},
    )
    ctx = HandlerContext(
        tenant=tenant,
        queue="cmd.test",
        message_id=message_id,
        correlation_id=message_id,
        attempt=1,
        log=None,
    )
    return incoming, ctx


def ack(_message: IncomingMessage, _ctx: HandlerContext) -> Outcome:
    return Ack()


def test_concurrency_deferral_adds_jitter_and_never_runs_the_handler() -> None:
    limiter = InMemoryConcurrencyLimiter()
    events = Events()
    middleware = FairnessMiddleware(
        concurrency=limiter,
        tiers=warm_resolver({FREE: Tier.FREE}),
        limits=TierLimits(),
        defer_ms=1000,
        jitter_ms=400,
        rand=lambda: 0.5,
        on_event=events,
    )
    assert limiter.try_acquire(FREE, "running", 1)

    def handler(_m: IncomingMessage, _c: HandlerContext) -> Outcome:
        raise AssertionError("must not run")

    assert middleware(*message(), handler) == Defer(delay_ms=1200, reason="concurrency")
    assert events.of(FREE, "deferred_concurrency") == 1


def test_rate_deferral_waits_at_least_the_retry_after_and_releases_the_slot() -> None:
    limiter = InMemoryConcurrencyLimiter()
    now = [0.0]
    rates = TokenBucketLimiter(RatePolicy(rate_per_s=0.2, burst_s=5), clock=lambda: now[0])
    events = Events()
    middleware = FairnessMiddleware(
        concurrency=limiter,
        tiers=warm_resolver({FREE: Tier.FREE}),
        limits=TierLimits(),
        rates=rates,
        defer_ms=1000,
        jitter_ms=0,
        on_event=events,
    )
    assert middleware(*message(message_id="m-1"), ack) == Ack()
    # The bucket (capacity 1) is empty: the next unit comes in 5 s, longer than defer_ms.
    assert middleware(*message(message_id="m-2"), ack) == Defer(delay_ms=5000, reason="rate")
    assert limiter.in_use(FREE) == 0
    assert (events.of(FREE, "admitted"), events.of(FREE, "deferred_rate")) == (1, 1)


def test_slot_is_released_when_the_handler_raises() -> None:
    limiter = InMemoryConcurrencyLimiter()
    middleware = FairnessMiddleware(
        concurrency=limiter, tiers=warm_resolver({FREE: Tier.FREE}), limits=TierLimits()
    )

    def boom(_m: IncomingMessage, _c: HandlerContext) -> Outcome:
        raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError):
        middleware(*message(), boom)
    assert limiter.in_use(FREE) == 0


class BrokenLimiter:
    def __init__(self) -> None:
        self.calls = 0

    def try_acquire(self, tenant: TenantId, message_id: str, limit: int) -> bool:
        self.calls += 1
        raise ConnectionError("redis is down")

    def release(self, tenant: TenantId, message_id: str) -> None:
        raise ConnectionError("redis is down")

    def take(self, tenant: TenantId, meter: str = "messages", n: int = 1) -> object:
        raise ConnectionError("redis is down")


def test_backend_failures_fail_open_with_one_warning_per_minute() -> None:
    broken = BrokenLimiter()

    def hook(_tenant: TenantId, _event: str) -> None:
        raise ValueError("accounting bug")

    middleware = FairnessMiddleware(
        concurrency=broken,
        tiers=warm_resolver({FREE: Tier.FREE}),
        limits=TierLimits(),
        rates=broken,  # type: ignore[arg-type]  # a backend that only fails
        on_event=hook,
    )
    with capture_logs() as logs:
        for index in range(50):
            assert middleware(*message(message_id=f"m-{index}"), ack) == Ack()
    assert broken.calls == 50
    events = Counter(entry["event"] for entry in logs)
    assert events == {
        "fairness_concurrency_unavailable": 1,
        "fairness_rate_unavailable": 1,
        "fairness_release_failed": 1,
        "fairness_event_hook_failed": 1,
    }


def test_build_fairness_from_settings(tmp_path: Path) -> None:
    settings = fairness_from_env(
        {"BOOST_TIER_STORE": f"sqlite:///{tmp_path}/tiers.sqlite3", "BOOST_RATE_PER_S": "1"}
    )
    middleware = build_fairness(settings)
    assert middleware(*message(), ack) == Ack()
    assert isinstance(middleware(*message(message_id="m-2"), ack), Ack)  # capacity 10


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
    middleware: FairnessMiddleware,
    *,
    workers: int,
) -> ProcessorRunner:
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        tenants,
        error_store=store,
        settings=RunnerSettings(
            workers=workers, prefetch=20, dispatch=DispatchSettings(retry=FAST_RETRY)
        ),
        middleware=[middleware],
    )
    runner.start()
    return runner


def send(broker: InMemoryBroker, queue: str, tenant: TenantId, count: int) -> list[str]:
    sender = InMemoryTransport(broker)
    sender.connect()
    producer = TenantProducer(sender)
    return [producer.send(queue, tenant, {"n": index}).message_id for index in range(count)]


def test_free_tenant_runs_one_at_a_time_and_every_message_runs_once(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.1)
    events = Events()
    middleware = FairnessMiddleware(
        concurrency=InMemoryConcurrencyLimiter(),
        tiers=warm_resolver({FREE: Tier.FREE}),
        limits=TierLimits(),
        defer_ms=20,
        jitter_ms=20,
        on_event=events,
    )
    runner = run(broker, store, processor, [FREE], middleware, workers=6)
    try:
        sent = send(broker, queue, FREE, 6)
        assert wait_until(lambda: len(processor.ids(FREE)) == 6, timeout=20)
        time.sleep(0.3)  # nothing more arrives: no message ran twice
    finally:
        assert runner.stop(grace_s=5)
    assert processor.peak[FREE.value] == 1
    assert sorted(processor.ids(FREE)) == sorted(sent)
    assert events.of(FREE, "admitted") == 6
    # Deferred, not dropped, and a deferral is not an attempt.
    assert events.of(FREE, "deferred_concurrency") > 0
    assert {entry[2] for entry in processor.ran} == {1}
    assert store.failures(tenant=FREE) == []


def test_enterprise_tenant_runs_up_to_five_at_once_beside_a_free_one(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.3)
    events = Events()
    middleware = FairnessMiddleware(
        concurrency=InMemoryConcurrencyLimiter(),
        tiers=warm_resolver({ENTERPRISE: Tier.ENTERPRISE, FREE: Tier.FREE}),
        limits=TierLimits(),
        defer_ms=20,
        jitter_ms=20,
        on_event=events,
    )
    runner = run(broker, store, processor, [ENTERPRISE, FREE], middleware, workers=10)
    try:
        sent = send(broker, queue, ENTERPRISE, 12)
        sent_free = send(broker, queue, FREE, 3)
        assert wait_until(
            lambda: len(processor.ids(ENTERPRISE)) == 12 and len(processor.ids(FREE)) == 3,
            timeout=20,
        )
    finally:
        assert runner.stop(grace_s=5)
    assert processor.peak[ENTERPRISE.value] == 5
    assert processor.peak[FREE.value] == 1
    assert sorted(processor.ids(ENTERPRISE)) == sorted(sent)
    assert sorted(processor.ids(FREE)) == sorted(sent_free)
    assert events.of(ENTERPRISE, "deferred_concurrency") > 0


def test_rate_limit_defers_over_rate_messages_and_all_eventually_run(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = SlowHandler(queue, work_s=0.0)
    events = Events()
    middleware = FairnessMiddleware(
        concurrency=InMemoryConcurrencyLimiter(),
        tiers=warm_resolver({ENTERPRISE: Tier.ENTERPRISE}),
        limits=TierLimits(),
        rates=TokenBucketLimiter(RatePolicy(rate_per_s=10, burst_s=0.2)),  # capacity 2
        defer_ms=20,
        jitter_ms=20,
        on_event=events,
    )
    runner = run(broker, store, processor, [ENTERPRISE], middleware, workers=4)
    try:
        sent = send(broker, queue, ENTERPRISE, 8)
        assert wait_until(lambda: len(processor.ids(ENTERPRISE)) == 8, timeout=20)
    finally:
        assert runner.stop(grace_s=5)
    assert sorted(processor.ids(ENTERPRISE)) == sorted(sent)
    assert events.of(ENTERPRISE, "deferred_rate") > 0
    assert events.of(ENTERPRISE, "admitted") == 8
    starts = sorted(entry[3] for entry in processor.ran)
    # 2 at once from the full bucket, then 10/s: the last of 8 no sooner than ~0.6 s after.
    assert starts[-1] - starts[0] >= 0.5
    assert {entry[2] for entry in processor.ran} == {1}
