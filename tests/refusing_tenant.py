"""One tenant whose handler publishes to its own full queue, beside one that does not: the
scenario of each broker's refusal test (tests/integration/test_*_refusal.py). A refusal must
cost the refused tenant alone: the other's messages are each handled, none dead-lettered, and
the connections of the subscriptions are never lost."""

from __future__ import annotations

import collections
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantProcessor,
)
from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.base import Delivery, Transport
from tests.conftest import wait_until

REFUSED, OTHER = "org-a", "org-b"
REFUSED_COUNT, OTHER_COUNT = 5, 100


class PublishesToFull(TenantProcessor):
    """org-a publishes each message to its full queue; org-b's are handled and counted."""

    def __init__(self, source: str, full: str) -> None:
        self.queues = (source,)
        self.full = full
        self.handled: collections.Counter[tuple[str, int]] = collections.Counter()
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.handled[(ctx.tenant.value, int(message.data["n"]))] += 1
        if ctx.tenant.value == REFUSED:
            ctx.publish(self.full, {"n": message.data["n"]})


def runner_of(
    processor: TenantProcessor,
    transport: Transport,
    tenants: list[str],
    store: SQLiteErrorStore,
    *,
    workers: int,
    prefetch: int,
    delay_ms: int,
) -> ProcessorRunner:
    """A runner whose retries wait delay_ms each, three attempts in all."""
    retry = RetryPolicy(max_attempts=3, base_delay_ms=delay_ms, max_delay_ms=delay_ms, jitter=0.0)
    settings = RunnerSettings(
        workers=workers, prefetch=prefetch, dispatch=DispatchSettings(retry=retry)
    )
    return ProcessorRunner(processor, transport, tenants, error_store=store, settings=settings)


def drain(transport: Transport, name: str, expected: int, timeout_s: float = 30) -> list[Delivery]:
    """Read name until expected messages came, or timeout_s passed; each is acknowledged."""
    got: list[Delivery] = []

    def take(delivery: Delivery) -> None:
        got.append(delivery)
        transport.ack(delivery)

    subscription = transport.subscribe(name, selector=None, prefetch=50, on_delivery=take)
    wait_until(lambda: len(got) >= expected, timeout=timeout_s)
    transport.unsubscribe(subscription)
    return got


@dataclass(frozen=True)
class TwoTenants:
    """What came of the scenario."""

    other_handled: int
    """org-b's messages handled, each counted once."""
    refused_dead_letters: list[int]
    """The numbers of org-a's dead-lettered messages, sorted."""
    other_dead_letters: int
    connections_lost: int
    """How often the runner's subscriptions lost their connection, as the caller counts."""
    elapsed_s: float


def two_tenants(
    producer: Transport,
    runner_transport: Transport,
    tmp_path: Path,
    *,
    full_prefix: str,
    fill: Callable[[str], None],
    connections_lost: Callable[[], int],
) -> TwoTenants:
    """org-a's 5 messages each publish to its output queue, which fill(physical name) made
    full; org-b's 100 are handled. Runs a runner of 4 workers on runner_transport (connected by
    the runner, closed here)."""
    source, full = f"refusal.{uuid.uuid4().hex[:10]}", f"{full_prefix}{uuid.uuid4().hex[:10]}"
    processor = PublishesToFull(source, full)
    store = SQLiteErrorStore(str(tmp_path / "errors.db"))
    runner = runner_of(
        processor, runner_transport, [REFUSED, OTHER], store, workers=4, prefetch=20, delay_ms=0
    )
    try:
        # Filled while nothing runs: org-a's output queue is at its limit from the start.
        fill(DEFAULT_ROUTING.physical(full, REFUSED))
        for tenant, count in ((REFUSED, REFUSED_COUNT), (OTHER, OTHER_COUNT)):
            for n in range(count):
                producer.send(
                    source,
                    WireMessage(
                        body=f'{{"n": {n}}}',
                        properties={"tenantUUID": tenant, "content-type": "application/json"},
                    ),
                )
        started = time.monotonic()
        runner.start()

        def other_handled() -> int:
            return len({n for tenant, n in processor.handled if tenant == OTHER})

        wait_until(lambda: other_handled() == OTHER_COUNT, timeout=60)
        dead = drain(
            producer,
            dead_letter_queue(DEFAULT_ROUTING.physical(source, REFUSED)),
            REFUSED_COUNT,
        )
        elapsed = time.monotonic() - started
        lost = connections_lost()
        handled = other_handled()
    finally:
        runner.stop()
        runner_transport.close()
    other_dead = drain(
        producer, dead_letter_queue(DEFAULT_ROUTING.physical(source, OTHER)), 1, timeout_s=3
    )
    numbers = sorted(int(str(d.body).split('"n": ')[1].split("}")[0]) for d in dead)
    return TwoTenants(handled, numbers, len(other_dead), lost, elapsed)


def assert_only_the_refused_tenant_paid(result: TwoTenants) -> None:
    assert result.other_handled == OTHER_COUNT, (
        f"{OTHER}: {result.other_handled} of {OTHER_COUNT} handled in 60 s"
    )
    assert result.refused_dead_letters == list(range(REFUSED_COUNT)), (
        f"{REFUSED}'s messages were not each dead-lettered once ({result.elapsed_s:.1f} s): "
        f"{result.refused_dead_letters}"
    )
    assert result.other_dead_letters == 0, f"an {OTHER} message was dead-lettered for {REFUSED}'s"
    assert result.connections_lost == 0, (
        f"the subscriptions' connections were lost {result.connections_lost} time(s)"
    )


def refusal_keeps_the_deliveries(
    transport: Transport, refuse: Callable[[], None]
) -> TransportError:
    """A delivery is held while refuse() sends a message the broker refuses: that send fails,
    the delivery stays live, and its ack is kept (it does not come back). The refusal's error."""
    source = f"src.{uuid.uuid4().hex[:10]}"
    inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
    transport.subscribe(source, selector=None, prefetch=5, on_delivery=inbox.put)
    transport.send(source, WireMessage(body="held", properties={"tenantUUID": REFUSED}))
    held = inbox.get(timeout=10)
    with pytest.raises(TransportError) as refused:
        refuse()
    assert transport.is_live(held), "the refusal ended the subscriptions' connection"
    transport.ack(held)
    transport.send(source, WireMessage(body="after", properties={"tenantUUID": REFUSED}))
    after = inbox.get(timeout=10)
    assert after.body == "after", "the held message came back: its ack was lost"
    transport.ack(after)
    return refused.value
