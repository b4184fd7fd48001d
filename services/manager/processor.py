"""DocumentManager: moves each document through the store's state machine, one message at a time.

A change sends the next stage's command and the event others watch; the store records both with
the message that caused them, so a redelivery after a crash sends exactly the same messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Final

from boost_tenancy import HandlerContext, IncomingMessage, PermanentError, TenantProcessor
from services.common.contract import (
    CMD_DOCUMENT_PROCESS,
    CMD_DOCUMENT_RETRY,
    CMD_EXTRACT_TEXT,
    CMD_INTERPRET,
    EVT_FAILED,
    EVT_INTERPRETATION_ERROR,
    EVT_INTERPRETED,
    EVT_NEEDS_REVIEW,
    EVT_PROCESSING_STARTED,
    EVT_READY,
    EVT_TEXT_ERROR,
    EVT_TEXT_EXTRACTED,
    DocumentState,
    document_id,
    field,
    run_of,
)
from services.common.documents import (
    Document,
    DocumentStore,
    Failed,
    Interpreted,
    Output,
    Skip,
    StartRun,
    TextExtracted,
    Transition,
)

EXTRACTION_STAGE: Final = "extraction"
INTERPRETATION_STAGE: Final = "interpretation"


def _confidence(body: Any) -> float:
    # JSON does not tell 1 from 1.0, so an integral confidence is as valid as a fractional one.
    value = body.get("confidence") if isinstance(body, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise PermanentError(f"field 'confidence' must be a number, got {value!r}")
    return float(value)


def _reasons(body: Any) -> tuple[str, ...]:
    reasons = field(body, "reasons", list)
    if not all(isinstance(reason, str) for reason in reasons):
        raise PermanentError(f"field 'reasons' must be a list of strings, got {reasons!r}")
    return tuple(reasons)


def _process(_body: Any) -> Transition:
    # The command only names the document; what to extract comes from the stored document.
    return StartRun(retry=False)


def _retry(_body: Any) -> Transition:
    return StartRun(retry=True)


def _text_extracted(body: Any) -> Transition:
    return TextExtracted(run=run_of(body), text_key=field(body, "textKey", str))


def _text_error(body: Any) -> Transition:
    return Failed(run=run_of(body), stage=EXTRACTION_STAGE, reason=field(body, "reason", str))


def _interpreted(body: Any) -> Transition:
    return Interpreted(
        run=run_of(body),
        document_type=field(body, "documentType", str),
        confidence=_confidence(body),
        fields=field(body, "fields", dict),
        needs_review=field(body, "needsReview", bool),
        reasons=_reasons(body),
    )


def _interpretation_error(body: Any) -> Transition:
    return Failed(run=run_of(body), stage=INTERPRETATION_STAGE, reason=field(body, "reason", str))


_TRANSITIONS: Final[dict[str, Callable[[Any], Transition]]] = {
    CMD_DOCUMENT_PROCESS: _process,
    CMD_DOCUMENT_RETRY: _retry,
    EVT_TEXT_EXTRACTED: _text_extracted,
    EVT_TEXT_ERROR: _text_error,
    EVT_INTERPRETED: _interpreted,
    EVT_INTERPRETATION_ERROR: _interpretation_error,
}


def outputs_for(document: Document) -> tuple[Output, ...]:
    """What a document that just entered its state calls for: the next command and the events."""
    ref = {"documentUUID": document.document_id, "run": document.run}
    state = document.state
    if state is DocumentState.PROCESSING:
        extract = {
            **ref,
            "blobKey": document.blob_key,
            "fileName": document.file_name,
            "contentType": document.content_type,
        }
        return (
            Output(queue=EVT_PROCESSING_STARTED, body=ref),
            Output(queue=CMD_EXTRACT_TEXT, body=extract),
        )
    if state is DocumentState.EXTRACTED:
        return (Output(queue=CMD_INTERPRET, body={**ref, "textKey": document.text_key}),)
    if state is DocumentState.READY:
        ready = {**ref, "documentType": document.document_type, "fields": document.fields}
        return (Output(queue=EVT_READY, body=ready),)
    if state is DocumentState.NEEDS_REVIEW:
        review = {
            **ref,
            "documentType": document.document_type,
            "confidence": document.confidence,
            "reasons": list(document.reasons),
        }
        return (Output(queue=EVT_NEEDS_REVIEW, body=review),)
    if state is DocumentState.FAILED:
        failed = {**ref, "stage": document.failed_stage, "reason": document.error}
        return (Output(queue=EVT_FAILED, body=failed),)
    return ()


class DocumentManager(TenantProcessor):
    """Applies each command and stage event to its document and sends what the change calls for.

    Outputs are published only for a change, or again for an event already applied whose
    message comes back (redelivered, or retried after a failure): its first handling may have
    committed the change and then died before the outputs went out with the acknowledgement.
    """

    queues: ClassVar[tuple[str, ...]] = tuple(_TRANSITIONS)
    publishes: ClassVar[tuple[str, ...]] = (
        EVT_PROCESSING_STARTED,
        CMD_EXTRACT_TEXT,
        CMD_INTERPRET,
        EVT_READY,
        EVT_NEEDS_REVIEW,
        EVT_FAILED,
    )

    def __init__(self, documents: DocumentStore) -> None:
        self._documents = documents

    def close(self) -> None:
        self._documents.close()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        to_transition = _TRANSITIONS.get(message.queue)
        if to_transition is None:
            raise PermanentError(f"the DocumentManager does not consume {message.queue!r}")
        body = message.data
        document = document_id(field(body, "documentUUID", str))
        transition = to_transition(body)
        applied = self._documents.apply(
            ctx.tenant, document, transition, event_id=ctx.message_id, outputs=outputs_for
        )
        if applied.reason is Skip.UNKNOWN_DOCUMENT:
            raise PermanentError(f"document {document} of tenant {ctx.tenant} does not exist")
        current = applied.document
        state = None if current is None else current.state.value
        if applied.reason is Skip.DUPLICATE:
            # A first delivery of an applied event is a copy of a message whose handling
            # finished, outputs and all; only a message coming back may have lost them.
            if not (message.redelivered or message.attempt > 1):
                ctx.log.info("document_event_duplicate", document=document, state=state)
                return
            ctx.log.info(
                "document_outputs_resent",
                document=document,
                state=state,
                outputs=len(applied.outputs),
            )
        elif not applied.changed:
            ctx.log.info(
                "document_event_ignored",
                document=document,
                reason=None if applied.reason is None else applied.reason.value,
                state=state,
                run=applied.run,
            )
            return
        else:
            ctx.log.info("document_state_changed", document=document, state=state, run=applied.run)
        for output in applied.outputs:
            # Same outputs in the same order give the same derived message ids, so a consumer
            # that sees them twice can tell.
            ctx.publish(output.queue, output.body)
