"""The IntegrationsServer (the seed's Secretary): uploads documents and reports their processing.

The tenant of every request is the verified bearer token's; another tenant's document is unknown.
Each tenant's requests are budgeted (in flight, per minute: budget.py) and its publishing is
limited (the producer's PublishGuard); GET /v1/fairness shows a tenant both.
"""

from __future__ import annotations

import math
import re
import unicodedata
import uuid
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote

import structlog
from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from boost_tenancy import (
    BoostTenancyError,
    MessageTooLargeError,
    PublishGuard,
    PublishRefusedError,
    TenantId,
    TenantProducer,
    TransientError,
    TransportError,
)
from boost_tenancy.quotas.guard import PUBLISH_REFUSAL_REASONS
from boost_tenancy.quotas.policy import LIMIT_FIELDS
from services.common.auth import AuthenticationError, TenantAuthenticator
from services.common.blobs import LocalBlobStore, document_key
from services.common.contract import (
    CMD_DOCUMENT_PROCESS,
    CMD_DOCUMENT_RETRY,
    CMD_THUMBNAIL_GENERATE,
    DocumentState,
    document_id,
)
from services.common.documents import Document, DocumentStore, NewDocument
from services.integrations.budget import RequestBudget, RequestBudgets
from services.integrations.openapi import openapi_document

log = structlog.get_logger("services.integrations")

DEFAULT_MAX_UPLOAD_BYTES: Final = 20 * 1024 * 1024
ORIGINAL_BLOB: Final = "original"
THUMBNAIL_BLOB: Final = "thumbnail.png"
MAX_FILE_NAME: Final = 255
MAX_LIST_LIMIT: Final = 500
# Room for the multipart boundaries and part headers around a file of the maximum size.
_MULTIPART_OVERHEAD: Final = 64 * 1024
_PUBLIC_ENDPOINTS: Final = frozenset({"healthz"})
_EXTENSION_TYPES: Final = {
    "pdf": "application/pdf",
    "txt": "text/plain",
    "html": "text/html",
    "htm": "text/html",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
}
# Types a client sends when it does not know better (curl --data-binary sends the form type):
# they say nothing about the file, so the extension decides.
_GENERIC_TYPES: Final = frozenset(
    {"", "application/octet-stream", "binary/octet-stream", "application/x-www-form-urlencoded"}
)
_MEDIA_TYPE_RE: Final = re.compile(
    r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
)
_HTTP_ERRORS: Final = {
    400: ("bad_request", "the request is malformed"),
    404: ("not_found", "no such resource"),
    405: ("method_not_allowed", "method not allowed"),
    413: ("payload_too_large", "the upload exceeds the size limit"),
}


class ApiError(BoostTenancyError):
    """A request the server refuses on purpose; answered as JSON with its status."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        self.status = status
        self.error = error
        self.reason = reason
        super().__init__(f"{status} {error}: {reason}")


class DocumentNotFoundError(ApiError):
    """The caller's tenant has no such document; the answer never depends on why."""

    def __init__(self) -> None:
        # One fixed body whether the id is malformed, unknown or another tenant's, so an
        # answer cannot tell a guessed id of another tenant from one that does not exist.
        super().__init__(404, "not_found", "no such document")


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


def _error_body(error: str, reason: str | None = None) -> dict[str, str]:
    return {"error": error} if reason is None else {"error": error, "reason": reason}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _clean_file_name(raw: str | None, *, percent_encoded: bool) -> str:
    """The last path segment of a client's file name, without control characters."""
    name = unquote(raw, errors="strict") if raw and percent_encoded else (raw or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if not unicodedata.category(ch).startswith("C")).strip()
    if not name or name in {".", ".."}:
        raise ApiError(400, "bad_request", "missing file name")
    if len(name) > MAX_FILE_NAME:
        raise ApiError(400, "bad_request", f"file name longer than {MAX_FILE_NAME} characters")
    return name


def detect_content_type(declared: str | None, file_name: str) -> str:
    """The declared media type unless it is generic or malformed, else the extension's type."""
    media = (declared or "").split(";", 1)[0].strip().lower()
    if media not in _GENERIC_TYPES and _MEDIA_TYPE_RE.fullmatch(media):
        return media
    _, dot, extension = file_name.rpartition(".")
    guessed = _EXTENSION_TYPES.get(extension.lower()) if dot else None
    return guessed or "application/octet-stream"


