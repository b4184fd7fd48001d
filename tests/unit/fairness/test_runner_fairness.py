"""ProcessorRunner on the in-memory transport: a tenant's local backlog cannot hold all workers."""

from __future__ import annotations

import threading
import time

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until

A = TenantId("org-A")
B = TenantId("org-B")


class SlowRecorder(TenantProcessor):
    """Records which tenant each handler started for, then works for 20 ms."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self._lock = threading.Lock()
        self.order: list[TenantId] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.order.append(message.tenant)
        time.sleep(0.02)

    def count(self, tenant: TenantId) -> int:
        with self._lock:
            return self.order.count(tenant)

    def snapshot(self) -> list[TenantId]:
        with self._lock:
            return list(self.order)


@pytest.mark.parametrize("weight_a", [1, 1000])
def test_small_tenant_is_served_while_a_large_backlog_is_local(
    broker: InMemoryBroker, store: ErrorStore, weight_a: int
) -> None:
    """With equal weights B's 5 are handled before A's 50th; weighting A 1000:1 (close to the
    FIFO queue this replaced) puts them behind A's backlog, so the order is the scheduler's doing.
    """
    queue = unique_queue("cmd")
    sender = InMemoryTransport(broker)
    sender.connect()
    producer = TenantProducer(sender)
    with producer.batch() as batch:
        for index in range(200):
            batch.send(queue, A, {"n": index})
    with producer.batch() as batch:
        for index in range(5):
            batch.send(queue, B, {"n": index})
    processor = SlowRecorder(queue)
    # prefetch 500: all of A's 200 are delivered to this process at once, ahead of B's 5.
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [A, B],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=500, tenant_weights={A.value: weight_a}),
    )
    runner.start()
    try:
        assert wait_until(lambda: processor.count(A) >= 50, timeout=20)
    finally:
        runner.stop(grace_s=5)
        sender.close()
    order = processor.snapshot()
    a_50th = [i for i, tenant in enumerate(order) if tenant == A][49]
    b_positions = [i for i, tenant in enumerate(order) if tenant == B]
    if weight_a == 1:
        assert len(b_positions) == 5
        assert max(b_positions) < a_50th, order[: a_50th + 1]
    else:
        assert all(position > a_50th for position in b_positions)
