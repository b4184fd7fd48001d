"""The IntegrationsServer's OpenAPI 3.1 description, written by hand next to its routes.

A test checks that every route of the Flask app appears here with its methods.
"""

from __future__ import annotations

from typing import Any, Final

_JSON: Final = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error(description: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{description}"}


_DOCUMENT_ID: Final = {
    "name": "document_id",
    "in": "path",
    "required": True,
    "description": "The documentUUID the upload answered with.",
    "schema": {"type": "string", "format": "uuid"},
}

# Every authenticated request counts against its tenant's request budgets (429 when over).
_AUTH_ERRORS: Final = {
    "401": _error("Unauthorized"),
    "429": _error("RateLimited"),
    "500": _error("InternalError"),
}
_DOCUMENT_ERRORS: Final = {**_AUTH_ERRORS, "404": _error("NotFound")}

_SCHEMAS: Final[dict[str, Any]] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "string",
                "description": "A stable code: unauthorized, bad_request, not_found, "
                "method_not_allowed, conflict, payload_too_large, unavailable, internal_error.",
            },
            "reason": {"type": "string", "description": "A short explanation, safe to show."},
        },
    },
    "DocumentState": {
        "type": "string",
        "enum": ["uploaded", "processing", "extracted", "ready", "needs_review", "failed"],
    },
    "UploadAccepted": {
        "type": "object",
        "required": ["documentUUID", "state"],
        "properties": {
            "documentUUID": {"type": "string", "format": "uuid"},
            "state": _ref("DocumentState"),
        },
    },
    "DocumentStatus": {
        "type": "object",
        "required": [
            "documentUUID",
            "fileName",
            "contentType",
            "state",
            "run",
            "thumbnail",
            "createdAt",
            "updatedAt",
        ],
        "properties": {
            "documentUUID": {"type": "string", "format": "uuid"},
            "fileName": {"type": "string"},
            "contentType": {"type": "string"},
            "state": _ref("DocumentState"),
            "run": {
                "type": "integer",
                "minimum": 0,
                "description": "Processing run; 0 until started.",
            },
            "documentType": {"type": ["string", "null"]},
            "confidence": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "fields": {"type": ["object", "null"], "additionalProperties": True},
            "reasons": {"type": "array", "items": {"type": "string"}},
            "error": {"type": ["string", "null"]},
            "failedStage": {"type": ["string", "null"]},
            "thumbnail": {"type": "boolean", "description": "Whether a thumbnail exists."},
            "createdAt": {"type": "string", "format": "date-time"},
            "updatedAt": {"type": "string", "format": "date-time"},
        },
    },
    "DocumentList": {
        "type": "object",
        "required": ["documents"],
        "properties": {"documents": {"type": "array", "items": _ref("DocumentStatus")}},
    },
    "Interpretation": {
        "type": "object",
        "required": ["documentUUID", "documentType", "confidence", "fields", "reasons"],
        "properties": {
            "documentUUID": {"type": "string", "format": "uuid"},
            "documentType": {"type": "string"},
            "confidence": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "fields": {"type": "object", "additionalProperties": True},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
    },
    "RetryAccepted": {
        "type": "object",
        "required": ["documentUUID", "state"],
        "properties": {
            "documentUUID": {"type": "string", "format": "uuid"},
            "state": _ref("DocumentState"),
        },
    },
    "Fairness": {
        "type": "object",
        "required": [
            "tenant",
            "enforcing",
            "publishing",
            "messageTtlS",
            "requests",
            "accounting",
        ],
        "properties": {
            "tenant": {"type": "string", "description": "The caller's tenant (its token's)."},
            "enforcing": {
                "type": "boolean",
                "description": "Whether any limit below applies (all 0 or null: none does).",
            },
            "publishing": {
                "type": ["object", "null"],
                "description": "The tenant's publishing limits here, its run-time policy "
                "applied; every 0 means unlimited. Null when this server publishes unlimited.",
                "properties": {
                    "messagesPerS": {"type": "number", "minimum": 0},
                    "bytesPerS": {"type": "number", "minimum": 0},
                    "burstS": {"type": "number", "minimum": 0},
                    "maxMessageBytes": {"type": "integer", "minimum": 0},
                    "maxQueuedMessages": {"type": "integer", "minimum": 0},
                },
            },
            "messageTtlS": {
                "type": "number",
                "minimum": 0,
                "description": "How long the tenant's messages sent from here may wait on the "
                "broker before it expires them, its run-time policy applied; 0: never.",
            },
            "requests": {
                "type": "object",
                "description": "The tenant's request budgets; 0 means unlimited.",
                "properties": {
                    "inFlight": {"type": "integer", "minimum": 0},
                    "perMinute": {"type": "integer", "minimum": 0},
                },
            },
            "accounting": {
                "type": "object",
                "description": "What this server process counted for the tenant since it "
                "started (not summed over replicas).",
                "properties": {
                    "requests": {
                        "type": "object",
                        "properties": {
                            "inFlight": {"type": "integer", "minimum": 0},
                            "admitted": {"type": "integer", "minimum": 0},
                            "refusedInFlight": {"type": "integer", "minimum": 0},
                            "refusedPerMinute": {"type": "integer", "minimum": 0},
                        },
                    },
                    "publishRefused": {
                        "type": "object",
                        "properties": {
                            "rate": {"type": "integer", "minimum": 0},
                            "size": {"type": "integer", "minimum": 0},
                            "backlog": {"type": "integer", "minimum": 0},
                        },
                    },
                },
            },
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string", "const": "ok"}},
    },
}

_RESPONSES: Final[dict[str, Any]] = {
    "Unauthorized": {
        "description": "Missing, invalid or expired bearer token.",
        "headers": {
            "WWW-Authenticate": {
                "description": 'Always Bearer error="invalid_token".',
                "schema": {"type": "string"},
            }
        },
        "content": {_JSON: {"schema": _ref("Error")}},
    },
    "BadRequest": _json(_ref("Error"), "The request is malformed."),
    "NotFound": _json(
        _ref("Error"),
        "No such document for the caller's tenant; another tenant's document answers the same.",
    ),
    "Conflict": _json(_ref("Error"), "The document is not in a state that allows this."),
    "PayloadTooLarge": _json(_ref("Error"), "The upload exceeds the size limit."),
    "Unavailable": _json(_ref("Error"), "Storage or broker unavailable; try again later."),
    "RateLimited": {
        **_json(
            _ref("Error"),
            "Over the tenant's publishing rate (messages/s or bytes/s), or its budget of "
            "requests in flight or a minute; nothing was done.",
        ),
        "headers": {
            "Retry-After": {
                "description": "Seconds until the same request would be admitted.",
                "schema": {"type": "integer", "minimum": 1},
            }
        },
    },
    "InternalError": _json(_ref("Error"), "An unexpected failure; no details are disclosed."),
}


def _paths(max_upload_bytes: int) -> dict[str, Any]:
    upload_body = {
        "required": True,
        "description": (
            f"At most {max_upload_bytes} bytes: a multipart form with a `file` field, or the raw "
            "file as the body with its Content-Type and an X-File-Name header. The content type "
            "is the declared one, else guessed from the file name's extension."
        ),
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "contentMediaType": "application/octet-stream",
                        }
                    },
                }
            },
            "application/octet-stream": {
                "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
            },
        },
    }
    return {
        "/documents": {
            "get": {
                "operationId": "listDocuments",
                "summary": "List the caller's documents.",
                "responses": {
                    "200": _json(_ref("DocumentList"), "The tenant's documents."),
                    **_AUTH_ERRORS,
                },
            },
            "post": {
                "operationId": "uploadDocument",
                "summary": "Upload a document and start its processing.",
                "parameters": [
                    {
                        "name": "X-File-Name",
                        "in": "header",
                        "required": False,
                        "description": "File name of a raw-body upload (percent-encoded UTF-8).",
                        "schema": {"type": "string", "maxLength": 255},
                    }
                ],
                "requestBody": upload_body,
                "responses": {
                    "201": {
                        **_json(_ref("UploadAccepted"), "Stored; processing commands sent."),
                        "headers": {
                            "Location": {
                                "description": "The document's status URL.",
                                "schema": {"type": "string"},
                            }
                        },
                    },
                    "400": _error("BadRequest"),
                    "413": _error("PayloadTooLarge"),
                    "429": _error("RateLimited"),
                    "503": _error("Unavailable"),
                    **_AUTH_ERRORS,
                },
            },
        },
        "/documents/{document_id}": {
            "get": {
                "operationId": "getDocument",
                "summary": "A document's processing status.",
                "parameters": [_DOCUMENT_ID],
                "responses": {
                    "200": _json(_ref("DocumentStatus"), "The document's status."),
                    **_DOCUMENT_ERRORS,
                },
            }
        },
        "/documents/{document_id}/text": {
            "get": {
                "operationId": "getDocumentText",
                "summary": "The extracted text; 404 until extraction has finished.",
                "parameters": [_DOCUMENT_ID],
                "responses": {
                    "200": {
                        "description": "The extracted text.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_DOCUMENT_ERRORS,
                },
            }
        },
        "/documents/{document_id}/interpretation": {
            "get": {
                "operationId": "getDocumentInterpretation",
                "summary": "Type, confidence and fields; 404 until interpreted.",
                "parameters": [_DOCUMENT_ID],
                "responses": {
                    "200": _json(_ref("Interpretation"), "The interpretation."),
                    **_DOCUMENT_ERRORS,
                },
            }
        },
        "/documents/{document_id}/thumbnail": {
            "get": {
                "operationId": "getDocumentThumbnail",
                "summary": "A PNG thumbnail; 404 if none was generated.",
                "parameters": [_DOCUMENT_ID],
                "responses": {
                    "200": {
                        "description": "The thumbnail.",
                        "content": {
                            "image/png": {
                                "schema": {"type": "string", "contentMediaType": "image/png"}
                            }
                        },
                    },
                    **_DOCUMENT_ERRORS,
                },
            }
        },
        "/documents/{document_id}/retry": {
            "post": {
                "operationId": "retryDocument",
                "summary": "Process a failed document again, or re-queue one never queued.",
                "parameters": [_DOCUMENT_ID],
                "responses": {
                    "202": _json(_ref("RetryAccepted"), "The retry command was sent."),
                    "409": _error("Conflict"),
                    "429": _error("RateLimited"),
                    "503": _error("Unavailable"),
                    **_DOCUMENT_ERRORS,
                },
            }
        },
        "/v1/fairness": {
            "get": {
                "operationId": "getFairness",
                "summary": "The caller's limits, whether they are enforced, and its accounting.",
                "responses": {
                    "200": _json(_ref("Fairness"), "The caller's own view."),
                    **_AUTH_ERRORS,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "getOpenApi",
                "summary": "This document.",
                "responses": {
                    "200": {
                        "description": "The OpenAPI 3.1 description.",
                        "content": {_JSON: {"schema": {"type": "object"}}},
                    },
                    **_AUTH_ERRORS,
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Liveness; needs no token.",
                "security": [],
                "responses": {"200": _json(_ref("Health"), "The server is up.")},
            }
        },
    }


def openapi_document(*, max_upload_bytes: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document served at /openapi.json."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "BOOST IntegrationsServer",
            "version": "1.0.0",
            "description": (
                "Uploads documents and reports their processing. The tenant of every request is "
                "the tenant claim of its verified bearer token; a tenant named in a body, query "
                "or header is ignored, and another tenant's document answers 404 exactly like an "
                "unknown one."
            ),
        },
        "security": [{"bearerAuth": []}],
        "paths": _paths(max_upload_bytes),
        "components": {
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
            },
            "schemas": _SCHEMAS,
            "responses": _RESPONSES,
        },
    }
