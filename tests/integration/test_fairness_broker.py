"""Fairness on the real broker: a tenant over its limits is held, not re-sent.

Tier concurrency holds under load, a Free tenant's messages run one at a time in the order they
were sent, and the runner writes nothing to the broker for it; the rate limit admits the
configured rate; a limit changed at run time takes effect; accounting matches what was sent.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
    open_error_store,
)
from boost_tenancy.fairness import (
    Accounting,
    FairnessGate,
    InMemoryConcurrencyLimiter,
    RatePolicy,
    SQLiteTierStore,
    Tier,
    TierLimits,
    TierResolver,
    TokenBucketLimiter,
)
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import WriteCount, count_writes, unique_queue, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.slow]

FREE, ENTERPRISE = TenantId("fair-free"), TenantId("fair-enterprise")


class Recorder(TenantProcessor):
    """Sleeps per message and records concurrency and handling times per tenant."""

    def __init__(self, queue: str, work_s: float) -> None:
        self.queues = (queue,)
        self.work_s = work_s
        self.lock = threading.Lock()
        self.running: dict[str, int] = defaultdict(int)
        self.peak: dict[str, int] = defaultdict(int)
        self.done: dict[str, list[float]] = defaultdict(list)
        self.ids: dict[str, list[str]] = defaultdict(list)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        tenant = ctx.tenant.value
        with self.lock:
            self.running[tenant] += 1
            self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
        time.sleep(self.work_s)
        with self.lock:
            self.running[tenant] -= 1
            self.done[tenant].append(time.monotonic())
            self.ids[tenant].append(ctx.message_id)

    def count(self, tenant: TenantId) -> int:
        with self.lock:
            return len(self.done[tenant.value])


@pytest.fixture
def tiers(tmp_path: Path) -> Iterator[TierResolver]:
    store = SQLiteTierStore(tmp_path / "tiers.sqlite3")
    store.set(ENTERPRISE, Tier.ENTERPRISE)
    resolver = TierResolver(store)
    resolver.tier_of(ENTERPRISE)  # the first answer is FREE while the store is read
    assert wait_until(lambda: resolver.tier_of(ENTERPRISE) is Tier.ENTERPRISE, timeout=5)
    yield resolver


def tier_gate(tiers: TierResolver, limits: TierLimits, **kwargs: Any) -> FairnessGate:
    return FairnessGate(
        concurrency=InMemoryConcurrencyLimiter(),
        limit_of=lambda tenant: limits.for_tier(tiers.tier_of(tenant)),
        **kwargs,
    )


def run(
    processor: Recorder,
    settings: StompSettings,
    gate: FairnessGate,
    accounting: Accounting,
    *,
    tmp: Path,
    tenants: list[TenantId],
) -> tuple[ProcessorRunner, WriteCount]:
    transport = StompTransport(settings)
    writes = count_writes(transport)
    runner = ProcessorRunner(
        processor,
        transport,
        tenants,
        error_store=open_error_store(str(tmp / "errors.sqlite3")),
        settings=RunnerSettings(workers=8, prefetch=20),
        gate=gate,
        observers=[accounting],
    )
    runner.start()
    return runner, writes


def test_tier_limits_hold_under_load_without_a_broker_write_and_keep_the_order(
    stomp_settings: StompSettings, tiers: TierResolver, tmp_path: Path
) -> None:
    queue = unique_queue("fair")
    processor = Recorder(queue, work_s=0.2)
    accounting = Accounting()
    gate = tier_gate(tiers, TierLimits(), on_event=accounting.record)
    runner, writes = run(
        processor, stomp_settings, gate, accounting, tmp=tmp_path, tenants=[FREE, ENTERPRISE]
    )
    transport = StompTransport(stomp_settings)
    transport.connect()
    sent_free: list[str] = []
    try:
        with TenantProducer(transport).batch() as batch:
            for n in range(8):
                sent_free.append(batch.send(queue, FREE, {"n": n}).message_id)
                batch.send(queue, ENTERPRISE, {"n": n})
        assert wait_until(
            lambda: processor.count(FREE) == 8 and processor.count(ENTERPRISE) == 8, timeout=60
        ), (processor.count(FREE), processor.count(ENTERPRISE))
    finally:
        runner.stop(grace_s=5)
        gate.close()
        transport.close()
    assert processor.peak[FREE.value] == 1, "a Free tenant runs one message at a time"
    assert processor.ids[FREE.value] == sent_free, "in the order they were sent"
    assert writes.writes == 0, "held at the gate, never re-sent"
    assert 1 < processor.peak[ENTERPRISE.value] <= 5, "Enterprise runs up to 5 at once"
    for tenant in (FREE, ENTERPRISE):
        assert len(set(processor.ids[tenant.value])) == 8, "each message ran exactly once"
    free = accounting.snapshot(FREE)
    assert free["processed"] == 8
    assert free["held_concurrency"] > 0, "the Free tenant's extra messages were held"
    assert free["deferred"] == 0
    assert free["dead_lettered"] == free["retried"] == 0
    assert accounting.snapshot(ENTERPRISE)["processed"] == 8


def test_rate_limit_admits_the_configured_rate_and_follows_a_change_at_run_time(
    stomp_settings: StompSettings, tiers: TierResolver, tmp_path: Path
) -> None:
    queue = unique_queue("rate")
    processor = Recorder(queue, work_s=0.0)
    accounting = Accounting()
    rates = TokenBucketLimiter(RatePolicy(rate_per_s=5, burst_s=1))
    gate = tier_gate(tiers, TierLimits(free=5), rates=rates, on_event=accounting.record)
    runner, writes = run(processor, stomp_settings, gate, accounting, tmp=tmp_path, tenants=[FREE])
    transport = StompTransport(stomp_settings)
    transport.connect()
    try:
        started = time.monotonic()
        with TenantProducer(transport).batch() as batch:
            for n in range(20):
                batch.send(queue, FREE, {"n": n})
        assert wait_until(lambda: processor.count(FREE) >= 15, timeout=30)
        # Capacity 5, refill 5/s: 15 messages need at least about 2 s.
        assert processor.done[FREE.value][14] - started >= 1.6
        rates.set_policy(RatePolicy(rate_per_s=0))  # unlimited from now on, no restart
        changed = time.monotonic()
        with TenantProducer(transport).batch() as batch:
            for n in range(40):
                batch.send(queue, FREE, {"n": 100 + n})
        assert wait_until(lambda: processor.count(FREE) == 60, timeout=30)
        assert processor.done[FREE.value][-1] - changed < 5.0, "40 more, unlimited"
    finally:
        runner.stop(grace_s=5)
        gate.close()
        transport.close()
    snapshot: dict[str, Any] = accounting.snapshot(FREE)
    assert snapshot["processed"] == 60, "accounting matches what was sent"
    assert snapshot["held_rate"] > 0
    assert snapshot["deferred"] == 0
    assert writes.writes == 0
