"""The DocumentExtractor service: cmd.document.extractText in, the text blob and an event out.

A document without text is a handled outcome (evt.document.text.error); a broken command is not.
"""

from __future__ import annotations

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor
from services.common.blobs import LocalBlobStore, document_key
from services.common.contract import (
    CMD_EXTRACT_TEXT,
    EVT_TEXT_ERROR,
    EVT_TEXT_EXTRACTED,
    document_id,
    field,
    run_of,
)
from services.extractor.extract import ExtractionError, extract_text

TEXT_BLOB_NAME = "text.txt"


class DocumentExtractor(TenantProcessor):
    """Reads the tenant's original, stores its text as documents/<id>/text.txt, reports the result.

    Idempotent: a redelivered command rewrites the same blob and publishes the same event ids.
    """

    queues = (CMD_EXTRACT_TEXT,)
    publishes = (EVT_TEXT_EXTRACTED, EVT_TEXT_ERROR)

    def __init__(self, blobs: LocalBlobStore) -> None:
        self._blobs = blobs

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        body = message.data
        # A malformed command raises PermanentError here: the toolkit dead-letters it.
        document = document_id(field(body, "documentUUID", str))
        run = run_of(body)
        blob_key = field(body, "blobKey", str)
        file_name = field(body, "fileName", str)
        content_type = field(body, "contentType", str)

        # Keys are resolved under ctx.tenant, so another tenant's key simply does not exist here.
        # A missing blob is permanent (dead letter), an unreachable store transient (retried).
        data = self._blobs.get(ctx.tenant, blob_key)
        try:
            text = extract_text(data, content_type=content_type, file_name=file_name)
        except ExtractionError as exc:
            # The document, not the service, is at fault: report it and acknowledge, so that
            # the DocumentManager can mark the document failed instead of the command retrying.
            ctx.log.warning(
                "text_extraction_failed",
                document=document,
                run=run,
                content_type=content_type,
                reason=exc.reason,
            )
            ctx.publish(
                EVT_TEXT_ERROR, {"documentUUID": document, "run": run, "reason": exc.reason}
            )
            return

        text_key = document_key(document, TEXT_BLOB_NAME)
        self._blobs.put(ctx.tenant, text_key, text.encode("utf-8"))
        ctx.log.info("text_extracted", document=document, run=run, chars=len(text))
        ctx.publish(
            EVT_TEXT_EXTRACTED,
            {"documentUUID": document, "run": run, "textKey": text_key, "chars": len(text)},
        )
