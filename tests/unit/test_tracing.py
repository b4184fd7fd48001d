"""W3C trace context through messages (observability/tracing.py): strict parsing of what arrives,
one trace id from a producer through a handler's ctx.publish to the next service, with and
without OpenTelemetry, and the spans' parents, kinds, attributes and statuses with the SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from boost_tenancy import (
    ConfigError,
    DispatchSettings,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantProducer,
)
from boost_tenancy.observability import tracing
from boost_tenancy.observability.trace_context import (
    TRACEPARENT,
    TRACESTATE,
    TraceContext,
    new_traceparent,
)
from boost_tenancy.observability.tracing import stamp
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import wait_until
from tests.tracing_support import ServiceA, ServiceB, span_exporter, spans_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{SPAN}-01"


# -- parsing what arrives ------------------------------------------------------------------------
def test_a_valid_traceparent_is_read_field_by_field() -> None:
    context = TraceContext.parse(VALID, "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE")
    assert context == TraceContext(TRACE, SPAN, "01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert context.sampled
    assert context.properties() == {TRACEPARENT: VALID, TRACESTATE: context.state}


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "",
        VALID.upper(),  # hex must be lowercase
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero span id
        f"ff-{TRACE}-{SPAN}-01",  # version ff is never valid
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"00-{TRACE}-{SPAN}-1",
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f" {VALID}",
        f"{VALID}\n",
        f"00_{TRACE}_{SPAN}_01",
        f"cc-{TRACE}-{SPAN}-01-" + "x" * 600,  # beyond any sane length
    ],
)
def test_an_invalid_traceparent_is_dropped(value: object) -> None:
    assert TraceContext.parse(value) is None
    assert TraceContext.of({TRACEPARENT: value} if isinstance(value, str) else {}) is None


def test_a_later_version_is_read_by_its_first_four_fields_and_sent_on_as_version_00() -> None:
    context = TraceContext.parse(f"cc-{TRACE}-{SPAN}-01-what-the-future-adds")
    assert context is not None
    assert context.traceparent == VALID


@pytest.mark.parametrize(
    "state",
    [
        "Rojo=1",  # keys are lowercase
        "rojo=1,rojo=2",  # a key given twice
        "rojo",  # no value
        "rojo=a,b",  # a member without '='
        "rojo=has=equals",
        "rojo=",  # an empty value
        "rojo=\x01",
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
        "k=" + "v" * 600,  # longer than 512 characters
        "   ",
    ],
)
def test_an_invalid_tracestate_is_dropped_and_the_traceparent_kept(state: str) -> None:
    context = TraceContext.parse(VALID, state)
    assert context is not None
    assert context.state == ""
    assert TRACESTATE not in context.properties()


def test_multi_tenant_tracestate_keys_are_valid() -> None:
    context = TraceContext.parse(VALID, "t61rcwkgmze@rojo=x,fw529a3039@dt=-5")
    assert context is not None
    assert context.state == "t61rcwkgmze@rojo=x,fw529a3039@dt=-5"


# -- what a new message carries -------------------------------------------------------------------
def test_a_message_outside_any_trace_starts_a_new_sampled_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "_otel", None)
    first, second = stamp(None, None), stamp({"kind": "x"}, None)
    a, b = TraceContext.of(first), TraceContext.of(second)
    assert a is not None and b is not None
    assert a.trace_id != b.trace_id
    assert a.sampled
    assert second["kind"] == "x"


def test_a_new_trace_is_valid_sampled_and_its_own() -> None:
    contexts = [TraceContext.new() for _ in range(500)]
    parents = [new_traceparent() for _ in range(500)]
    for context in contexts:
        assert TraceContext.parse(context.traceparent) == context
        assert context.sampled
    parsed = [TraceContext.parse(parent) for parent in parents]
    assert [p.traceparent if p else None for p in parsed] == parents
    assert len({c.trace_id for c in contexts} | {p.trace_id for p in parsed if p}) == 1000
    assert len({c.span_id for c in contexts}) == 500


def test_a_custom_creation_context_is_kept_and_an_invalid_one_refused() -> None:
    given = {TRACEPARENT: VALID, TRACESTATE: "rojo=1", "kind": "x"}
    assert stamp(given, TraceContext.new()) == given
    with pytest.raises(ConfigError, match="traceparent"):
        stamp({TRACEPARENT: "00-nope"}, None)
    with pytest.raises(ConfigError, match="tracestate"):
        stamp({TRACEPARENT: VALID, TRACESTATE: "Bad=1"}, None)
    with pytest.raises(ConfigError, match="without"):
        stamp({TRACESTATE: "rojo=1"}, None)


# -- two services on the in-memory broker ---------------------------------------------------------
class Pipeline:
    """A producer, service A (orders -> invoices) and service B (invoices), one broker."""

    def __init__(self, broker: InMemoryBroker, tmp_path: Path) -> None:
        self.a = ServiceA("orders", "invoices")
        self.b = ServiceB("invoices")
        settings = RunnerSettings(
            workers=2,
            dispatch=DispatchSettings(
                retry=RetryPolicy(max_attempts=3, base_delay_ms=1, max_delay_ms=1)
            ),
        )
        self.runners = [
            ProcessorRunner(
                service,
                InMemoryTransport(broker),
                ["org-a"],
                error_store=SQLiteErrorStore(tmp_path / f"{name}.sqlite3"),
                settings=settings,
            )
            for name, service in (("a", self.a), ("b", self.b))
        ]
        self.transport = InMemoryTransport(broker)
        self.producer = TenantProducer(self.transport)

    def start(self) -> None:
        self.transport.connect()
        for runner in self.runners:
            runner.start()

    def stop(self) -> None:
        for runner in self.runners:
            runner.stop(grace_s=5)
        self.transport.close()


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    broker = InMemoryBroker()
    built = Pipeline(broker, tmp_path)
    built.start()
    try:
        yield built
    finally:
        built.stop()
        broker.close()


def test_without_opentelemetry_one_trace_id_runs_from_the_producer_through_both_services(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "_otel", None)
    sent = pipeline.producer.send("orders", "org-a", "order 1")
    origin = TraceContext.of(sent.properties)
    assert origin is not None
    assert wait_until(lambda: len(pipeline.b.seen) == 1)
    at_b = TraceContext.of(pipeline.b.seen.properties[0])
    # Without spans there is nothing in between: B's message carries the producer's context.
    assert at_b == origin
    assert pipeline.a.seen.contexts == [origin]
    assert pipeline.a.handler_trace == [origin]


def test_an_invalid_incoming_traceparent_is_not_forwarded(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "_otel", None)
    hostile = f"00-{TRACE}-{SPAN}-01\r\nX-Injected: 1"
    wire = pipeline.producer.admit("orders", "org-a", "order 1").wire
    forged = {**wire.properties, TRACEPARENT: hostile, TRACESTATE: "Rojo=1"}
    pipeline.transport.send("tenant.org-a.orders", type(wire)(body=wire.body, properties=forged))
    assert wait_until(lambda: len(pipeline.b.seen) == 1)
    at_b = pipeline.b.seen.properties[0]
    context = TraceContext.of(at_b)
    assert context is not None
    assert context.trace_id != TRACE  # a new trace, not the forged one
    assert at_b[TRACEPARENT] == context.traceparent
    assert TRACESTATE not in at_b


def processing(properties: dict[str, str]) -> tracing.Processing:
    return tracing.Processing(
        properties,
        destination="tenant.org-a.orders",
        queue="orders",
        tenant="org-a",
        message_id="m-1",
        correlation_id="m-1",
        attempt=1,
    )


@pytest.mark.parametrize("carried", [False, True])
def test_with_the_api_and_no_provider_the_handler_runs_in_the_messages_context_or_a_new_one(
    monkeypatch: pytest.MonkeyPatch, carried: bool
) -> None:
    # OpenTelemetry's API without a provider (the default): no span is recorded, and what the
    # handler sees as current is the message's own context, or, without one, no valid span
    # (a new trace of the toolkit's own carries on).
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace

    monkeypatch.setattr(tracing, "_provider_set", lambda: False)
    # A span current on the worker's thread is never the handler's parent.
    ambient = otel_trace.SpanContext(
        trace_id=0xA1, span_id=0xB2, is_remote=False, trace_flags=otel_trace.TraceFlags(1)
    )
    token = otel_context.attach(
        otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(ambient))
    )
    before = otel_context.get_current()
    trace = processing({TRACEPARENT: VALID} if carried else {})
    seen = otel_trace.get_current_span().get_span_context()
    assert tracing.current_trace() == trace.context
    if carried:
        assert (seen.trace_id, seen.span_id) == (int(TRACE, 16), int(SPAN, 16))
        assert trace.context.trace_id == TRACE
    else:
        assert not seen.is_valid
        assert trace.context.trace_id != TRACE and len(trace.context.trace_id) == 32
    trace.settled("processed", object())
    trace.end()
    assert otel_context.get_current() == before, "the worker's context is restored"
    assert tracing.current_trace() is None
    otel_context.detach(token)


@pytest.fixture
def exporter() -> Iterator[object]:
    found = span_exporter()
    found.clear()
    yield found
    found.clear()


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [span for span in spans if span.name == name]
    assert len(matching) == 1, [span.name for span in spans]
    return matching[0]


def test_with_opentelemetry_the_spans_chain_send_process_and_process(
    pipeline: Pipeline, exporter: object
) -> None:
    sent = pipeline.producer.send("orders", "org-a", "order 1", correlation_id="conv-1")
    origin = TraceContext.of(sent.properties)
    assert origin is not None
    trace_id = int(origin.trace_id, 16)
    assert wait_until(lambda: len(spans_of(exporter, trace_id)) == 3)  # type: ignore[arg-type]
    spans = spans_of(exporter, trace_id)  # type: ignore[arg-type]
    send = _one(spans, "send orders")
    process_a = _one(spans, "process orders")
    process_b = _one(spans, "process invoices")

    assert send.kind is SpanKind.PRODUCER
    assert send.parent is None
    assert send.context is not None and f"{send.context.span_id:016x}" == origin.span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "activemq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "tenant.org-a.orders",
        "messaging.message.id": sent.message_id,
        "messaging.message.conversation_id": "conv-1",
        "boost.tenant": "org-a",
        "boost.queue": "orders",
    }

    assert process_a.kind is SpanKind.CONSUMER
    assert process_a.parent is not None and process_a.parent.span_id == send.context.span_id
    assert process_a.parent.is_remote
    attributes = dict(process_a.attributes or {})
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == "tenant.org-a.orders"
    assert attributes["messaging.message.id"] == sent.message_id
    assert attributes["messaging.message.conversation_id"] == "conv-1"
    assert attributes["boost.tenant"] == "org-a"
    assert attributes["boost.outcome"] == "processed"
    assert process_a.status.status_code is StatusCode.UNSET

    # What A published continues A's process span, so B's process span is its child.
    assert process_a.context is not None
    assert process_b.parent is not None and process_b.parent.span_id == process_a.context.span_id
    at_b = TraceContext.of(pipeline.b.seen.properties[0])
    assert at_b is not None and at_b.span_id == f"{process_a.context.span_id:016x}"
    assert dict(process_b.attributes or {})["messaging.destination.name"] == "tenant.org-a.invoices"


def test_a_retried_attempt_marks_its_process_span_failed_and_the_next_one_succeeds(
    pipeline: Pipeline, exporter: object
) -> None:
    sent = pipeline.producer.send("orders", "org-a", "fail-once")
    origin = TraceContext.of(sent.properties)
    assert origin is not None
    trace_id = int(origin.trace_id, 16)
    # send, two attempts at A, B
    assert wait_until(lambda: len(spans_of(exporter, trace_id)) == 4)  # type: ignore[arg-type]
    spans = spans_of(exporter, trace_id)  # type: ignore[arg-type]
    attempts = sorted(
        (span for span in spans if span.name == "process orders"),
        key=lambda span: dict(span.attributes or {})["boost.attempt"],  # type: ignore[arg-type,return-value]
    )
    failed, succeeded = attempts
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["boost.outcome"] == "retried"
    assert dict(failed.attributes or {})["error.type"] == "RuntimeError"
    assert succeeded.status.status_code is StatusCode.UNSET
    # The retry copy carries the message's context: both attempts are children of the send.
    send = _one(spans, "send orders")
    assert send.context is not None
    assert {span.parent.span_id for span in attempts if span.parent} == {send.context.span_id}


def test_a_dead_lettered_message_marks_its_process_span_failed(
    pipeline: Pipeline, exporter: object
) -> None:
    sent = pipeline.producer.send("orders", "org-a", "poison")
    origin = TraceContext.of(sent.properties)
    assert origin is not None
    trace_id = int(origin.trace_id, 16)
    assert wait_until(lambda: len(spans_of(exporter, trace_id)) == 2)  # type: ignore[arg-type]
    process = _one(spans_of(exporter, trace_id), "process orders")  # type: ignore[arg-type]
    assert process.status.status_code is StatusCode.ERROR
    assert dict(process.attributes or {})["boost.outcome"] == "dead_lettered"
    assert dict(process.attributes or {})["error.type"] == "boost_tenancy.errors.PermanentError"


def test_a_batch_gives_each_message_its_own_create_span(
    pipeline: Pipeline, exporter: object
) -> None:
    with pipeline.producer.batch() as batch:
        first = batch.send("orders", "org-a", "one")
        second = batch.send("orders", "org-a", "two")
    contexts = [TraceContext.of(m.properties) for m in (first, second)]
    assert all(contexts)
    creates = [
        span
        for span in exporter.get_finished_spans()  # type: ignore[attr-defined]
        if span.name == "create orders"
    ]
    assert {f"{span.context.span_id:016x}" for span in creates} == {
        c.span_id for c in contexts if c
    }
    assert all(span.kind is SpanKind.PRODUCER for span in creates)
    assert {dict(span.attributes)["messaging.operation.type"] for span in creates} == {"create"}


@pytest.mark.parametrize(
    ("named", "expected"), [("sdk_tracer_provider", "True"), ("default_tracer_provider", "False")]
)
def test_a_tracer_provider_named_in_the_environment_is_the_one_spans_go_to(
    named: str, expected: str
) -> None:
    # OpenTelemetry's provider is set once per process, so each case runs in a process of its
    # own, the variable set before it starts, as a deployment sets it.
    env = {**os.environ, "OTEL_PYTHON_TRACER_PROVIDER": named}
    probe = "from boost_tenancy.observability import tracing; print(tracing._provider_set())"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == expected, done.stderr
