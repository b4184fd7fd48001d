"""How the IntegrationsServer answers a refusal or a failure: a JSON error body and its status.

ApiError is a deliberate refusal; register_errors answers it and every other exception.
"""

from __future__ import annotations

import math
import re
from typing import Final

import structlog
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from boost_tenancy import (
    BoostTenancyError,
    MessageTooLargeError,
    PublishRefusedError,
    TransientError,
    TransportError,
)
from services.common.auth import AuthenticationError

log = structlog.get_logger("services.integrations")

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


def error_body(error: str, reason: str | None = None) -> dict[str, str]:
    return {"error": error} if reason is None else {"error": error, "reason": reason}


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _unauthorized(reason: str) -> Response:
    response = jsonify(error_body("unauthorized", reason))
    response.status_code = 401
    response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    return response


def register_errors(app: Flask) -> None:
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
        return jsonify(error_body(exc.error, exc.reason)), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        error, reason = _HTTP_ERRORS.get(exc.code or 500, (_snake(exc.name), exc.name))
        response = jsonify(error_body(error, reason))
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
            return jsonify(error_body("message_too_large", exc.detail)), 413, {}
        retry_after = str(max(1, math.ceil(exc.retry_after_s)))
        body = error_body("rate_limited", f"over the tenant's publishing rate: {exc.detail}")
        return jsonify(body), 429, {"Retry-After": retry_after}

    @app.errorhandler(TransientError)
    @app.errorhandler(TransportError)
    def _unavailable(exc: BoostTenancyError) -> tuple[Response, int, dict[str, str]]:
        log.error("dependency_unavailable", path=request.path, error=str(exc))
        body = error_body("unavailable", "storage or broker unavailable; try again later")
        return jsonify(body), 503, {"Retry-After": "5"}

    @app.errorhandler(Exception)
    def _internal(exc: Exception) -> tuple[Response, int]:
        log.error("request_failed", path=request.path, exc_info=exc)
        return jsonify(error_body("internal_error")), 500
