"""DocumentProfessor: answers cmd.document.interpret with evt.document.interpreted or .error.

The text comes from the tenant's blob store; the rules are the tenant's own (defaults plus file).
"""

from __future__ import annotations

from pathlib import Path

from boost_tenancy import (
    ConfigError,
    HandlerContext,
    IncomingMessage,
    PermanentError,
    TenantProcessor,
)
from services.common.blobs import LocalBlobStore, check_key
from services.common.contract import (
    CMD_INTERPRET,
    EVT_INTERPRETATION_ERROR,
    EVT_INTERPRETED,
    document_id,
    field,
    run_of,
)
from services.professor.engine import interpret
from services.professor.rules import RuleLoader


class DocumentProfessor(TenantProcessor):
    """Interprets each document's extracted text with its tenant's rules.

    A missing blob or a broken tenant rules file is permanent (dead-lettered and recorded); an
    unreachable blob store is transient (retried); unusable text is answered with an error event,
    so the document fails visibly instead of waiting.
    """

    queues = (CMD_INTERPRET,)
    publishes = (EVT_INTERPRETED, EVT_INTERPRETATION_ERROR)

    def __init__(self, blobs: LocalBlobStore, rules_dir: Path | None, threshold: float) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"review threshold must be between 0 and 1, got {threshold}")
        self._blobs = blobs
        self._rules = RuleLoader(rules_dir)
        self._threshold = threshold

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        body = message.data
        document = document_id(field(body, "documentUUID", str))
        run = run_of(body)
        text_key = field(body, "textKey", str)
        check_key(text_key)  # a malformed key is a malformed command: dead-lettered
        try:
            raw = self._blobs.get(ctx.tenant, text_key)
        except PermanentError as exc:
            # The document cannot be interpreted without its text: fail the document (the
            # manager records it and a retry re-extracts) rather than leave it waiting forever.
            self._error(ctx, document, run, f"extracted text unavailable: {exc}")
            return
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            self._error(ctx, document, run, f"extracted text is not valid UTF-8: {exc.reason}")
            return
        if not text.strip():
            self._error(ctx, document, run, "extracted text is empty")
            return
        try:
            rules = self._rules.load(ctx.tenant)
        except ConfigError as exc:
            raise PermanentError(str(exc)) from exc
        result = interpret(text, rules, threshold=self._threshold)
        ctx.publish(
            EVT_INTERPRETED,
            {
                "documentUUID": document,
                "run": run,
                "documentType": result.document_type,
                "confidence": result.confidence,
                "fields": result.fields,
                "needsReview": result.needs_review,
                "reasons": list(result.reasons),
            },
        )
        ctx.log.info(
            "document_interpreted",
            document=document,
            run=run,
            document_type=result.document_type,
            confidence=result.confidence,
            needs_review=result.needs_review,
        )

    @staticmethod
    def _error(ctx: HandlerContext, document: str, run: int, reason: str) -> None:
        ctx.publish(
            EVT_INTERPRETATION_ERROR, {"documentUUID": document, "run": run, "reason": reason}
        )
        ctx.log.warning("interpretation_failed", document=document, run=run, reason=reason)
