"""Who a request is from: the tenant of its verified bearer token, admitted by its budget.

The tenant comes from the token alone; every route but /healthz needs one.
"""

from __future__ import annotations

from typing import Final

import structlog
from flask import Flask, Response, g, jsonify, request

from boost_tenancy import TenantId
from services.common.auth import AuthenticationError, TenantAuthenticator
from services.integrations.budget import RequestBudget
from services.integrations.errors import error_body

log = structlog.get_logger("services.integrations")

_PUBLIC_ENDPOINTS: Final = frozenset({"healthz"})


def _bearer_token() -> str:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError("missing token")
    if any(ch.isspace() for ch in token):
        raise AuthenticationError("malformed token")
    return token


def current_tenant() -> TenantId:
    tenant = g.get("tenant")
    if not isinstance(tenant, TenantId):
        # Every route but /healthz authenticates first; reaching this without a tenant is a
        # bug, and the answer must then be a refusal, never another tenant's data.
        raise AuthenticationError("missing token")
    return tenant


def register_access(
    app: Flask, *, authenticator: TenantAuthenticator, request_budget: RequestBudget
) -> None:
    """Authenticate each request and hold its place in its tenant's budget until it ends."""

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
            body = error_body("rate_limited", f"over the tenant's budget of {what}")
            return jsonify(body), 429, {"Retry-After": refused.retry_after_header}
        g.budget_entered = True
        return None

    @app.teardown_request
    def _leave(_exc: BaseException | None) -> None:
        if g.pop("budget_entered", False):
            request_budget.leave(g.tenant)
