"""The components of the IntegrationsServer's OpenAPI 3.1 description: schemas and responses.

The paths in openapi.py refer to them with schema_ref and response_ref.
"""

from __future__ import annotations

from typing import Any, Final

JSON_TYPE: Final = "application/json"


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON_TYPE: {"schema": schema}}}


def response_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


SCHEMAS: Final[dict[str, Any]] = {
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
            "state": schema_ref("DocumentState"),
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
            "state": schema_ref("DocumentState"),
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
        "properties": {"documents": {"type": "array", "items": schema_ref("DocumentStatus")}},
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
            "state": schema_ref("DocumentState"),
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

RESPONSES: Final[dict[str, Any]] = {
    "Unauthorized": {
        "description": "Missing, invalid or expired bearer token.",
        "headers": {
            "WWW-Authenticate": {
                "description": 'Always Bearer error="invalid_token".',
                "schema": {"type": "string"},
            }
        },
        "content": {JSON_TYPE: {"schema": schema_ref("Error")}},
    },
    "BadRequest": json_response(schema_ref("Error"), "The request is malformed."),
    "NotFound": json_response(
        schema_ref("Error"),
        "No such document for the caller's tenant; another tenant's document answers the same.",
    ),
    "Conflict": json_response(
        schema_ref("Error"), "The document is not in a state that allows this."
    ),
    "PayloadTooLarge": json_response(schema_ref("Error"), "The upload exceeds the size limit."),
    "Unavailable": json_response(
        schema_ref("Error"), "Storage or broker unavailable; try again later."
    ),
    "RateLimited": {
        **json_response(
            schema_ref("Error"),
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
    "InternalError": json_response(
        schema_ref("Error"), "An unexpected failure; no details are disclosed."
    ),
}
