"""The publish direction of the middleware chain: what every message the toolkit sends passes
through, whoever sends it (a TenantProducer, a handler's ctx.publish).

Its broker queue is resolved first (a name the routing refuses fails there), then the steps run,
outermost first, around the build of the message with its tenant stamped. The default steps:
"trace" stamps the trace context it continues, "ttl" its tenant's expiry, "limits" checks its
tenant's publishing limits on the built message (PublishRefusedError: nothing is sent). A step
may change the draft before call_next, and look at or refuse what call_next built after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from boost_tenancy.chain_order import arrange, hook_of, name_of
from boost_tenancy.expiry import ExpiryPolicy
from boost_tenancy.frozen import fast_init
from boost_tenancy.messages import Message, MessageBody, PublishCheck, WireMessage, build_message
from boost_tenancy.observability.trace_context import TraceContext
from boost_tenancy.observability.tracing import stamp
from boost_tenancy.routing import Routing
from boost_tenancy.tenancy import TenantId


@dataclass(slots=True, kw_only=True)
class Draft:
    """A message on its way out, before it is built: what a publish step may change, in place
    or as a copy (dataclasses.replace) handed to call_next. Each message sent has a draft of its
    own, made when it is admitted; nothing else holds it."""

    queue: str
    """The logical queue it is published to."""
    broker_queue: str
    """The broker queue routing picked for it."""
    tenant: TenantId
    body: MessageBody
    message_id: str | None = None
    correlation_id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    expires_at_ms: int | None = None
    trace: TraceContext | None = None
    """The trace context it continues; None: the caller's current one, else a new trace."""
    delay_ms: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class AdmittedSend:
    """A message through the publish steps, not sent yet (TenantProducer.admit)."""

    queue: str
    """The broker queue routing picked."""
    message: Message
    wire: WireMessage
    delay_ms: int


PublishNext = Callable[[Draft], AdmittedSend]
"""What a publish step's call_next is: the rest of the steps and the build."""


class PublishStep(Protocol):
    """A piece of the publish direction: a Middleware (processing/middleware.py) that overrides
    publish, or any object with this method."""

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend: ...


class TraceStamp:
    """ "trace": the trace context the message continues, as its traceparent and tracestate."""

    name = "trace"

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        draft.properties = stamp(draft.properties, draft.trace)
        return call_next(draft)


@dataclass(frozen=True, slots=True)
class ExpiryStamp:
    """ "ttl": the absolute expiry its tenant's time-to-live gives the message now (none without
    a policy)."""

    ttl: ExpiryPolicy | None
    name = "ttl"

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        if self.ttl is None:
            return call_next(draft)
        draft.expires_at_ms = self.ttl.expiry_of(draft.tenant)
        return call_next(draft)


@dataclass(frozen=True, slots=True)
class LimitsCheck:
    """ "limits": its tenant's publishing limits, checked on the built message (none without a
    guard): over one, PublishRefusedError and nothing is sent."""

    guard: PublishCheck | None
    name = "limits"

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        admitted = call_next(draft)
        if self.guard is not None:
            self.guard.check(draft.tenant, draft.queue, (admitted.wire,))
        return admitted


def default_steps(guard: PublishCheck | None, ttl: ExpiryPolicy | None) -> tuple[object, ...]:
    """The named default publish steps, outermost first: trace, ttl, limits."""
    return (TraceStamp(), ExpiryStamp(ttl), LimitsCheck(guard))


def _build(draft: Draft) -> AdmittedSend:
    message = build_message(
        draft.tenant,
        draft.body,
        message_id=draft.message_id,
        correlation_id=draft.correlation_id,
        properties=draft.properties,
        expires_at_ms=draft.expires_at_ms,
    )
    return AdmittedSend(draft.broker_queue, message, message.to_wire(), max(0, draft.delay_ms))


def _bind(
    step: Callable[[Draft, PublishNext], AdmittedSend], call_next: PublishNext
) -> PublishNext:
    def call(draft: Draft) -> AdmittedSend:
        return step(draft, call_next)

    return call


class Publisher:
    """The publish direction of one sender, built once: its steps in chain order around the
    build. Pieces without a publish hook are left out; a step that does nothing (no policy
    behind it) keeps its name for placing others, and costs nothing per message."""

    def __init__(self, routing: Routing, pieces: Iterable[object]) -> None:
        self._routing = routing
        self.steps = tuple(p for p in arrange(pieces) if hook_of(p, "publish") is not None)
        call: PublishNext = _build
        for step in reversed(self.steps):
            if isinstance(step, ExpiryStamp | LimitsCheck) and _idle(step):
                continue
            hook = hook_of(step, "publish")
            assert hook is not None
            call = _bind(hook, call)
        self._call = call

    @property
    def names(self) -> tuple[str, ...]:
        """The steps' names, outermost first."""
        return tuple(name_of(step) for step in self.steps)

    def admit(
        self,
        queue: str,
        tenant: TenantId,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
        trace: TraceContext | None = None,
        delay_ms: int = 0,
    ) -> AdmittedSend:
        """A message of tenant to the logical queue, through the steps and built, not sent.
        Its broker queue is resolved first: a name the routing refuses fails before any step."""
        return self._call(
            Draft(
                queue=queue,
                broker_queue=self._routing.physical(queue, tenant),
                tenant=tenant,
                body=body,
                message_id=message_id,
                correlation_id=correlation_id,
                properties=properties or {},
                trace=trace,
                delay_ms=delay_ms,
            )
        )


def _idle(step: ExpiryStamp | LimitsCheck) -> bool:
    return (step.ttl if isinstance(step, ExpiryStamp) else step.guard) is None


__all__ = [
    "AdmittedSend",
    "Draft",
    "ExpiryStamp",
    "LimitsCheck",
    "PublishNext",
    "PublishStep",
    "Publisher",
    "TraceStamp",
    "default_steps",
]
