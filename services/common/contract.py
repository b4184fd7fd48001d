"""The document pipeline's wire contract: queue names, message bodies and document states.

Bodies are JSON objects; the toolkit adds tenantUUID to each. Every command carries the
document's processing run (`run`), and every event echoes it, so the DocumentManager can ignore
an event of an earlier run after a retry.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Final

from boost_tenancy import PermanentError

# Queues (seed 001, "Service-by-Service Implementation").
CMD_DOCUMENT_PROCESS: Final = "cmd.document.process"
CMD_DOCUMENT_RETRY: Final = "cmd.document.retry"
CMD_THUMBNAIL_GENERATE: Final = "cmd.thumbnail.generate"
CMD_EXTRACT_TEXT: Final = "cmd.document.extractText"
CMD_INTERPRET: Final = "cmd.document.interpret"
EVT_TEXT_EXTRACTED: Final = "evt.document.text.extracted"
EVT_TEXT_ERROR: Final = "evt.document.text.error"
EVT_INTERPRETED: Final = "evt.document.interpreted"
EVT_INTERPRETATION_ERROR: Final = "evt.document.interpretation.error"
EVT_PROCESSING_STARTED: Final = "evt.document.processing.started"
EVT_READY: Final = "evt.document.ready"
EVT_NEEDS_REVIEW: Final = "evt.document.needs.review"
EVT_FAILED: Final = "evt.document.failed"

ROUTED_QUEUES: Final = (
    CMD_DOCUMENT_PROCESS,
    CMD_DOCUMENT_RETRY,
    CMD_THUMBNAIL_GENERATE,
    CMD_EXTRACT_TEXT,
    CMD_INTERPRET,
    EVT_TEXT_EXTRACTED,
    EVT_TEXT_ERROR,
    EVT_INTERPRETED,
    EVT_INTERPRETATION_ERROR,
    EVT_PROCESSING_STARTED,
    EVT_READY,
    EVT_NEEDS_REVIEW,
    EVT_FAILED,
)
"""Every queue of the pipeline: all routed (the default topology), so the project's Classic
broker stores each tenant's messages sent to them in its own queue at send time (its
TenantRoutingPlugin, docs/fairness.md)."""


# -- bodies, by queue: every field required; what boost-tenancy asyncapi publishes for them ---
@dataclass(frozen=True)
class ProcessDocument:
    """Start processing an uploaded document (the IntegrationsServer sends it)."""

    documentUUID: str  # noqa: N815  # the wire names of the BOOST bodies
    blobKey: str  # noqa: N815
    fileName: str  # noqa: N815
    contentType: str  # noqa: N815


@dataclass(frozen=True)
class RetryDocument:
    """Run a failed document through the pipeline again."""

    documentUUID: str  # noqa: N815


@dataclass(frozen=True)
class GenerateThumbnail:
    """Render a document's first page as a thumbnail."""

    documentUUID: str  # noqa: N815
    blobKey: str  # noqa: N815
    contentType: str  # noqa: N815


@dataclass(frozen=True)
class ExtractText:
    """Extract a document's text (one run of the pipeline)."""

    documentUUID: str  # noqa: N815
    run: int
    blobKey: str  # noqa: N815
    fileName: str  # noqa: N815
    contentType: str  # noqa: N815


@dataclass(frozen=True)
class TextExtracted:
    """A document's text is stored under textKey."""

    documentUUID: str  # noqa: N815
    run: int
    textKey: str  # noqa: N815
    chars: int


@dataclass(frozen=True)
class StageFailed:
    """A stage could not do its work for a run (text extraction, interpretation)."""

    documentUUID: str  # noqa: N815
    run: int
    reason: str


@dataclass(frozen=True)
class Interpret:
    """Interpret a document's extracted text."""

    documentUUID: str  # noqa: N815
    run: int
    textKey: str  # noqa: N815


@dataclass(frozen=True)
class Interpreted:
    """What the interpretation found, and whether a person must review it."""

    documentUUID: str  # noqa: N815
    run: int
    documentType: str  # noqa: N815
    confidence: float
    fields: dict[str, Any]
    needsReview: bool  # noqa: N815
    reasons: list[str]


@dataclass(frozen=True)
class ProcessingStarted:
    """A run of the pipeline started for a document."""

    documentUUID: str  # noqa: N815
    run: int


@dataclass(frozen=True)
class DocumentReady:
    """A document went through the pipeline."""

    documentUUID: str  # noqa: N815
    run: int
    documentType: str  # noqa: N815
    fields: dict[str, Any]


@dataclass(frozen=True)
class NeedsReview:
    """A document's interpretation needs a person's review."""

    documentUUID: str  # noqa: N815
    run: int
    documentType: str  # noqa: N815
    confidence: float
    reasons: list[str]


@dataclass(frozen=True)
class DocumentFailed:
    """A run failed at a stage."""

    documentUUID: str  # noqa: N815
    run: int
    stage: str
    reason: str


BODIES: Final[dict[str, type]] = {
    CMD_DOCUMENT_PROCESS: ProcessDocument,
    CMD_DOCUMENT_RETRY: RetryDocument,
    CMD_THUMBNAIL_GENERATE: GenerateThumbnail,
    CMD_EXTRACT_TEXT: ExtractText,
    EVT_TEXT_EXTRACTED: TextExtracted,
    EVT_TEXT_ERROR: StageFailed,
    CMD_INTERPRET: Interpret,
    EVT_INTERPRETED: Interpreted,
    EVT_INTERPRETATION_ERROR: StageFailed,
    EVT_PROCESSING_STARTED: ProcessingStarted,
    EVT_READY: DocumentReady,
    EVT_NEEDS_REVIEW: NeedsReview,
    EVT_FAILED: DocumentFailed,
}
"""Every queue's body (boost-tenancy asyncapi --schemas services.common.contract:BODIES); the
services check each field as they read it (field(), document_id())."""

_DOCUMENT_ID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class DocumentState(enum.StrEnum):
    """A document's place in the pipeline; the order is the order of progress within a run."""

    UPLOADED = "uploaded"
    PROCESSING = "processing"
    EXTRACTED = "extracted"
    READY = "ready"
    NEEDS_REVIEW = "needs_review"
    FAILED = "failed"


FINAL_STATES: Final = frozenset(
    {DocumentState.READY, DocumentState.NEEDS_REVIEW, DocumentState.FAILED}
)


def document_id(value: object) -> str:
    """A document id from a message body; anything else is a permanent failure."""
    if not isinstance(value, str) or _DOCUMENT_ID_RE.fullmatch(value) is None:
        raise PermanentError(f"documentUUID must be a lowercase UUID, got {value!r}")
    return value


def field(body: Any, name: str, kind: type) -> Any:
    """A required field of a JSON body, of the given type, or a permanent failure naming it."""
    if not isinstance(body, dict):
        raise PermanentError(f"message body must be a JSON object, got {type(body).__name__}")
    value = body.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PermanentError(f"field {name!r} must be {kind.__name__}, got {value!r}")
    return value


def run_of(body: Any) -> int:
    """The processing run a command or event belongs to (1 for the first)."""
    run = field(body, "run", int)
    if run < 1:
        raise PermanentError(f"field 'run' must be at least 1, got {run}")
    return int(run)
