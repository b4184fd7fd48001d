"""W3C trace context through messages (trace_context.py), and OpenTelemetry spans for publish
and process: the context each message sent carries, and the one a delivery is handled in."""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import Message
from boost_tenancy.observability.trace_context import (
    TRACEPARENT,
    TRACESTATE,
    TraceContext,
    new_traceparent,
    parse_tracestate,
)

try:
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel
except ImportError:  # the otel extra is optional: trace context travels without spans
    _otel = None  # type: ignore[assignment]
    _otel_context = None  # type: ignore[assignment]

MESSAGING_SYSTEM: Final = "activemq"
"""messaging.system: the brokers the toolkit is built for (Classic and Artemis)."""
TENANT_ATTRIBUTE: Final = "boost.tenant"
QUEUE_ATTRIBUTE: Final = "boost.queue"
"""The logical queue; messaging.destination.name is the broker queue, with the tenant in it."""
OUTCOME_ATTRIBUTE: Final = "boost.outcome"

_INSTRUMENTATION: Final = "boost_tenancy"


_current: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "boost_tenancy_trace", default=None
)


def current_trace() -> TraceContext | None:
    """The trace context of the delivery being handled on this thread, or None outside one."""
    return _current.get()


def _active_context() -> TraceContext | None:
    """The caller's active OpenTelemetry span, else the delivery being handled, else None."""
    if _otel is not None:
        found = _from_span_context(_otel.get_current_span().get_span_context())
        if found is not None:
            return found
    return _current.get()


def stamp(properties: Mapping[str, str] | None, trace: TraceContext | None) -> dict[str, str]:
    """properties with the trace context a new message carries: a valid one the caller put in
    them is kept as it is (a custom creation context), else trace, else the active context,
    else a new trace. A traceparent or tracestate given that is not valid is refused.

    Every message the toolkit sends carries `traceparent` (and `tracestate` when there is one)
    as message properties, so one trace runs from a producer through every handler that
    publishes on. That works without OpenTelemetry: a handler's publishes keep the trace id of
    the message it handles, and a producer outside any trace starts a new one. With the `otel`
    extra installed (opentelemetry-api), the producer opens a PRODUCER span ("send <queue>", or
    "create <queue>" per message of a batch) whose context the message carries, and the
    dispatcher a CONSUMER span ("process <queue>") whose parent is the message's context; what
    a handler publishes continues that process span. The spans follow the messaging semantic
    conventions (operation types create, send and process); the SDK and its exporters are the
    application's to configure.
    """
    given = dict(properties or {})
    if TRACEPARENT in given:
        custom = TraceContext.parse(given[TRACEPARENT])
        if custom is None:
            raise ConfigError(
                f"message property {TRACEPARENT!r} is not a W3C traceparent "
                f"(00-<32 hex>-<16 hex>-<2 hex>): {given[TRACEPARENT]!r}"
            )
        if TRACESTATE in given and parse_tracestate(given[TRACESTATE]) is None:
            raise ConfigError(
                f"message property {TRACESTATE!r} is not a W3C tracestate: {given[TRACESTATE]!r}"
            )
        return given
    if TRACESTATE in given:
        raise ConfigError(f"message property {TRACESTATE!r} given without {TRACEPARENT!r}")
    context = trace or _active_context()
    if context is None:
        return {**given, TRACEPARENT: new_traceparent()}
    return {**given, **context.properties()}


class _Publishing:
    """The producer span of one message (a no-op without OpenTelemetry)."""

    __slots__ = ("_span",)

    def __init__(self, span: _otel.Span | None) -> None:
        self._span = span

    def describe(self, destination: str, message: Message) -> None:
        """What the span sent: the broker queue and the message's ids and tenant."""
        if self._span is None or not self._span.is_recording():
            return
        self._span.set_attributes(
            {
                "messaging.destination.name": destination,
                "messaging.message.id": message.message_id,
                TENANT_ATTRIBUTE: message.tenant.value,
            }
        )
        if message.correlation_id:
            self._span.set_attribute("messaging.message.conversation_id", message.correlation_id)


_NO_SPAN: Final = nullcontext(_Publishing(None))
"""What publishing gives while no span could record: nothing to open, end or record."""


