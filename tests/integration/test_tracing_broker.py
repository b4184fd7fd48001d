"""Trace context on the real broker: a producer, service A (ctx.publish) and service B keep one
trace, with the OpenTelemetry spans parented across both hops, the traceparent and tracestate
properties surviving the broker as STOMP headers; and the runner reports itself ready only once
every subscription consumes on the broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from boost_tenancy import ProcessorRunner, RunnerSettings, TenantProducer
from boost_tenancy.observability.trace_context import TRACEPARENT, TRACESTATE, TraceContext
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until
from tests.tracing_support import ServiceA, ServiceB, span_exporter, spans_of

pytestmark = [pytest.mark.broker]

CUSTOM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = span_exporter()
    found.clear()
    yield found
    found.clear()


def test_one_trace_runs_through_two_services_on_the_broker(
    stomp_settings: StompSettings, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    orders, invoices = unique_queue("orders"), unique_queue("invoices")
    a, b = ServiceA(orders, invoices), ServiceB(invoices)
    runners = [
        ProcessorRunner(
            service,
            StompTransport(stomp_settings),
            ["org-trace"],
            error_store=SQLiteErrorStore(tmp_path / f"{name}.sqlite3"),
            settings=RunnerSettings(workers=2),
        )
        for name, service in (("a", a), ("b", b))
    ]
    transport = StompTransport(stomp_settings)
    transport.connect()
    try:
        for runner in runners:
            runner.start()
            assert wait_until(lambda r=runner: all(r.health().readiness().values()))  # type: ignore[misc]
            assert runner.health().subscriptions_open == 1
        # A caller's own creation context (e.g. from an HTTP request) with a vendor's state.
        sent = TenantProducer(transport).send(
            orders,
            "org-trace",
            "order 1",
            properties={TRACEPARENT: CUSTOM, TRACESTATE: "congo=t61rcWkgMzE"},
        )
        assert wait_until(lambda: len(b.seen) == 1, timeout=30)
        # A saw the caller's context as it was sent, through the broker.
        assert a.seen.properties[0][TRACEPARENT] == CUSTOM
        assert a.seen.properties[0][TRACESTATE] == "congo=t61rcWkgMzE"
        at_b = TraceContext.of(b.seen.properties[0])
        assert at_b is not None
        assert at_b.trace_id == "0af7651916cd43dd8448eb211c80319c"
        assert at_b.state == "congo=t61rcWkgMzE"

        trace_id = int(at_b.trace_id, 16)
        assert wait_until(lambda: len(spans_of(exporter, trace_id)) == 2, timeout=30)
        spans = {span.name: span for span in spans_of(exporter, trace_id)}
        process_a, process_b = spans[f"process {orders}"], spans[f"process {invoices}"]
        assert process_a.kind is SpanKind.CONSUMER
        assert process_a.parent is not None
        assert f"{process_a.parent.span_id:016x}" == "b7ad6b7169203331"
        assert process_a.context is not None and process_b.parent is not None
        assert process_b.parent.span_id == process_a.context.span_id
        assert at_b.span_id == f"{process_a.context.span_id:016x}"
        attributes = dict(process_b.attributes or {})
        assert attributes["messaging.destination.name"] == f"tenant.org-trace.{invoices}"
        assert attributes["boost.tenant"] == "org-trace"
        assert attributes["messaging.message.conversation_id"] == sent.message_id
    finally:
        for runner in runners:
            runner.stop(grace_s=5)
        transport.close()
    assert runners[0].health().readiness()["connected"] is False
