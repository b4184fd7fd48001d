"""The document state machine: which transition may leave which state, and where it leads.

A pure function of a document and a transition; the stores apply its result in a transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Final

from services.common.contract import DocumentState
from services.common.documents.model import (
    Document,
    Failed,
    Interpreted,
    Skip,
    StartRun,
    TextExtracted,
    Transition,
    storable_text,
)

_ALLOWED_FROM: Final[Mapping[type, frozenset[DocumentState]]] = {
    # The transition table: the states each transition may leave. Anything else is a repeated or
    # out-of-order message, and a document never moves back to an earlier state of its run.
    TextExtracted: frozenset({DocumentState.PROCESSING}),
    Interpreted: frozenset({DocumentState.EXTRACTED}),
    Failed: frozenset({DocumentState.PROCESSING, DocumentState.EXTRACTED}),
}
_START_FROM: Final = frozenset({DocumentState.UPLOADED, DocumentState.FAILED})
_RETRY_FROM: Final = frozenset({DocumentState.FAILED})


def _skip_reason(document: Document, transition: Transition) -> Skip | None:
    if isinstance(transition, StartRun):
        allowed = _RETRY_FROM if transition.retry else _START_FROM
    else:
        if transition.run < document.run:
            return Skip.STALE_RUN
        if transition.run > document.run:
            return Skip.UNKNOWN_RUN
        allowed = _ALLOWED_FROM[type(transition)]
    return None if document.state in allowed else Skip.NOT_ALLOWED


def advance(document: Document, transition: Transition, now: datetime) -> Document | Skip:
    """The state machine: the document after transition, or why the transition does not apply."""
    skip = _skip_reason(document, transition)
    if skip is not None:
        return skip
    if isinstance(transition, StartRun):
        # A new run starts clean: nothing of a failed run's results may leak into it.
        return replace(
            document,
            state=DocumentState.PROCESSING,
            run=document.run + 1,
            text_key=None,
            document_type=None,
            confidence=None,
            fields=None,
            reasons=(),
            error=None,
            failed_stage=None,
            updated_at=now,
        )
    if isinstance(transition, TextExtracted):
        return replace(
            document, state=DocumentState.EXTRACTED, text_key=transition.text_key, updated_at=now
        )
    if isinstance(transition, Interpreted):
        return replace(
            document,
            state=DocumentState.NEEDS_REVIEW if transition.needs_review else DocumentState.READY,
            document_type=transition.document_type,
            confidence=transition.confidence,
            fields=dict(transition.fields),
            reasons=transition.reasons,
            updated_at=now,
        )
    return replace(
        document,
        state=DocumentState.FAILED,
        error=storable_text(transition.reason),
        failed_stage=transition.stage,
        updated_at=now,
    )


__all__ = ["advance"]