def publishing(operation: str, queue: str) -> AbstractContextManager[_Publishing]:
    """A PRODUCER span, current while the block builds and sends the message: `send` for one
    message sent on its own, `create` for one message of a batch. An exception leaving the
    block (a refused publish, a broker error) is recorded on it with an error status.

    Until an application sets a tracer provider, OpenTelemetry's span would be a non-recording
    one carrying the caller's own context, which stamp() reads the same without it: none is
    made, which cut the CPU of a batch by more than a third per message."""
    if _otel is None or not _provider_set():
        return _NO_SPAN
    return _producer_span(operation, queue)


@contextmanager
def _producer_span(operation: str, queue: str) -> Iterator[_Publishing]:
    tracer = _otel.get_tracer(_INSTRUMENTATION)
    with tracer.start_as_current_span(
        f"{operation} {queue}",
        kind=_otel.SpanKind.PRODUCER,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            QUEUE_ATTRIBUTE: queue,
        },
    ) as span:
        yield _Publishing(span)


class Processing:
    """One delivery's process span and trace context, current on the worker thread until end().

    Without OpenTelemetry there is no span, only the context: the message's own, or a new trace
    for a message that came without one, so what the handler publishes is still one trace.
    The caller binds the context's trace_id to the log context (the dispatcher, with the
    delivery's other fields, in one call).
    """

    __slots__ = ("_otel_token", "_settled", "_span", "_token", "context")

    def __init__(
        self,
        properties: Mapping[str, str],
        *,
        destination: str,
        queue: str,
        tenant: str,
        message_id: str,
        correlation_id: str,
        attempt: int,
    ) -> None:
        incoming = TraceContext.of(properties)
        self._span: _otel.Span | None = None
        self._otel_token: object = None
        self._settled = False
        context = incoming
        if _otel is not None and incoming is None and not _provider_set():
            # What the branch below comes to without a provider and without the message's own
            # context (the default): no span, an invalid one current, and a new trace.
            self._otel_token = _otel_context.attach(_no_span_context())
        elif _otel is not None:
            parent = _otel_context.Context()  # a worker thread's own context is never a parent
            remote = None
            span: _otel.Span
            if incoming is not None:
                remote = _span_context(incoming)
                span = _otel.NonRecordingSpan(remote)
                parent = _otel.set_span_in_context(span, parent)
            else:
                span = _otel.NonRecordingSpan(_otel.INVALID_SPAN_CONTEXT)
            current = parent
            if _provider_set():
                span = _tracer().start_span(
                    f"process {queue}",
                    context=parent,
                    kind=_otel.SpanKind.CONSUMER,
                    attributes={
                        "messaging.system": MESSAGING_SYSTEM,
                        "messaging.operation.type": "process",
                        "messaging.operation.name": "process",
                        "messaging.destination.name": destination,
                        "messaging.message.id": message_id,
                        "messaging.message.conversation_id": correlation_id,
                        TENANT_ATTRIBUTE: tenant,
                        QUEUE_ATTRIBUTE: queue,
                        "boost.attempt": attempt,
                    },
                )
                current = _otel.set_span_in_context(span, parent)
            # else (no provider, so the message carries a context: see the branch above) what
            # the API's no-op tracer gives back, built without asking it: the parent's span
            self._span = span
            self._otel_token = _otel_context.attach(current)
            # A no-op tracer (the API without an SDK) gives back the parent's context, or an
            # invalid one without a parent: then the message's own context, or a new trace.
            span_context = span.get_span_context()
            if span_context is not remote or incoming is None or incoming.state:
                context = _from_span_context(span_context, incoming) or incoming
            # else the parent's own context came back: it reads back as the message's context
        self.context: TraceContext = context or TraceContext.new()
        self._token = _current.set(self.context)

    def settled(self, name: str, outcome: object) -> None:
        """Record how the delivery was settled (Settler.settle's name, the outcome carried out):
        an outcome with an error (retry, dead letter, quarantine) marks the span failed, with
        the error's type."""
        self._settled = True
        span = self._span
        if span is None or not span.is_recording():
            return
        span.set_attribute(OUTCOME_ATTRIBUTE, name)
        error = getattr(outcome, "error", None)
        if error is not None:
            error_type = str(getattr(error, "type", "") or type(outcome).__name__)
            span.set_attribute("error.type", error_type)
            span.set_status(_otel.Status(_otel.StatusCode.ERROR, f"{name}: {error_type}"))

    def end(self) -> None:
        """End the span and restore the thread's context; a delivery that was never settled
        (its connection failed while settling) ends the span failed."""
        _current.reset(self._token)
        if self._otel_token is not None:
            _otel_context.detach(self._otel_token)  # type: ignore[arg-type]
        span = self._span
        if span is None:
            return
        if not self._settled and span.is_recording():
            span.set_status(_otel.Status(_otel.StatusCode.ERROR, "not settled"))
        span.end()


