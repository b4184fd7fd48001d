"""DocumentProfessor on the in-memory transport: interpreted and error events, retries when the
blob store is unreachable, dead letters for broken rules files, per-tenant rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from boost_tenancy import (
    ConfigError,
    DispatchSettings,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProducer,
)
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import FailureOutcome, SQLiteErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.blobs import LocalBlobStore, document_key
from services.common.contract import CMD_INTERPRET, EVT_INTERPRETATION_ERROR, EVT_INTERPRETED
from services.professor.processor import DocumentProfessor
from tests.conftest import recorded, wait_until
from tests.unit.services.professor_texts import INVOICE, PURCHASE_ORDER_RULES, PURCHASE_ORDER_TEXT

ACME = TenantId("org-acme")
GLOBEX = TenantId("org-globex")
DOCUMENT = "0b6f6e2c-3a4d-4e5f-8a9b-0c1d2e3f4a5b"
TEXT_KEY = document_key(DOCUMENT, "text.txt")
FAST = RetryPolicy(max_attempts=2, base_delay_ms=20, max_delay_ms=20, jitter=0.0)
SHARED = Routing(Topology.SHARED)
"""One queue per name: the tests read what the professor sent by queue name."""


@dataclass
class Pipeline:
    """The professor running for two tenants, a producer and the broker to look into."""

    broker: InMemoryBroker
    store: SQLiteErrorStore
    blob_dir: Path
    rules_dir: Path
    runner: ProcessorRunner | None = None

    def start(self, *, blob_root: Path | None = None, threshold: float = 0.6) -> None:
        processor = DocumentProfessor(
            LocalBlobStore(blob_root or self.blob_dir), self.rules_dir, threshold
        )
        self.runner = ProcessorRunner(
            processor,
            InMemoryTransport(self.broker),
            [ACME, GLOBEX],
            error_store=self.store,
            settings=RunnerSettings(workers=2, dispatch=DispatchSettings(retry=FAST)),
            routing=SHARED,
        )
        self.runner.start()

    def put_text(self, tenant: TenantId, data: bytes, key: str = TEXT_KEY) -> None:
        LocalBlobStore(self.blob_dir).put(tenant, key, data)

    def send(self, tenant: TenantId, body: dict[str, Any]) -> str:
        transport = InMemoryTransport(self.broker)
        transport.connect()
        try:
            return (
                TenantProducer(transport, routing=SHARED)
                .send(CMD_INTERPRET, tenant, body)
                .message_id
            )
        finally:
            transport.close()

    def events(self, queue: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(dict(m.properties), json.loads(str(m.body))) for m in self.broker.messages(queue)]

    def wait_for(self, queue: str, count: int = 1) -> list[tuple[dict[str, str], dict[str, Any]]]:
        assert wait_until(lambda: len(self.broker.messages(queue)) >= count), queue
        return self.events(queue)


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    broker = InMemoryBroker()
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    (tmp_path / "blobs").mkdir()
    (tmp_path / "rules").mkdir()
    made = Pipeline(broker, store, tmp_path / "blobs", tmp_path / "rules")
    yield made
    if made.runner is not None:
        made.runner.stop(grace_s=5)
    store.close()
    broker.close()


def command(run: int = 1, key: str = TEXT_KEY) -> dict[str, Any]:
    return {"documentUUID": DOCUMENT, "run": run, "textKey": key}


def test_an_invoice_text_is_answered_with_the_interpreted_event(pipeline: Pipeline) -> None:
    pipeline.put_text(ACME, INVOICE.encode())
    pipeline.start()
    sent = pipeline.send(ACME, command(run=2))
    [(properties, body)] = pipeline.wait_for(EVT_INTERPRETED)
    assert properties["tenantUUID"] == "org-acme"
    assert body == {
        "tenantUUID": "org-acme",
        "documentUUID": DOCUMENT,
        "run": 2,
        "documentType": "invoice",
        "confidence": 0.941,
        "fields": {
            "invoiceNumber": "INV-2026-0042",
            "dates": ["2026-03-14", "2026-04-13"],
            "issueDate": "2026-03-14",
            "dueDate": "2026-04-13",
            "total": {"value": "1234.56", "currency": "EUR"},
            "amounts": [
                {"value": "289.00", "currency": "EUR"},
                {"value": "578.00", "currency": "EUR"},
                {"value": "227.50", "currency": "EUR"},
                {"value": "1039.40", "currency": "EUR"},
                {"value": "195.16", "currency": "EUR"},
                {"value": "1234.56", "currency": "EUR"},
            ],
            "iban": ["DE89370400440532013000"],
            "vatIds": ["DE123456789"],
        },
        "needsReview": False,
        "reasons": [],
    }
    assert pipeline.broker.messages(EVT_INTERPRETATION_ERROR) == []
    assert pipeline.store.failures(tenant=ACME) == []
    [event] = pipeline.broker.messages(EVT_INTERPRETED)
    assert event.correlation_id == sent  # the command's id carried on to its answer


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "extracted text is empty"),
        (b" \n\t \n", "extracted text is empty"),
        (b"\xff\xfe\x00broken", "extracted text is not valid UTF-8: invalid start byte"),
    ],
)
def test_unusable_text_is_answered_with_an_interpretation_error(
    pipeline: Pipeline, data: bytes, reason: str
) -> None:
    pipeline.put_text(ACME, data)
    pipeline.start()
    pipeline.send(ACME, command())
    [(properties, body)] = pipeline.wait_for(EVT_INTERPRETATION_ERROR)
    assert properties["tenantUUID"] == "org-acme"
    assert body == {"tenantUUID": "org-acme", "documentUUID": DOCUMENT, "run": 1, "reason": reason}
    assert pipeline.broker.messages(EVT_INTERPRETED) == []


def test_an_unreachable_blob_store_is_retried(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.start(blob_root=tmp_path / "not-mounted")
    sent = pipeline.send(ACME, command())

    def retried() -> bool:
        return bool(pipeline.store.failures(tenant=ACME, outcome=FailureOutcome.RETRY))

    assert wait_until(retried)
    [record] = pipeline.store.failures(tenant=ACME, outcome=FailureOutcome.RETRY)
    assert (record.message_id, record.attempt, record.queue) == (sent, 1, CMD_INTERPRET)
    assert record.error_type == "boost_tenancy.errors.TransientError"
    assert "not-mounted" in record.error_text
    assert pipeline.broker.messages(EVT_INTERPRETED) == []
    assert pipeline.broker.messages(EVT_INTERPRETATION_ERROR) == []


def test_a_broken_tenant_rules_file_dead_letters_naming_the_file(pipeline: Pipeline) -> None:
    rules = pipeline.rules_dir / "org-acme.json"
    rules.write_text('{"rules": [{"documentType": "po", "keywords": {"po": "x"}}]}', "utf-8")
    pipeline.put_text(ACME, INVOICE.encode())
    pipeline.start()
    sent = pipeline.send(ACME, command())
    [(properties, _)] = pipeline.wait_for(dead_letter_queue(CMD_INTERPRET))
    assert properties["boostDeadLetterReason"] == "permanent"
    assert str(rules) in properties["boostError"]
    [record] = recorded(pipeline.store, 1, tenant=ACME, outcome=FailureOutcome.DEAD_LETTER)
    assert record.message_id == sent
    assert record.error_type == "boost_tenancy.errors.PermanentError"
    assert str(rules) in record.error_text
    assert "rules[0].keywords['po']" in record.error_text
    assert pipeline.broker.messages(EVT_INTERPRETED) == []


def test_each_tenant_is_interpreted_with_its_own_rules(pipeline: Pipeline) -> None:
    (pipeline.rules_dir / "org-acme.json").write_text(json.dumps(PURCHASE_ORDER_RULES), "utf-8")
    for tenant in (ACME, GLOBEX):
        pipeline.put_text(tenant, PURCHASE_ORDER_TEXT.encode())
    pipeline.start()
    pipeline.send(ACME, command())
    pipeline.send(GLOBEX, command())
    events = pipeline.wait_for(EVT_INTERPRETED, count=2)
    by_tenant = {props["tenantUUID"]: body for props, body in events}
    assert by_tenant["org-acme"]["documentType"] == "purchase_order"
    assert by_tenant["org-acme"]["needsReview"] is False
    assert by_tenant["org-globex"]["documentType"] == "other"
    assert by_tenant["org-globex"]["needsReview"] is True
    assert by_tenant["org-globex"]["reasons"] == ["no document type matched"]


def test_a_missing_text_blob_fails_the_document_instead_of_leaving_it_waiting(
    pipeline: Pipeline,
) -> None:
    pipeline.start()
    pipeline.send(ACME, command())
    [(properties, body)] = pipeline.wait_for(EVT_INTERPRETATION_ERROR)
    assert properties["tenantUUID"] == "org-acme"
    assert body["reason"].startswith("extracted text unavailable")
    assert "does not exist" in body["reason"]
    assert pipeline.events(dead_letter_queue(CMD_INTERPRET)) == []


@pytest.mark.parametrize(
    "body",
    [
        {"documentUUID": "not-a-uuid", "run": 1, "textKey": TEXT_KEY},
        {"documentUUID": DOCUMENT, "run": 0, "textKey": TEXT_KEY},
        {"documentUUID": DOCUMENT, "run": 1},
        {"documentUUID": DOCUMENT, "run": 1, "textKey": "../other-tenant/text.txt"},
    ],
)
def test_an_invalid_command_is_dead_lettered(pipeline: Pipeline, body: dict[str, Any]) -> None:
    pipeline.start()
    pipeline.send(ACME, body)
    [(properties, _)] = pipeline.wait_for(dead_letter_queue(CMD_INTERPRET))
    assert properties["boostDeadLetterReason"] == "permanent"


@pytest.mark.parametrize("threshold", [-0.1, 1.1])
def test_threshold_out_of_range_is_a_config_error(tmp_path: Path, threshold: float) -> None:
    with pytest.raises(ConfigError, match="review threshold"):
        DocumentProfessor(LocalBlobStore(tmp_path), None, threshold)
