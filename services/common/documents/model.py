"""The document pipeline's values: a document, the transitions that move it and their results.

Every value checks itself when built; a malformed one raises InvalidDocumentError.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from boost_tenancy import PermanentError, TenantId
from services.common.blobs import check_key
from services.common.contract import DocumentState, document_id
from services.common.documents.errors import InvalidDocumentError

_MAX_TEXT: Final = 8000
_TRUNCATION_MARKER: Final = "\u2026[truncated]"
_NUL_REPLACEMENT: Final = "\ufffd"


def _require_text(name: str, value: object, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value) or "\x00" in value:
        raise InvalidDocumentError(f"{name} must be a non-empty string without NUL, got {value!r}")
    return value


def _require_run(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidDocumentError(f"run must be an integer of at least 1, got {value!r}")
    return value


def checked_document_id(value: object) -> str:
    try:
        return document_id(value)
    except PermanentError as exc:
        raise InvalidDocumentError(str(exc)) from exc


def storable_text(text: str) -> str:
    # PostgreSQL text cannot hold NUL; an error reason from a message may carry anything.
    text = text.replace("\x00", _NUL_REPLACEMENT)
    if len(text) > _MAX_TEXT:
        text = text[: _MAX_TEXT - len(_TRUNCATION_MARKER)] + _TRUNCATION_MARKER
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class NewDocument:
    """What the IntegrationsServer knows of an upload before any processing."""

    tenant: TenantId
    document_id: str
    file_name: str
    content_type: str
    blob_key: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenant", TenantId.parse(self.tenant))
        checked_document_id(self.document_id)
        _require_text("file_name", self.file_name)
        _require_text("content_type", self.content_type)
        try:
            check_key(_require_text("blob_key", self.blob_key))
        except PermanentError as exc:
            raise InvalidDocumentError(str(exc)) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """One document of one tenant as stored, at one point of its pipeline."""

    tenant: TenantId
    document_id: str
    file_name: str
    content_type: str
    blob_key: str
    state: DocumentState
    run: int
    """The processing run: 0 before the first process command, +1 for each retry."""
    document_type: str | None
    confidence: float | None
    fields: dict[str, Any] | None
    reasons: tuple[str, ...]
    error: str | None
    failed_stage: str | None
    created_at: datetime
    updated_at: datetime
    text_key: str | None = None
    """The blob key of the extracted text of the current run, once extracted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun:
    """A process (retry=False) or retry command: starts the next processing run."""

    retry: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TextExtracted:
    """The extractor stored the text of a run under text_key."""

    run: int
    text_key: str

    def __post_init__(self) -> None:
        _require_run(self.run)
        try:
            check_key(_require_text("text_key", self.text_key))
        except PermanentError as exc:
            raise InvalidDocumentError(str(exc)) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreted:
    """The interpreter classified a run's text: ready, or in need of a person's review."""

    run: int
    document_type: str
    confidence: float
    fields: Mapping[str, Any]
    needs_review: bool
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_run(self.run)
        _require_text("document_type", self.document_type)
        confidence: object = self.confidence
        if (
            not isinstance(confidence, int | float)
            or isinstance(confidence, bool)
            or not math.isfinite(confidence)
            or not 0.0 <= confidence <= 1.0
        ):
            raise InvalidDocumentError(f"confidence must be within [0, 1], got {confidence!r}")
        object.__setattr__(self, "confidence", float(confidence))
        if not isinstance(self.fields, Mapping):
            raise InvalidDocumentError(f"fields must be a mapping, got {self.fields!r}")
        if not isinstance(self.needs_review, bool):
            raise InvalidDocumentError(f"needs_review must be a bool, got {self.needs_review!r}")
        reasons = tuple(self.reasons)
        for reason in reasons:
            _require_text("a reason", reason, allow_empty=True)
        object.__setattr__(self, "reasons", reasons)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """A stage of a run failed for good; the document waits for a retry."""

    run: int
    stage: str
    reason: str

    def __post_init__(self) -> None:
        _require_run(self.run)
        _require_text("stage", self.stage)
        if not isinstance(self.reason, str):
            raise InvalidDocumentError(f"reason must be a string, got {self.reason!r}")


Transition = StartRun | TextExtracted | Interpreted | Failed


class Skip(enum.StrEnum):
    """Why an apply changed nothing; none of these is an error."""

    DUPLICATE = "duplicate"
    """This event was applied before; its recorded outputs come back with the result."""
    STALE_RUN = "stale run"
    """The event belongs to an earlier run than the document's current one."""
    UNKNOWN_RUN = "unknown run"
    """The event names a run the document has not started."""
    NOT_ALLOWED = "not allowed"
    """The transition does not lead on from the document's state (repeated or out of order)."""
    UNKNOWN_DOCUMENT = "unknown document"
    """The tenant has no document with this id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """A message a transition calls for, recorded with the event that caused it."""

    queue: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """The result of apply: whether the document changed, and if not, why."""

    changed: bool
    reason: Skip | None = None
    document: Document | None = None
    """The document after the apply (as found, when nothing changed); None if unknown."""
    outputs: tuple[Output, ...] = ()
    """What the transition produced: when changed, and again for a duplicate event."""

    @property
    def run(self) -> int | None:
        """The document's run after the apply (for StartRun: the run just started)."""
        return None if self.document is None else self.document.run


OutputsOf = Callable[[Document], Sequence[Output]]
"""Computes, inside the transaction, the outputs of a transition from the document it produced."""


__all__ = [
    "Applied",
    "Document",
    "Failed",
    "Interpreted",
    "NewDocument",
    "Output",
    "OutputsOf",
    "Skip",
    "StartRun",
    "TextExtracted",
    "Transition",
    "checked_document_id",
    "storable_text",
]