def wants_thumbnail(content_type: str) -> bool:
    return content_type.startswith("image/") or content_type == "application/pdf"


def _unauthorized(reason: str) -> Response:
    response = jsonify(_error_body("unauthorized", reason))
    response.status_code = 401
    response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    return response


def _bearer_token() -> str:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError("missing token")
    if any(ch.isspace() for ch in token):
        raise AuthenticationError("malformed token")
    return token


def _tenant() -> TenantId:
    tenant = g.get("tenant")
    if not isinstance(tenant, TenantId):
        # Every route but /healthz authenticates first; reaching this without a tenant is a
        # bug, and the answer must then be a refusal, never another tenant's data.
        raise AuthenticationError("missing token")
    return tenant


class _Routes:
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

    def _read_upload(self) -> tuple[bytes, str, str]:
        """The uploaded bytes, file name and declared media type, within the size limit."""
        limit = self._max_upload_bytes
        if request.mimetype == "multipart/form-data":
            upload = request.files.get("file")
            if upload is None:
                raise ApiError(400, "bad_request", "missing multipart field 'file'")
            data = upload.stream.read(limit + 1)
            name = _clean_file_name(upload.filename, percent_encoded=False)
            declared = upload.mimetype
        else:
            if request.content_length is not None and request.content_length > limit:
                raise RequestEntityTooLarge()
            data = request.stream.read(limit + 1)
            try:
                name = _clean_file_name(request.headers.get("X-File-Name"), percent_encoded=True)
            except UnicodeDecodeError:
                raise ApiError(400, "bad_request", "X-File-Name is not UTF-8") from None
            declared = request.mimetype
        if len(data) > limit:
            raise RequestEntityTooLarge()
        if not data:
            raise ApiError(400, "bad_request", "the upload is empty")
        return data, name, declared

    # -- routes -----------------------------------------------------------------------------------
    def upload(self) -> tuple[Response, int, Mapping[str, str]]:
        tenant = _tenant()
        data, file_name, declared = self._read_upload()
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
        tenant = _tenant()
        raw_limit = request.args.get("limit", "100")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIST_LIMIT:
            raise ApiError(400, "bad_request", f"limit must be 1-{MAX_LIST_LIMIT}")
        docs = self._documents.list(tenant, limit=int(raw_limit))
        return jsonify({"documents": [self._status(tenant, doc) for doc in docs]})

    def status(self, document_id: str) -> Response:
        tenant = _tenant()
        return jsonify(self._status(tenant, self._document(tenant, document_id)))

    def text(self, document_id: str) -> Response:
        tenant = _tenant()
        doc = self._document(tenant, document_id)
        # The store names the current run's text; a retried document has none until extracted.
        if doc.text_key is None or not self._blobs.exists(tenant, doc.text_key):
            raise ApiError(404, "not_found", "no text extracted yet")
        data = self._blobs.get(tenant, doc.text_key)
        return Response(data, content_type="text/plain; charset=utf-8")

    def interpretation(self, document_id: str) -> Response:
        tenant = _tenant()
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
        tenant = _tenant()
        doc = self._document(tenant, document_id)
        key = document_key(doc.document_id, THUMBNAIL_BLOB)
        if not self._blobs.exists(tenant, key):
            raise ApiError(404, "not_found", "no thumbnail")
        return Response(self._blobs.get(tenant, key), mimetype="image/png")

    def retry(self, document_id: str) -> tuple[Response, int]:
        tenant = _tenant()
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
        tenant = _tenant()
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


