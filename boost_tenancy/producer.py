"""TenantProducer: the only way the toolkit sends, and a send always names its tenant.

Every message carries the tenantUUID property (and in JSON bodies the tenantUUID field), is
persistent, and is confirmed by the broker before send returns; a batch is confirmed at once.
With a time-to-live, every message carries its tenant's absolute expiry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from boost_tenancy.expiry import ExpiryPolicy
from boost_tenancy.messages import Message, MessageBody, PublishCheck
from boost_tenancy.observability.tracing import publishing
from boost_tenancy.publishing import AdmittedSend, Publisher, default_steps
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import BatchSink, Transport

JsonBody = Mapping[str, Any]
"""A JSON object body; MessageBody (messages.py) is everything a send takes."""


@dataclass(slots=True)
class ProducerBatch:
    """Messages confirmed together when the batch block ends; none stored if the block raises."""

    _sink: BatchSink
    _producer: TenantProducer
    _count: int = 0

    def send(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Message:
        """Add a message of tenant to the batch; sent when the batch block ends. Over a
        publishing limit it raises PublishRefusedError and the batch stays usable without it."""
        with publishing("create", queue) as span:  # each message its own creation context
            admitted = self._producer.admit(
                queue,
                tenant,
                body,
                message_id=message_id,
                correlation_id=correlation_id,
                properties=properties,
            )
            span.describe(admitted.queue, admitted.message)
        self._sink.add(admitted.queue, admitted.wire)
        self._count += 1
        return admitted.message

    def __len__(self) -> int:
        return self._count


class TenantProducer:
    """Sends tenant-stamped messages through a connected transport.

    queue names are logical: routing picks the broker queue (the shared queue, or the tenant's
    own tenant.<tenant>.<queue>). With a guard, every send is checked against its tenant's
    publishing limits first: over one, PublishRefusedError is raised and nothing is sent. With
    a ttl (quotas.MessageTtl), every message is stamped with the absolute expiry its tenant's
    time-to-live gives it when it is built (admit, send, a batch's send).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        routing: Routing = DEFAULT_ROUTING,
        guard: PublishCheck | None = None,
        ttl: ExpiryPolicy | None = None,
        middleware: Sequence[object] = (),
    ) -> None:
        """middleware: publish steps of your own (boost_tenancy.publishing), outside the
        default trace, ttl and limits steps unless placed (chain_order.place)."""
        self._transport = transport
        self._routing = routing
        self._ttl = ttl
        self._publisher = Publisher(routing, (*middleware, *default_steps(guard, ttl)))

    @property
    def routing(self) -> Routing:
        return self._routing

    def ttl_s_of(self, tenant: TenantId | str) -> float:
        """The time-to-live, in seconds, of what this producer sends for tenant now; 0: none."""
        if self._ttl is None:
            return 0.0
        ttl_ms = self._ttl.ttl_ms_of(TenantId.parse(tenant))
        return 0.0 if ttl_ms is None else ttl_ms / 1000

    def send(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> Message:
        """Send one message of tenant and wait for the broker's confirmation.

        A mapping, dataclass or pydantic model body becomes JSON text with tenantUUID added
        (Decimal, datetime, UUID and the other values of boost_tenancy.codec encoded); a str
        body travels as a JMS TextMessage, bytes as a BytesMessage. Pass message_id to make a
        re-send idempotent.
        """
        with publishing("send", queue) as span:
            admitted = self.admit(
                queue,
                tenant,
                body,
                message_id=message_id,
                correlation_id=correlation_id,
                properties=properties,
                delay_ms=delay_ms,
            )
            span.describe(admitted.queue, admitted.message)
            return self.send_admitted(admitted)

    def admit(
        self,
        queue: str,
        tenant: TenantId | str,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> AdmittedSend:
        """Build a message and pass it through the publishing limits without sending it:
        PublishRefusedError now, before the caller stores anything that depends on the send (the
        IntegrationsServer admits before it accepts an upload); send_admitted sends it."""
        return self._publisher.admit(
            queue,
            TenantId.parse(tenant),
            body,
            message_id=message_id,
            correlation_id=correlation_id,
            properties=properties,
            delay_ms=delay_ms,
        )

    def send_admitted(self, admitted: AdmittedSend) -> Message:
        """Send a message admit() let through and wait for the broker's confirmation."""
        self._transport.send(admitted.queue, admitted.wire, delay_ms=admitted.delay_ms)
        return admitted.message

    @contextmanager
    def batch(self, *, atomic: bool | None = None) -> Iterator[ProducerBatch]:
        """Collect sends and confirm them together when the block ends; nothing on an exception.

        atomic=True: one broker transaction that streams while the block runs, committed at
        its end and aborted if it raises: all messages stored or none; refused by a broker
        without transactions (RabbitMQ's AMQP 1.0 plugin). atomic=False: plain sends confirmed
        together; a failure midway may leave the first part stored (re-send with the same
        message ids to stay idempotent). None (default): atomic where the broker can do it.
        """
        if atomic is None:
            atomic = self._transport.capabilities.atomic_batches
        sink = self._transport.open_batch(atomic=atomic)
        try:
            yield ProducerBatch(sink, self)
        except BaseException:
            sink.abort()
            raise
        sink.commit()

    def for_tenant(self, tenant: TenantId | str) -> OneTenantProducer:
        """A sender bound to one tenant, for code that must not choose tenants itself."""
        return OneTenantProducer(self, TenantId.parse(tenant))


@dataclass(frozen=True, slots=True)
class OneTenantProducer:
    """A TenantProducer bound to one tenant."""

    producer: TenantProducer
    tenant: TenantId

    def send(
        self,
        queue: str,
        body: MessageBody,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> Message:
        """Send one message of the bound tenant."""
        return self.producer.send(
            queue,
            self.tenant,
            body,
            message_id=message_id,
            correlation_id=correlation_id,
            properties=properties,
            delay_ms=delay_ms,
        )
