"""The IntegrationsServer (the seed's Secretary) as a Flask app: its routes and request hooks.

Each tenant's requests are budgeted (budget.py) and its publishing limited (PublishGuard).
"""

from __future__ import annotations

from typing import Final

from flask import Flask

from boost_tenancy import PublishGuard, TenantProducer
from services.common.auth import TenantAuthenticator
from services.common.blobs import LocalBlobStore
from services.common.documents import DocumentStore
from services.integrations.access import register_access
from services.integrations.budget import RequestBudget, RequestBudgets
from services.integrations.errors import register_errors
from services.integrations.routes import Routes

DEFAULT_MAX_UPLOAD_BYTES: Final = 20 * 1024 * 1024
# Room for the multipart boundaries and part headers around a file of the maximum size.
_MULTIPART_OVERHEAD: Final = 64 * 1024


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

    register_access(app, authenticator=authenticator, request_budget=request_budget)

    routes = Routes(
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
    register_errors(app)
    return app
