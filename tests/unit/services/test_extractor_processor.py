"""DocumentExtractor on the in-memory transport: events, text blobs, dead letters, retries and
tenant-scoped blob keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import RetryPolicy, TenantId
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import FailureOutcome
from services.common.blobs import document_key
from services.common.contract import CMD_EXTRACT_TEXT, EVT_TEXT_ERROR, EVT_TEXT_EXTRACTED
from services.extractor.processor import DocumentExtractor
from tests.conftest import recorded, wait_until
from tests.unit.services.processor_support import CONTENT_TYPES, Harness, new_document

ORG_A = TenantId("org-a")
ORG_B = TenantId("org-b")


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    opened = Harness(DocumentExtractor, tmp_path, tenants=("org-a", "org-b"))
    yield opened
    opened.close()


def command(document: str, key: str, sample: str, run: int = 1) -> dict[str, object]:
    return {
        "documentUUID": document,
        "run": run,
        "blobKey": key,
        "fileName": sample,
        "contentType": CONTENT_TYPES[sample],
    }


def test_invoice_text_is_stored_under_the_tenant_and_announced(harness: Harness) -> None:
    document = new_document()
    key = harness.upload("org-a", "invoice.pdf", document)
    sent = harness.send(CMD_EXTRACT_TEXT, "org-a", command(document, key, "invoice.pdf", run=2))
    [event] = harness.wait_for(EVT_TEXT_EXTRACTED)
    harness.wait_idle(CMD_EXTRACT_TEXT)

    text_key = document_key(document, "text.txt")
    text = harness.blobs.get(ORG_A, text_key).decode("utf-8")
    assert "Invoice number: INV-2026-0042" in text
    assert "IBAN: DE89 3704 0044 0532 0130 00" in text
    assert (harness.blob_root / "org-a" / "documents" / document / "text.txt").is_file()
    assert not harness.blobs.exists(ORG_B, text_key)

    assert harness.bodies(EVT_TEXT_EXTRACTED) == [
        {
            "documentUUID": document,
            "run": 2,
            "textKey": text_key,
            "chars": len(text),
            "tenantUUID": "org-a",
        }
    ]
    assert event.properties["tenantUUID"] == "org-a"
    assert event.correlation_id == "corr-1"
    assert event.properties["boostMessageId"] != sent
    assert harness.messages(EVT_TEXT_ERROR) == []
    assert harness.errors.failures(tenant=ORG_A) == []


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("receipt.txt", "TOTAL 23.40 EUR"),
        ("letter.html", "Dear Ms. Example,"),
        ("contract.docx", "SERVICE AGREEMENT"),
    ],
)
def test_every_text_sample_is_extracted(harness: Harness, sample: str, expected: str) -> None:
    document = new_document()
    key = harness.upload("org-a", sample, document)
    harness.send(CMD_EXTRACT_TEXT, "org-a", command(document, key, sample))
    harness.wait_for(EVT_TEXT_EXTRACTED)
    [body] = harness.bodies(EVT_TEXT_EXTRACTED)
    assert expected in harness.blobs.get(ORG_A, body["textKey"]).decode("utf-8")


@pytest.mark.parametrize(
    ("sample", "reason"),
    [
        ("photo.png", "unsupported content type image/png (photo.png)"),
        ("corrupt.pdf", "cannot read PDF: "),
    ],
)
def test_document_without_text_is_reported_and_the_command_acknowledged(
    harness: Harness, sample: str, reason: str
) -> None:
    document = new_document()
    key = harness.upload("org-a", sample, document)
    harness.send(CMD_EXTRACT_TEXT, "org-a", command(document, key, sample, run=3))
    [event] = harness.wait_for(EVT_TEXT_ERROR)
    harness.wait_idle(CMD_EXTRACT_TEXT)

    [body] = harness.bodies(EVT_TEXT_ERROR)
    assert body["documentUUID"] == document
    assert body["run"] == 3
    assert body["tenantUUID"] == "org-a"
    assert reason in body["reason"]
    assert event.properties["tenantUUID"] == "org-a"
    assert not harness.blobs.exists(ORG_A, document_key(document, "text.txt"))
    assert harness.messages(EVT_TEXT_EXTRACTED) == []
    assert harness.messages(dead_letter_queue(CMD_EXTRACT_TEXT)) == []
    assert harness.errors.failures(tenant=ORG_A) == []  # a handled outcome, not a failure


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"documentUUID": "not-a-uuid"}, "documentUUID must be a lowercase UUID"),
        ({"run": 0}, "field 'run' must be at least 1"),
        ({"fileName": None}, "field 'fileName' must be str"),
        ({"blobKey": "../org-b/secret"}, "invalid blob key"),
    ],
)
def test_malformed_command_is_dead_lettered_as_permanent(
    harness: Harness, change: dict[str, object], error: str
) -> None:
    document = new_document()
    key = harness.upload("org-a", "receipt.txt", document)
    harness.send(CMD_EXTRACT_TEXT, "org-a", {**command(document, key, "receipt.txt"), **change})
    [dead] = harness.wait_for(dead_letter_queue(CMD_EXTRACT_TEXT))
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert error in dead.properties["boostError"]
    [record] = recorded(harness.errors, 1, tenant=ORG_A)
    assert record.outcome is FailureOutcome.DEAD_LETTER
    assert harness.messages(EVT_TEXT_EXTRACTED) == []


def test_another_tenants_blob_key_is_not_readable(harness: Harness) -> None:
    document = new_document()
    key = harness.upload("org-a", "invoice.pdf", document)
    # org-b names org-a's key: keys resolve under the sender's tenant, so the blob is missing.
    harness.send(CMD_EXTRACT_TEXT, "org-b", command(document, key, "invoice.pdf"))
    [dead] = harness.wait_for(dead_letter_queue(CMD_EXTRACT_TEXT))
    assert dead.properties["tenantUUID"] == "org-b"
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert "of tenant org-b does not exist" in dead.properties["boostError"]
    [record] = recorded(harness.errors, 1, tenant=ORG_B)
    assert record.error_type == "boost_tenancy.errors.PermanentError"
    assert harness.errors.failures(tenant=ORG_A) == []
    assert harness.messages(EVT_TEXT_EXTRACTED) == []
    assert not harness.blobs.exists(ORG_B, document_key(document, "text.txt"))
    assert not harness.blobs.exists(ORG_A, document_key(document, "text.txt"))


def test_unavailable_blob_store_is_retried_until_it_comes_back(tmp_path: Path) -> None:
    # A slower backoff than the other tests, so the store can be restored between attempts.
    harness = Harness(
        DocumentExtractor,
        tmp_path,
        retry=RetryPolicy(max_attempts=5, base_delay_ms=400, max_delay_ms=800, jitter=0.0),
    )
    try:
        document = new_document()
        key = harness.upload("org-a", "receipt.txt", document)
        original = harness.blobs.get(ORG_A, key)
        harness.remove_blob_root()
        sent = harness.send(CMD_EXTRACT_TEXT, "org-a", command(document, key, "receipt.txt"))
        assert wait_until(lambda: len(harness.errors.failures(tenant=ORG_A)) >= 1)

        harness.blob_root.mkdir()
        harness.blobs.put(ORG_A, key, original)
        harness.wait_for(EVT_TEXT_EXTRACTED)

        records = recorded(harness.errors, 1, tenant=ORG_A, message_id=sent)
        assert records, "the failed attempt was not recorded"
        assert all(r.outcome is FailureOutcome.RETRY for r in records)
        assert all(r.error_type == "boost_tenancy.errors.TransientError" for r in records)
        assert "is not available" in records[0].error_text
        assert harness.messages(dead_letter_queue(CMD_EXTRACT_TEXT)) == []
        assert harness.messages(EVT_TEXT_ERROR) == []
    finally:
        harness.close()


def test_redelivered_command_rewrites_the_same_blob_and_event_id(harness: Harness) -> None:
    document = new_document()
    key = harness.upload("org-a", "letter.html", document)
    body = command(document, key, "letter.html")
    message_id = harness.send(CMD_EXTRACT_TEXT, "org-a", body)
    harness.wait_for(EVT_TEXT_EXTRACTED)
    harness.producer.send(CMD_EXTRACT_TEXT, "org-a", body, message_id=message_id)
    events = harness.wait_for(EVT_TEXT_EXTRACTED, count=2)
    assert events[0].properties["boostMessageId"] == events[1].properties["boostMessageId"]
    assert harness.bodies(EVT_TEXT_EXTRACTED)[0] == harness.bodies(EVT_TEXT_EXTRACTED)[1]
