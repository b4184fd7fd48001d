"""The IntegrationsServer's request handlers: uploads, document status and results, fairness.

Every handler answers for the request's own tenant; another tenant's document is unknown.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final

import structlog
from flask import Response, jsonify, request

from boost_tenancy import BoostTenancyError, PublishGuard, TenantId, TenantProducer
from boost_tenancy.quotas import LIMIT_FIELDS, PUBLISH_REFUSAL_REASONS
from services.common.blobs import LocalBlobStore, document_key
from services.common.contract import (
    CMD_DOCUMENT_PROCESS,
    CMD_DOCUMENT_RETRY,
    CMD_THUMBNAIL_GENERATE,
    DocumentState,
    document_id,
)
from services.common.documents import Document, DocumentStore, NewDocument
from services.integrations.access import current_tenant
from services.integrations.budget import RequestBudget
from services.integrations.errors import ApiError, DocumentNotFoundError
from services.integrations.openapi import openapi_document
from services.integrations.uploads import detect_content_type, read_upload, wants_thumbnail

log = structlog.get_logger("services.integrations")

ORIGINAL_BLOB: Final = "original"
THUMBNAIL_BLOB: Final = "thumbnail.png"
MAX_LIST_LIMIT: Final = 500


def _process_command(
    document_id: str, blob_key: str, file_name: str, content_type: str
) -> dict[str, str]:
    """The body of cmd.document.process for a stored upload."""
    return {
        "documentUUID": document_id,
        "blobKey": blob_key,
        "fileName": file_name,
        "contentType": content_type,
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class Routes:
    """The request handlers, bound to the stores and producer of one app."""

    def __init__(
        self,
        *,
        documents: DocumentStore,
        blobs: LocalBlobStore,
        producer: TenantProducer,
        max_upload_bytes: int,
        guard: PublishGuard | None,
        budget: RequestBudget,
    ) -> None:
        self._documents = documents
        self._blobs = blobs
        self._producer = producer
        self._guard = guard
        self._budget = budget
        self._max_upload_bytes = max_upload_bytes
        self._openapi = openapi_document(max_upload_bytes=max_upload_bytes)

    # -- helpers ----------------------------------------------------------------------------------
    def _document(self, tenant: TenantId, raw_id: str) -> Document:
        try:
            checked = document_id(raw_id)
        except BoostTenancyError:
            raise DocumentNotFoundError() from None
        found = self._documents.get(tenant, checked)
        if found is None or found.tenant != tenant:
            raise DocumentNotFoundError()
        return found

    def _status(self, tenant: TenantId, doc: Document) -> dict[str, Any]:
        return {
            "documentUUID": doc.document_id,
            "fileName": doc.file_name,
            "contentType": doc.content_type,
            "state": doc.state.value,
            "run": doc.run,
            "documentType": doc.document_type,
            "confidence": doc.confidence,
            "fields": doc.fields,
            "reasons": list(doc.reasons),
            "error": doc.error,
            "failedStage": doc.failed_stage,
            "thumbnail": self._blobs.exists(tenant, document_key(doc.document_id, THUMBNAIL_BLOB)),
            "createdAt": doc.created_at.isoformat(),
            "updatedAt": doc.updated_at.isoformat(),
        }

    # -- routes -----------------------------------------------------------------------------------
    def upload(self) -> tuple[Response, int, Mapping[str, str]]:
        tenant = current_tenant()
        data, file_name, declared = read_upload(self._max_upload_bytes)
        content_type = detect_content_type(declared, file_name)
        new_id = str(uuid.uuid4())
        blob_key = document_key(new_id, ORIGINAL_BLOB)
        process = _process_command(new_id, blob_key, file_name, content_type)
        # The tenant's publishing limits are checked for every command of the upload before
        # anything is stored: a refused upload (429 or 413) leaves no document behind, and an
        # accepted one never loses its thumbnail to the limits.
        admitted = self._producer.admit(
            CMD_DOCUMENT_PROCESS, tenant, process, correlation_id=new_id
        )
        thumbnail = (
            self._producer.admit(
                CMD_THUMBNAIL_GENERATE,
                tenant,
                {"documentUUID": new_id, "blobKey": blob_key, "contentType": content_type},
                correlation_id=new_id,
            )
            if wants_thumbnail(content_type)
            else None
        )
        self._blobs.put(tenant, blob_key, data)
        created = self._documents.create(
            NewDocument(
                tenant=tenant,
                document_id=new_id,
                file_name=file_name,
                content_type=content_type,
                blob_key=blob_key,
            )
        )
        # Sent after the document exists: the DocumentManager refuses a command for a document
        # it cannot find. The correlation id ties every message about this document together.
        try:
            self._producer.send_admitted(admitted)
        except BoostTenancyError:
            # The client is told to try again (503); POST /documents/<id>/retry re-sends it.
            log.error("document_not_queued", tenant=tenant.value, document=new_id)
            raise
        if thumbnail is not None:
            try:
                self._producer.send_admitted(thumbnail)
            except BoostTenancyError as exc:
                # The document is on its way already; failing the upload now would only make
                # the client upload it twice. Its status shows thumbnail: false.
                log.error(
                    "thumbnail_not_queued", tenant=tenant.value, document=new_id, error=str(exc)
                )
        log.info(
            "document_uploaded",
            tenant=tenant.value,
            document=new_id,
            content_type=content_type,
            size=len(data),
        )
        body = jsonify({"documentUUID": new_id, "state": created.state.value})
        return body, 201, {"Location": f"/documents/{new_id}"}

    def list_documents(self) -> Response:
        tenant = current_tenant()
        raw_limit = request.args.get("limit", "100")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIST_LIMIT:
            raise ApiError(400, "bad_request", f"limit must be 1-{MAX_LIST_LIMIT}")
        docs = self._documents.list(tenant, limit=int(raw_limit))
        return jsonify({"documents": [self._status(tenant, doc) for doc in docs]})

    def status(self, document_id: str) -> Response:
        tenant = current_tenant()
        return jsonify(self._status(tenant, self._document(tenant, document_id)))

    def text(self, document_id: str) -> Response:
        tenant = current_tenant()
        doc = self._document(tenant, document_id)
        # The store names the current run's text; a retried document has none until extracted.
        if doc.text_key is None or not self._blobs.exists(tenant, doc.text_key):
            raise ApiError(404, "not_found", "no text extracted yet")
        data = self._blobs.get(tenant, doc.text_key)
        return Response(data, content_type="text/plain; charset=utf-8")

    def interpretation(self, document_id: str) -> Response:
        tenant = current_tenant()
        doc = self._document(tenant, document_id)
        interpreted = doc.state in {DocumentState.READY, DocumentState.NEEDS_REVIEW}
        if not interpreted or doc.document_type is None:
            raise ApiError(404, "not_found", "not interpreted yet")
        return jsonify(
            {
                "documentUUID": doc.document_id,
                "documentType": doc.document_type,
                "confidence": doc.confidence,
                "fields": doc.fields or {},
                "reasons": list(doc.reasons),
            }
        )

    def thumbnail(self, document_id: str) -> Response:
        tenant = current_tenant()
        doc = self._document(tenant, document_id)
        key = document_key(doc.document_id, THUMBNAIL_BLOB)
        if not self._blobs.exists(tenant, key):
            raise ApiError(404, "not_found", "no thumbnail")
        return Response(self._blobs.get(tenant, key), mimetype="image/png")

    def retry(self, document_id: str) -> tuple[Response, int]:
        tenant = current_tenant()
        doc = self._document(tenant, document_id)
        if doc.state is DocumentState.UPLOADED:
            # Its process command never reached the broker (the upload answered 503): send it
            # again. A duplicate is harmless, the manager starts a document once.
            process = _process_command(
                doc.document_id, doc.blob_key, doc.file_name, doc.content_type
            )
            self._producer.send(
                CMD_DOCUMENT_PROCESS, tenant, process, correlation_id=doc.document_id
            )
        elif doc.state is DocumentState.FAILED:
            self._producer.send(
                CMD_DOCUMENT_RETRY,
                tenant,
                {"documentUUID": doc.document_id},
                correlation_id=doc.document_id,
            )
        else:
            raise ApiError(
                409, "conflict", f"only a failed or unqueued document can be retried: {doc.state}"
            )
        log.info("document_retry_requested", tenant=tenant.value, document=doc.document_id)
        return jsonify({"documentUUID": doc.document_id, "state": doc.state.value}), 202

    def fairness(self) -> Response:
        """The caller's own view (seed 004's GET /v1/fairness): the limits that apply to its
        tenant here, whether they are enforced, and what this server counted for it."""
        tenant = current_tenant()
        guard = self._guard
        limits = guard.limits_for(tenant) if guard is not None else None
        refused = guard.refused() if guard is not None else {}
        budgets = self._budget.budgets
        return jsonify(
            {
                "tenant": tenant.value,
                "enforcing": budgets.enforcing or (limits is not None and not limits.unlimited),
                "publishing": None
                if limits is None
                else {_camel(name): getattr(limits, name) for name in LIMIT_FIELDS},
                "messageTtlS": self._producer.ttl_s_of(tenant),
                "requests": {"inFlight": budgets.in_flight, "perMinute": budgets.per_minute},
                "accounting": {
                    "requests": self._budget.usage(tenant),
                    "publishRefused": {
                        reason: refused.get((tenant, reason), 0)
                        for reason in PUBLISH_REFUSAL_REASONS
                    },
                },
            }
        )

    def openapi(self) -> Response:
        return jsonify(self._openapi)

    @staticmethod
    def healthz() -> Response:
        return jsonify({"status": "ok"})
