"""Publishing limits on the real broker: what the guard refuses never reaches a queue.

A TenantProducer with a limit for one tenant only sends that tenant's admitted messages and every
message of another tenant; a message over the size cap leaves the queue empty. The queue is read
back with a subscription and counted per tenant. The guard's clock is frozen, so the buckets do
not refill however long the broker takes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from boost_tenancy import (
    MessageTooLargeError,
    PublishGuard,
    PublishLimits,
    PublishRateExceededError,
    Routing,
    TenantId,
    TenantProducer,
)
from boost_tenancy.routing import Topology
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import Inbox, unique_queue, wait_until

pytestmark = [pytest.mark.broker]

A, B = TenantId("limited-a"), TenantId("unlimited-b")
SHARED = Routing(Topology.SHARED)
"""Both tenants' messages in one broker queue, read back by one subscription."""
SETTLE_S = 0.5
"""How long a queue is watched for anything beyond what was expected."""


@pytest.fixture
def transport(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    connected = StompTransport(stomp_settings)
    connected.connect()
    yield connected
    connected.close()


def frozen_guard() -> PublishGuard:
    now = time.monotonic()
    return PublishGuard(clock=lambda: now)


def read_back(transport: StompTransport, queue: str, expected: int) -> Inbox:
    """Every message on queue once expected have come and nothing more for SETTLE_S."""
    inbox = Inbox()
    subscription = transport.subscribe(queue, selector=None, prefetch=50, on_delivery=inbox)
    try:
        assert wait_until(lambda: len(inbox) >= expected, timeout=15), len(inbox)
        time.sleep(SETTLE_S)
        for delivery in list(inbox.items):
            transport.ack(delivery)
    finally:
        transport.unsubscribe(subscription)
    return inbox


def test_a_refused_message_never_reaches_the_broker_while_another_tenant_is_unlimited(
    transport: StompTransport,
) -> None:
    queue = unique_queue("limits")
    guard = frozen_guard()
    guard.set_limits(PublishLimits(messages_per_s=2, burst_s=1), tenant=A)  # capacity 2
    producer = TenantProducer(transport, routing=SHARED, guard=guard)
    refused = 0
    for n in range(5):
        try:
            producer.send(queue, A, {"n": n})
        except PublishRateExceededError as exc:
            assert exc.retry_after_s > 0
            refused += 1
        producer.send(queue, B, {"n": n})
    with producer.batch() as batch:
        with pytest.raises(PublishRateExceededError):
            batch.send(queue, A, {"n": 99})
        for n in range(5, 8):
            batch.send(queue, B, {"n": n})
    assert refused == 3
    assert guard.refused() == {(A, "rate"): 4}
    inbox = read_back(transport, queue, expected=2 + 8)
    assert len(inbox) == 10
    per_tenant = Counter(d.properties["tenantUUID"] for d in inbox.items)
    assert per_tenant == {A.value: 2, B.value: 8}
    sent_a = sorted(
        json.loads(str(d.body))["n"] for d in inbox.items if d.properties["tenantUUID"] == A.value
    )
    assert sent_a == [0, 1], "only the admitted ones, the first two"


def test_a_message_over_the_size_cap_leaves_the_queue_empty(transport: StompTransport) -> None:
    queue = unique_queue("limits")
    guard = frozen_guard()
    guard.set_limits(PublishLimits(max_message_bytes=512), tenant=A)
    producer = TenantProducer(transport, routing=SHARED, guard=guard)
    with pytest.raises(MessageTooLargeError) as refused:
        producer.send(queue, A, {"blob": "x" * 2_000})
    assert refused.value.queue == queue
    with pytest.raises(MessageTooLargeError):
        producer.send(queue, A, "y" * 600)
    inbox = read_back(transport, queue, expected=0)
    assert len(inbox) == 0
    # B has no cap, and A's small messages still go: the queue works.
    producer.send(queue, B, {"blob": "x" * 2_000})
    producer.send(queue, A, {"blob": "small"})
    inbox = read_back(transport, queue, expected=2)
    assert sorted(d.properties["tenantUUID"] for d in inbox.items) == [A.value, B.value]
    assert guard.refused() == {(A, "size"): 2}
