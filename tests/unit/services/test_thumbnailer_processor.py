"""Thumbnailer on the in-memory transport: stored PNGs, dead letters with their reason, retries
and tenant-scoped blob keys."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from boost_tenancy import TenantId
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import FailureOutcome
from services.common.blobs import document_key
from services.common.contract import CMD_THUMBNAIL_GENERATE
from services.thumbnailer.processor import Thumbnailer
from tests.conftest import recorded, wait_until
from tests.unit.services.processor_support import CONTENT_TYPES, Harness, new_document

ORG_A = TenantId("org-a")
ORG_B = TenantId("org-b")
DLQ = dead_letter_queue(CMD_THUMBNAIL_GENERATE)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    opened = Harness(Thumbnailer, tmp_path, tenants=("org-a", "org-b"))
    yield opened
    opened.close()


def command(document: str, key: str, sample: str) -> dict[str, object]:
    return {"documentUUID": document, "blobKey": key, "contentType": CONTENT_TYPES[sample]}


@pytest.mark.parametrize(("sample", "size"), [("photo.png", (256, 192)), ("invoice.pdf", None)])
def test_thumbnail_is_stored_next_to_the_original(
    harness: Harness, sample: str, size: tuple[int, int] | None
) -> None:
    document = new_document()
    key = harness.upload("org-a", sample, document)
    harness.send(CMD_THUMBNAIL_GENERATE, "org-a", command(document, key, sample))
    thumbnail_key = document_key(document, "thumbnail.png")
    assert wait_until(lambda: harness.blobs.exists(ORG_A, thumbnail_key))
    harness.wait_idle(CMD_THUMBNAIL_GENERATE)

    image = Image.open(io.BytesIO(harness.blobs.get(ORG_A, thumbnail_key)))
    assert image.format == "PNG"
    assert max(image.size) <= 256
    if size is not None:
        assert image.size == size
    assert (harness.blob_root / "org-a" / "documents" / document / "thumbnail.png").is_file()
    assert not harness.blobs.exists(ORG_B, thumbnail_key)
    assert harness.messages(DLQ) == []
    assert harness.errors.failures(tenant=ORG_A) == []


@pytest.mark.parametrize(
    ("sample", "reason"),
    [
        ("corrupt.pdf", "cannot make a thumbnail: cannot read PDF"),
        ("receipt.txt", "cannot make a thumbnail: unsupported content type text/plain"),
    ],
)
def test_input_that_cannot_be_previewed_is_dead_lettered_with_its_reason(
    harness: Harness, sample: str, reason: str
) -> None:
    document = new_document()
    key = harness.upload("org-a", sample, document)
    sent = harness.send(CMD_THUMBNAIL_GENERATE, "org-a", command(document, key, sample))
    [dead] = harness.wait_for(DLQ)
    harness.wait_idle(CMD_THUMBNAIL_GENERATE)

    assert dead.properties["tenantUUID"] == "org-a"
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert dead.properties["boostOriginalQueue"] == CMD_THUMBNAIL_GENERATE
    assert dead.properties["boostErrorType"] == "boost_tenancy.errors.PermanentError"
    assert reason in dead.properties["boostError"]
    assert dead.properties["boostAttempt"] == "1"  # permanent: never retried
    [record] = recorded(harness.errors, 1, tenant=ORG_A, message_id=sent)
    assert record.outcome is FailureOutcome.DEAD_LETTER
    assert reason in record.error_text
    assert not harness.blobs.exists(ORG_A, document_key(document, "thumbnail.png"))


def test_unavailable_blob_store_is_retried_then_dead_lettered_as_exhausted(
    harness: Harness,
) -> None:
    document = new_document()
    key = harness.upload("org-a", "photo.png", document)
    harness.remove_blob_root()
    sent = harness.send(CMD_THUMBNAIL_GENERATE, "org-a", command(document, key, "photo.png"))
    [dead] = harness.wait_for(DLQ)

    records = recorded(harness.errors, 3, tenant=ORG_A, message_id=sent)
    assert [(r.attempt, r.outcome) for r in records] == [
        (1, FailureOutcome.RETRY),
        (2, FailureOutcome.RETRY),
        (3, FailureOutcome.DEAD_LETTER),
    ]
    assert all(r.error_type == "boost_tenancy.errors.TransientError" for r in records)
    assert dead.properties["boostDeadLetterReason"] == "exhausted"


def test_another_tenants_blob_key_is_not_readable(harness: Harness) -> None:
    document = new_document()
    key = harness.upload("org-a", "photo.png", document)
    harness.send(CMD_THUMBNAIL_GENERATE, "org-b", command(document, key, "photo.png"))
    [dead] = harness.wait_for(DLQ)
    assert dead.properties["tenantUUID"] == "org-b"
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert "of tenant org-b does not exist" in dead.properties["boostError"]
    assert not harness.blobs.exists(ORG_A, document_key(document, "thumbnail.png"))
    assert not harness.blobs.exists(ORG_B, document_key(document, "thumbnail.png"))


def test_command_without_content_type_is_dead_lettered(harness: Harness) -> None:
    document = new_document()
    key = harness.upload("org-a", "photo.png", document)
    harness.send(CMD_THUMBNAIL_GENERATE, "org-a", {"documentUUID": document, "blobKey": key})
    [dead] = harness.wait_for(DLQ)
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert "field 'contentType' must be str" in dead.properties["boostError"]