def _register_errors(app: Flask) -> None:
    @app.errorhandler(AuthenticationError)
    def _auth_failed(exc: AuthenticationError) -> Response:
        # Never the token, nor any part of it: a log line is no place for a credential.
        log.warning(
            "authentication_failed",
            reason=exc.reason,
            method=request.method,
            path=request.path,
            remote_addr=request.remote_addr,
        )
        return _unauthorized(exc.reason)

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> tuple[Response, int]:
        return jsonify(_error_body(exc.error, exc.reason)), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        error, reason = _HTTP_ERRORS.get(exc.code or 500, (_snake(exc.name), exc.name))
        response = jsonify(_error_body(error, reason))
        response.status_code = exc.code or 500
        # Keep what the status needs besides its HTML body, such as Allow on a 405.
        for name, value in exc.get_headers():
            if name.lower() not in {"content-type", "content-length"}:
                response.headers.add(name, value)
        return response

    @app.errorhandler(PublishRefusedError)
    def _publish_refused(exc: PublishRefusedError) -> tuple[Response, int, dict[str, str]]:
        log.info("publish_refused", path=request.path, reason=exc.reason, error=str(exc))
        if isinstance(exc, MessageTooLargeError):
            return jsonify(_error_body("message_too_large", exc.detail)), 413, {}
        retry_after = str(max(1, math.ceil(exc.retry_after_s)))
        body = _error_body("rate_limited", f"over the tenant's publishing rate: {exc.detail}")
        return jsonify(body), 429, {"Retry-After": retry_after}

    @app.errorhandler(TransientError)
    @app.errorhandler(TransportError)
    def _unavailable(exc: BoostTenancyError) -> tuple[Response, int, dict[str, str]]:
        log.error("dependency_unavailable", path=request.path, error=str(exc))
        body = _error_body("unavailable", "storage or broker unavailable; try again later")
        return jsonify(body), 503, {"Retry-After": "5"}

    @app.errorhandler(Exception)
    def _internal(exc: Exception) -> tuple[Response, int]:
        log.error("request_failed", path=request.path, exc_info=exc)
        return jsonify(_error_body("internal_error")), 500


def create_app(
    *,
    authenticator: TenantAuthenticator,
    documents: DocumentStore,
    blobs: LocalBlobStore,
    producer: TenantProducer,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    guard: PublishGuard | None = None,
    budget: RequestBudget | None = None,
) -> Flask:
    """The IntegrationsServer as a Flask app; the caller owns the stores and the transport.

    guard is the producer's PublishGuard (GET /v1/fairness reports its limits); budget limits
    each tenant's requests in flight and per minute (default: RequestBudgets' defaults)."""
    if max_upload_bytes < 1:
        raise ValueError(f"max_upload_bytes must be positive, got {max_upload_bytes}")
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = max_upload_bytes + _MULTIPART_OVERHEAD
    app.json.sort_keys = False  # type: ignore[attr-defined]  # DefaultJSONProvider has it

    request_budget = budget if budget is not None else RequestBudget(RequestBudgets())

    @app.before_request
    def _authenticate() -> tuple[Response, int, dict[str, str]] | None:
        if request.endpoint in _PUBLIC_ENDPOINTS:
            return None
        # The tenant comes from the verified token only; nothing else in the request is read
        # for it, so a tenantUUID or organizationId in a body, query or header has no effect.
        tenant = authenticator.authenticate(_bearer_token())
        g.tenant = tenant
        refused = request_budget.enter(tenant)
        if refused is not None:
            log.info("request_refused", tenant=tenant.value, reason=refused.reason)
            what = "requests in flight" if refused.reason == "in_flight" else "requests a minute"
            body = _error_body("rate_limited", f"over the tenant's budget of {what}")
            return jsonify(body), 429, {"Retry-After": refused.retry_after_header}
        g.budget_entered = True
        return None

    @app.teardown_request
    def _leave(_exc: BaseException | None) -> None:
        if g.pop("budget_entered", False):
            request_budget.leave(g.tenant)

    routes = _Routes(
        documents=documents,
        blobs=blobs,
        producer=producer,
        max_upload_bytes=max_upload_bytes,
        guard=guard,
        budget=request_budget,
    )
    rule = app.add_url_rule
    rule("/documents", "upload", routes.upload, methods=["POST"])
    rule("/documents", "list_documents", routes.list_documents, methods=["GET"])
    rule("/documents/<document_id>", "status", routes.status, methods=["GET"])
    rule("/documents/<document_id>/text", "text", routes.text, methods=["GET"])
    rule(
        "/documents/<document_id>/interpretation",
        "interpretation",
        routes.interpretation,
        methods=["GET"],
    )
    rule("/documents/<document_id>/thumbnail", "thumbnail", routes.thumbnail, methods=["GET"])
    rule("/documents/<document_id>/retry", "retry", routes.retry, methods=["POST"])
    # The path of seed 004's tenant view; the document routes predate versioned paths.
    rule("/v1/fairness", "fairness", routes.fairness, methods=["GET"])
    rule("/openapi.json", "openapi", routes.openapi, methods=["GET"])
    rule("/healthz", "healthz", routes.healthz, methods=["GET"])
    _register_errors(app)
    return app
