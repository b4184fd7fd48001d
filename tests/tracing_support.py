"""Two services joined by a queue, for the trace-context tests on the in-memory and the real
broker: A handles `orders` and publishes to `invoices` through ctx.publish; B records what it
handles. And the OpenTelemetry SDK's in-memory exporter, installed once per test process."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from boost_tenancy import HandlerContext, IncomingMessage, PermanentError, TenantProcessor
from boost_tenancy.observability.trace_context import TraceContext
from boost_tenancy.observability.tracing import current_trace

_exporter: InMemorySpanExporter | None = None


def span_exporter() -> InMemorySpanExporter:
    """The exporter every span of this process ends in (the global provider is set once)."""
    global _exporter  # noqa: PLW0603  # one provider per process, by OpenTelemetry's design
    if _exporter is None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _exporter = exporter
    return _exporter


def spans_of(exporter: InMemorySpanExporter, trace_id: int) -> list[ReadableSpan]:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.context is not None and span.context.trace_id == trace_id
    ]


class Seen:
    """What a handler saw: the properties of each message and the context it published under."""

    def __init__(self) -> None:
        self.properties: list[Mapping[str, str]] = []
        self.contexts: list[TraceContext | None] = []
        self._lock = threading.Lock()

    def add(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.properties.append(dict(message.properties))
            self.contexts.append(ctx.trace)

    def __len__(self) -> int:
        with self._lock:
            return len(self.properties)


class ServiceA(TenantProcessor):
    """Publishes one invoice per order; fails the first attempt of orders asking for it."""

    json_body = False

    def __init__(self, orders: str, invoices: str) -> None:
        self.queues = (orders,)
        self.invoices = invoices
        self.seen = Seen()
        self.handler_trace: list[TraceContext | None] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.seen.add(message, ctx)
        self.handler_trace.append(current_trace())
        if message.text == "fail-once" and message.attempt == 1:
            raise RuntimeError("first attempt fails")
        if message.text == "poison":
            raise PermanentError("cannot be handled")
        ctx.publish(self.invoices, f"invoice for {message.message_id}")


class ServiceB(TenantProcessor):
    json_body = False

    def __init__(self, invoices: str) -> None:
        self.queues = (invoices,)
        self.seen = Seen()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.seen.add(message, ctx)
