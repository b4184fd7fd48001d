"""TenantProducer: the only way the toolkit sends, and a send always names its tenant.

Every message carries the tenantUUID property (and in JSON bodies the tenantUUID field), is
persistent, and is confirmed by the broker before send returns; a batch is confirmed at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from boost_tenancy.messages import Message, check_queue_name
from boost_tenancy.processor import build_message
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Outgoing, Transport

JsonBody = Mapping[str, Any]


@dataclass(slots=True)
class ProducerBatch:
    """Messages collected for one confirmation; nothing is sent if the block raises."""

    _items: list[tuple[str, Message]] = field(default_factory=list)

    def send(
        self,
        queue: str,
        tenant: TenantId | str,
        body: JsonBody | str | bytes,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Message:
        """Add a message of tenant to the batch; sent when the batch block ends."""
        message = build_message(
            tenant,
            body,
            message_id=message_id,
            correlation_id=correlation_id,
            properties=properties,
        )
        self._items.append((check_queue_name(queue), message))
        return message

    def __len__(self) -> int:
        return len(self._items)


class TenantProducer:
    """Sends tenant-stamped messages through a connected transport."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def send(
        self,
        queue: str,
        tenant: TenantId | str,
        body: JsonBody | str | bytes,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        properties: Mapping[str, str] | None = None,
        delay_ms: int = 0,
    ) -> Message:
        """Send one message of tenant and wait for the broker's confirmation.

        A mapping body becomes JSON text with tenantUUID added; a str body travels as a JMS
        TextMessage, bytes as a BytesMessage. Pass message_id to make a re-send idempotent.
        """
        message = build_message(
            tenant,
            body,
            message_id=message_id,
            correlation_id=correlation_id,
            properties=properties,
        )
        self._transport.send(check_queue_name(queue), message.to_wire(), delay_ms=max(0, delay_ms))
        return message

    @contextmanager
    def batch(self) -> Iterator[ProducerBatch]:
        """Collect sends and confirm them together (one broker transaction) when the block ends."""
        batch = ProducerBatch()
        yield batch
        items: list[Outgoing] = [(q, m.to_wire(), 0) for q, m in batch._items]
        self._transport.send_batch([(q, w) for q, w, _ in items])

    def for_tenant(self, tenant: TenantId | str) -> TenantPublisher:
        """A sender bound to one tenant, for code that must not choose tenants itself."""
        return TenantPublisher(self, TenantId.parse(tenant))


@dataclass(frozen=True, slots=True)
class TenantPublisher:
    """A TenantProducer bound to one tenant."""

    producer: TenantProducer
    tenant: TenantId

    def send(
        self,
        queue: str,
        body: JsonBody | str | bytes,
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
