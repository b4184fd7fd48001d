"""The IntegrationsServer's OpenAPI 3.1 document and its paths, written by hand next to its routes.

A test checks that every route of the Flask app appears here with its methods.
"""

from __future__ import annotations

from typing import Any, Final

from services.integrations.openapi_components import (
    JSON_TYPE,
    RESPONSES,
    SCHEMAS,
    json_response,
    response_ref,
    schema_ref,
)

_DOCUMENT_ID: Final = {
    "name": "document_id",
    "in": "path",
    "required": True,
    "description": "The documentUUID the upload answered with.",
    "schema": {"type": "string", "format": "uuid"},
}

# Every authenticated request counts against its tenant's request budgets (429 when over).
_AUTH_ERRORS: Final = {
    "401": response_ref("Unauthorized"),
    "429": response_ref("RateLimited"),
    "500": response_ref("InternalError"),
}
_DOCUMENT_ERRORS: Final = {**_AUTH_ERRORS, "404": response_ref("NotFound")}


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
                    "200": json_response(schema_ref("DocumentList"), "The tenant's documents."),
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
                        **json_response(
                            schema_ref("UploadAccepted"), "Stored; processing commands sent."
                        ),
                        "headers": {
                            "Location": {
                                "description": "The document's status URL.",
                                "schema": {"type": "string"},
                            }
                        },
                    },
                    "400": response_ref("BadRequest"),
                    "413": response_ref("PayloadTooLarge"),
                    "429": response_ref("RateLimited"),
                    "503": response_ref("Unavailable"),
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
                    "200": json_response(schema_ref("DocumentStatus"), "The document's status."),
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
                    "200": json_response(schema_ref("Interpretation"), "The interpretation."),
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
                    "202": json_response(
                        schema_ref("RetryAccepted"), "The retry command was sent."
                    ),
                    "409": response_ref("Conflict"),
                    "429": response_ref("RateLimited"),
                    "503": response_ref("Unavailable"),
                    **_DOCUMENT_ERRORS,
                },
            }
        },
        "/v1/fairness": {
            "get": {
                "operationId": "getFairness",
                "summary": "The caller's limits, whether they are enforced, and its accounting.",
                "responses": {
                    "200": json_response(schema_ref("Fairness"), "The caller's own view."),
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
                        "content": {JSON_TYPE: {"schema": {"type": "object"}}},
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
                "responses": {"200": json_response(schema_ref("Health"), "The server is up.")},
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
            "schemas": SCHEMAS,
            "responses": RESPONSES,
        },
    }
