"""Typed messages against the real broker: a processor with a message model handles a body a
producer sent as a model (Decimal, datetime and UUID inside), and dead-letters at once, on its
first attempt and with the validation errors recorded, a body that does not fit the model."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import DEAD_LETTER_REASON_PROPERTY, MESSAGE_ID_PROPERTY
from boost_tenancy.resilience.dead_letter import DeadLetterReason, dead_letter_queue
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.resilience.records import FailureOutcome
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until
from tests.integration.worker_support import read_queue

pytestmark = pytest.mark.broker

ORG_A = TenantId("org-A")


@dataclasses.dataclass
class Invoice:
    invoiceUUID: uuid.UUID  # noqa: N815  # the wire's name
    amount: Decimal
    due: dt.datetime


class Billing(TenantProcessor[Invoice]):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.seen: list[Invoice] = []
        self.lock = threading.Lock()

    def handle(self, message: IncomingMessage[Invoice], ctx: HandlerContext) -> None:
        with self.lock:
            self.seen.append(message.model)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteErrorStore]:
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()


def test_a_model_processor_handles_models_and_dead_letters_an_invalid_body_at_once(
    stomp_settings: StompSettings, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("typed")
    processor = Billing(queue)
    runner = ProcessorRunner(
        processor,
        StompTransport(stomp_settings),
        [ORG_A],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=5),
        route_shared=False,
        redrive_parked=False,
    )
    invoice = Invoice(
        invoiceUUID=uuid.uuid4(),
        amount=Decimal("1234.5600000000000000001"),
        due=dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC),
    )
    transport = StompTransport(stomp_settings)
    transport.connect()
    runner.start()
    try:
        producer = TenantProducer(transport)
        producer.send(queue, ORG_A, invoice)
        bad = producer.send(queue, ORG_A, {"invoiceUUID": "not-a-uuid", "amount": "1"})
        assert wait_until(lambda: len(processor.seen) == 1, timeout=20)
        assert wait_until(lambda: len(store.failures(tenant=ORG_A, message_id=bad.message_id)))
    finally:
        assert runner.stop(grace_s=10)
        transport.close()
    assert processor.seen == [invoice], "every digit of the Decimal, the datetime and the UUID"
    (record,) = store.failures(tenant=ORG_A, message_id=bad.message_id)
    assert (record.attempt, record.outcome) == (1, FailureOutcome.DEAD_LETTER)
    assert "invoiceUUID: Invalid UUID" in record.error_text
    own = DEFAULT_ROUTING.physical(queue, ORG_A)
    (dead,) = read_queue(stomp_settings, dead_letter_queue(own), tenant="org-A", expect=1)
    assert dead.properties[MESSAGE_ID_PROPERTY] == bad.message_id
    assert dead.properties[DEAD_LETTER_REASON_PROPERTY] == DeadLetterReason.INVALID.value
    assert json.loads(str(dead.body))["invoiceUUID"] == "not-a-uuid", "the body kept as it came"