_process_tracer: _otel.Tracer | None = None
_invalid_span_context: _otel_context.Context | None = None


def _no_span_context() -> _otel_context.Context:
    """An OpenTelemetry context whose current span is the invalid one, made once: what a
    delivery without a trace context runs in while no provider is set."""
    global _invalid_span_context  # noqa: PLW0603  # one per process, immutable
    if _invalid_span_context is None:
        _invalid_span_context = _otel.set_span_in_context(
            _otel.NonRecordingSpan(_otel.INVALID_SPAN_CONTEXT), _otel_context.Context()
        )
    return _invalid_span_context


_provider_known = False
"""A tracer provider was set: OpenTelemetry's is set once per process, and never unset."""
_PROVIDER_VARIABLE: Final = "OTEL_PYTHON_TRACER_PROVIDER"
"""Names a provider in the environment, which the API loads on first use."""
_UNKNOWN: Final = object()


def _provider_set() -> bool:
    """Whether an application set a tracer provider. Until one is set, OpenTelemetry's API
    hands out non-recording spans carrying the parent's context: the dispatcher builds that
    span itself, and the producer makes none, at a fraction of the cost of asking the tracer
    for it on every message."""
    global _provider_known  # noqa: PLW0603  # one per process, like OpenTelemetry's provider
    if _provider_known:
        return True
    # The API's global, read without its environment lookup (a provider named by
    # OTEL_PYTHON_TRACER_PROVIDER is loaded below, on the first call); an API without that
    # global is asked every time.
    unset = getattr(_otel, "_TRACER_PROVIDER", _UNKNOWN) is None
    if unset and not _provider_named():
        return False
    _provider_known = not isinstance(
        _otel.get_tracer_provider(), (_otel.ProxyTracerProvider, _otel.NoOpTracerProvider)
    )
    return _provider_known


@functools.cache
def _provider_named() -> bool:
    """Whether the environment names a tracer provider, read once: as for every setting of the
    environment, at the first message; looking it up on each cost more than half a microsecond
    per message (os.environ encodes the name and raises inside for a missing one). A provider
    set later, in code or by a first get_tracer_provider(), is seen through the API's global."""
    return _PROVIDER_VARIABLE in os.environ


def _tracer() -> _otel.Tracer:
    """The tracer of process spans, looked up once: before a provider is set it is
    OpenTelemetry's proxy, which turns to the provider's own tracer once one is set."""
    global _process_tracer  # noqa: PLW0603  # one per process, like OpenTelemetry's provider
    if _process_tracer is None:
        _process_tracer = _otel.get_tracer(_INSTRUMENTATION)
    return _process_tracer


def _span_context(context: TraceContext) -> _otel.SpanContext:
    state = _otel.TraceState.from_header([context.state]) if context.state else None
    return _otel.SpanContext(
        trace_id=int(context.trace_id, 16),
        span_id=int(context.span_id, 16),
        is_remote=True,
        trace_flags=_otel.TraceFlags(int(context.flags, 16)),
        trace_state=state,
    )


def _from_span_context(
    span_context: _otel.SpanContext, fallback: TraceContext | None = None
) -> TraceContext | None:
    if not span_context.is_valid:
        return None
    state = span_context.trace_state.to_header() if span_context.trace_state else ""
    if not state and fallback is not None:
        state = fallback.state
    return TraceContext(
        f"{span_context.trace_id:032x}",
        f"{span_context.span_id:016x}",
        f"{int(span_context.trace_flags):02x}",
        parse_tracestate(state) or "",
    )


__all__ = [
    "Processing",
    "current_trace",
    "publishing",
    "stamp",
]
