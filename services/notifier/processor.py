"""The Notifier consumes each tenant's outcome events and hands them to a sink (a log by default).

It is where a deployment would send e-mails or webhooks; in the sample it logs, and tests plug in
a recording sink to check that every tenant hears only of its own documents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from boost_tenancy import HandlerContext, IncomingMessage, TenantId, TenantProcessor
from services.common.contract import (
    EVT_FAILED,
    EVT_NEEDS_REVIEW,
    EVT_PROCESSING_STARTED,
    EVT_READY,
    document_id,
)

Sink = Callable[[TenantId, str, dict[str, Any]], None]


class Notifier(TenantProcessor):
    """Receives processing.started, ready, needs.review and failed events of its tenants."""

    queues = (EVT_PROCESSING_STARTED, EVT_READY, EVT_NEEDS_REVIEW, EVT_FAILED)

    def __init__(self, sink: Sink | None = None) -> None:
        self._sink = sink

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        body = message.data
        document = document_id(body.get("documentUUID") if isinstance(body, dict) else None)
        if self._sink is not None:
            self._sink(ctx.tenant, message.queue, body)
        ctx.log.info("document_event", queue=message.queue, document=document)
