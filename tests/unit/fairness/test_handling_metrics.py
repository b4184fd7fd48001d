"""Handling latency and in-flight metrics: the HandlingMetrics middleware, its Prometheus text,
and the metrics server of an entry point's wiring serving it."""

from __future__ import annotations

import re
import socket
import threading
import urllib.request
from typing import Any

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    PermanentError,
    TenantId,
    TenantProcessor,
)
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.fairness.handling_metrics import HandlingMetrics
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryTransport
from tests.conftest import Inbox, ManualClock, unique_queue, wait_until

A = TenantId("org-A")
B = TenantId("org-B")


class Timed(TenantProcessor):
    """Takes as long as the test says, on the test's clock; fails on request."""

    json_body = False

    def __init__(self, queue: str, clock: ManualClock) -> None:
        self.queues = (queue,)
        self.clock = clock
        self.took: dict[str, float] = {}
        self.seen_in_flight: list[int] = []
        self.metrics: HandlingMetrics | None = None

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if self.metrics is not None:
            self.seen_in_flight.append(self.metrics.in_flight(ctx.tenant.value, ctx.queue))
        self.clock.advance(float(message.properties["took"]))
        if message.properties.get("fail"):
            raise PermanentError("as asked")


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', head)))
            found[labels] = float(value)
    return found


def run(
    transport: InMemoryTransport,
    store: ErrorStore,
    messages: list[tuple[TenantId, dict[str, str]]],
) -> tuple[HandlingMetrics, Timed]:
    queue = unique_queue("cmd.timed")
    clock = ManualClock()
    processor = Timed(queue, clock)
    metrics = HandlingMetrics(clock=clock)
    processor.metrics = metrics
    dispatcher = Dispatcher(processor, transport, store, middleware=[metrics])
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    for tenant, properties in messages:
        transport.send(
            queue, WireMessage(body="x", properties={"tenantUUID": tenant.value, **properties})
        )
    assert wait_until(lambda: len(inbox) == len(messages))
    for delivery in list(inbox.items):
        dispatcher.dispatch(TenantId(delivery.properties["tenantUUID"]), delivery)
    return metrics, processor


def test_latency_lands_in_its_bucket_and_in_flight_counts_the_running_handler(
    transport: InMemoryTransport, store: ErrorStore
) -> None:
    metrics, processor = run(
        transport,
        store,
        [(A, {"took": "0.02"}), (A, {"took": "0.3"}), (B, {"took": "2", "fail": "1"})],
    )
    assert processor.seen_in_flight == [1, 1, 1]
    text = metrics.prometheus()
    assert "# TYPE boost_tenancy_handling_seconds histogram" in text
    queue = processor.queues[0]
    buckets = samples(text, "boost_tenancy_handling_seconds_bucket")
    assert buckets[(("le", "0.01"), ("queue", queue))] == 0
    assert buckets[(("le", "0.025"), ("queue", queue))] == 1
    assert buckets[(("le", "0.5"), ("queue", queue))] == 2
    assert buckets[(("le", "2.5"), ("queue", queue))] == 3  # the failed one is measured too
    assert buckets[(("le", "+Inf"), ("queue", queue))] == 3
    assert samples(text, "boost_tenancy_handling_seconds_count") == {(("queue", queue),): 3}
    (total,) = samples(text, "boost_tenancy_handling_seconds_sum").values()
    assert total == pytest.approx(2.32)
    assert samples(text, "boost_tenancy_in_flight") == {(("queue", queue),): 0}
    assert "tenant=" not in text


def test_the_tenant_label_is_opt_in(transport: InMemoryTransport, store: ErrorStore) -> None:
    metrics, processor = run(transport, store, [(A, {"took": "0.02"}), (B, {"took": "0.02"})])
    queue = processor.queues[0]
    counts = samples(metrics.prometheus(tenant_label=True), "boost_tenancy_handling_seconds_count")
    assert counts == {
        (("queue", queue), ("tenant", "org-A")): 1,
        (("queue", queue), ("tenant", "org-B")): 1,
    }


def test_in_flight_is_back_to_zero_when_the_handler_raises_past_every_middleware() -> None:
    metrics = HandlingMetrics()
    ctx: Any = type("Ctx", (), {"tenant": A, "queue": "q"})()

    def explode(message: Any, ctx: Any) -> Any:
        assert metrics.in_flight("org-A", "q") == 1
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        metrics(object(), ctx, explode)  # type: ignore[arg-type]
    assert metrics.in_flight("org-A", "q") == 0
    assert samples(metrics.prometheus(), "boost_tenancy_handling_seconds_count") == {
        (("queue", "q"),): 1
    }


def test_buckets_are_checked() -> None:
    for bad in ([], [0.0, 1.0], [1.0, 1.0], [-1.0]):
        with pytest.raises(ValueError, match="buckets"):
            HandlingMetrics(bad)


def test_the_wiring_serves_it_on_the_metrics_port() -> None:
    wiring = FairnessWiring.build(None, workers=1, metrics_port=0)
    assert wiring.server is None  # port 0: not served
    wiring = FairnessWiring.build(None, workers=1, metrics_port=_free_port())
    assert wiring.server is not None
    assert wiring.middleware == (wiring.handling,)
    done = threading.Event()
    handling = wiring.handling
    assert handling is not None
    ctx: Any = type("Ctx", (), {"tenant": A, "queue": "cmd.served"})()
    handling(object(), ctx, lambda message, ctx: done.set())  # type: ignore[arg-type,return-value]
    wiring.server.start()
    try:
        with urllib.request.urlopen(f"{wiring.server.url}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        wiring.close()
    assert "boost_tenancy_messages_total" in text  # the accounting's families first
    assert samples(text, "boost_tenancy_handling_seconds_count") == {(("queue", "cmd.served"),): 1}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
