"""An AsyncAPI 3.0 document of what processors consume and publish: each logical queue a channel
addressed as the routing stores it (`tenant.{tenant}.<queue>` for a routed or per-tenant queue,
the queue itself when shared), its dead-letter and quarantine queues, one receive operation per
queue a processor reads and one send operation per queue it declares it publishes to
(TenantProcessor.publishes), and every message with the `tenantUUID` property its grammar
requires. Payloads come from the processor's message model (a pydantic model or a dataclass) or
from schemas given per queue; otherwise any JSON object that names its tenant.

`boost-tenancy asyncapi module:Processor ...` prints it (docs/asyncapi.md).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Final

from boost_tenancy.messages import ATTEMPT_PROPERTY, MESSAGE_ID_PROPERTY
from boost_tenancy.models import is_pydantic_model
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.routing import DEFAULT_ROUTING, TENANT_QUEUE_PREFIX, Routing, Topology
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import MAX_TENANT_LENGTH, TENANT_PATTERN

ASYNCAPI_VERSION: Final = "3.0.0"
TENANT_PARAMETER: Final = "tenant"
_KEY_RE: Final = re.compile(r"[^A-Za-z0-9_\-]")

JsonSchema = dict[str, Any]


def _key(text: str) -> str:
    """A channel, operation or message key: what AsyncAPI allows of a queue or class name."""
    return _KEY_RE.sub("_", text)


def headers_schema() -> JsonSchema:
    """The properties every message carries: its tenant (required), id and attempt."""
    return {
        "type": "object",
        "required": [TENANT_PROPERTY],
        "properties": {
            TENANT_PROPERTY: {
                "type": "string",
                "pattern": f"^{TENANT_PATTERN}$",
                "maxLength": MAX_TENANT_LENGTH,
                "description": "The tenant the message belongs to; a message without a valid "
                "one is quarantined, never handled.",
            },
            MESSAGE_ID_PROPERTY: {
                "type": "string",
                "description": "The message's id, kept across retries and re-drives.",
            },
            ATTEMPT_PROPERTY: {
                "type": "string",
                "pattern": "^[1-9][0-9]{0,6}$",
                "description": "The attempt this delivery is (1 for the first).",
            },
        },
    }


def _annotation_schema(annotation: Any) -> JsonSchema:  # noqa: PLR0911  # one case per JSON type
    origin = typing.get_origin(annotation)
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if origin in (list, tuple, Sequence):
        return {"type": "array"}
    if origin in (dict, Mapping) or annotation is dict:
        return {"type": "object"}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return dataclass_schema(annotation)
    return {}


def dataclass_schema(model: type) -> JsonSchema:
    """A JSON Schema of a dataclass's fields (their JSON types; what a field's default makes
    optional is not required)."""
    hints = typing.get_type_hints(model)
    fields = dataclasses.fields(model)
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    schema: JsonSchema = {
        "type": "object",
        "title": model.__name__,
        "properties": {f.name: _annotation_schema(hints.get(f.name)) for f in fields},
    }
    if required:
        schema["required"] = required
    if model.__doc__ and not model.__doc__.startswith(f"{model.__name__}("):
        schema["description"] = model.__doc__.strip()
    return schema


def model_schema(model: type) -> JsonSchema:
    """The JSON Schema of a message model: pydantic's own, or a dataclass's fields."""
    if is_pydantic_model(model):
        schema: JsonSchema = model.model_json_schema()  # type: ignore[attr-defined]
        return _inline_defs(schema)
    if dataclasses.is_dataclass(model):
        return dataclass_schema(model)
    raise TypeError(f"{model!r} is neither a pydantic model nor a dataclass")


def _inline_defs(schema: JsonSchema) -> JsonSchema:
    """pydantic's $defs and #/$defs references, resolved in place (AsyncAPI's schema object is
    JSON Schema draft 7, whose references point inside the whole document)."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: JsonSchema = resolve(schema)
    return resolved


ANY_BODY: Final[JsonSchema] = {
    "type": "object",
    "description": "A JSON object; the toolkit adds tenantUUID to what a producer sends.",
    "properties": {TENANT_PROPERTY: {"type": "string", "pattern": f"^{TENANT_PATTERN}$"}},
}


class AsyncApiDocument:
    """Builds the document of processors (classes or instances) on routing; schemas gives a
    queue's payload where no processor's model does."""

    def __init__(
        self,
        processors: Sequence[type[TenantProcessor] | TenantProcessor],
        *,
        routing: Routing = DEFAULT_ROUTING,
        schemas: Mapping[str, type | JsonSchema] | None = None,
        title: str = "boost-tenancy services",
        version: str = "1.0.0",
    ) -> None:
        self._processors = [p if isinstance(p, type) else type(p) for p in processors]
        self._routing = routing
        self._schemas = dict(schemas or {})
        self._title = title
        self._version = version

    def _address(self, queue: str) -> str:
        if self._routing.topology(queue) is Topology.SHARED:
            return queue
        return f"{TENANT_QUEUE_PREFIX}{{{TENANT_PARAMETER}}}.{queue}"

    def _payload(self, queue: str, model: type | None) -> JsonSchema:
        given = self._schemas.get(queue)
        if given is not None:
            return dict(given) if isinstance(given, dict) else model_schema(given)
        return model_schema(model) if model is not None else dict(ANY_BODY)

    def _channel(self, queue: str, message: str, what: str) -> dict[str, Any]:
        address = self._address(queue)
        channel: dict[str, Any] = {
            "address": address,
            "title": queue,
            "description": what,
            "messages": {message: {"$ref": f"#/components/messages/{message}"}},
        }
        if "{" in address:
            channel["parameters"] = {
                TENANT_PARAMETER: {
                    "description": f"The tenant id ({TENANT_PROPERTY}): {TENANT_PATTERN}",
                    "location": f"$message.header#/{TENANT_PROPERTY}",
                }
            }
        return channel

    def build(self) -> dict[str, Any]:
        """The document as a JSON-ready dict."""
        consumed: dict[str, type | None] = {}
        published: dict[str, None] = {}
        readers: dict[str, list[str]] = {}
        writers: dict[str, list[str]] = {}
        for processor in self._processors:
            for queue in processor.queues:
                if consumed.get(queue) is None:
                    consumed[queue] = processor.model
                readers.setdefault(queue, []).append(processor.__name__)
            for queue in getattr(processor, "publishes", ()):
                published.setdefault(queue, None)
                writers.setdefault(queue, []).append(processor.__name__)
        queues = sorted(set(consumed) | set(published))
        channels: dict[str, Any] = {}
        operations: dict[str, Any] = {}
        messages: dict[str, Any] = {}
        for queue in queues:
            key, message = _key(queue), _key(f"{queue}.message")
            messages[message] = {
                "name": message,
                "title": f"A message of {queue}",
                "contentType": "application/json",
                "headers": headers_schema(),
                "payload": self._payload(queue, consumed.get(queue)),
            }
            channels[key] = self._channel(
                queue,
                message,
                f"{queue}, one queue per tenant on the broker"
                if "{" in self._address(queue)
                else f"{queue}, shared by the tenants (each reads its own by selector)",
            )
            for action, who, summary in (
                *(
                    (("receive", r, "handles each tenant's messages of"))
                    for r in readers.get(queue, [])
                ),
                *(
                    (("send", w, "publishes, as the tenant it handles, to"))
                    for w in writers.get(queue, [])
                ),
            ):
                operations[_key(f"{who}.{action}.{queue}")] = {
                    "action": action,
                    "channel": {"$ref": f"#/channels/{key}"},
                    "summary": f"{who} {summary} {queue}",
                    "messages": [{"$ref": f"#/channels/{key}/messages/{message}"}],
                }
            channels.update(self._failure_channels(queue, message))
        return {
            "asyncapi": ASYNCAPI_VERSION,
            "info": {
                "title": self._title,
                "version": self._version,
                "description": "Tenant-isolated messaging: every message carries its tenant as "
                f"the {TENANT_PROPERTY} property, and each tenant's processors read only their "
                "own tenant's messages. Generated by boost-tenancy asyncapi.",
            },
            "defaultContentType": "application/json",
            "channels": channels,
            "operations": operations,
            "components": {"messages": messages},
        }

    def _failure_channels(self, queue: str, message: str) -> dict[str, Any]:
        """The dead letters and the quarantine of queue: what an operator reads and re-drives."""
        stored = self._address(queue)
        failures = {
            _key(f"{queue}.dead-letters"): {
                "address": dead_letter_queue(stored),
                "title": f"Dead letters of {queue}",
                "description": "Messages that failed for good (PermanentError, attempts used "
                "up), each with boostDeadLetterReason, boostErrorType and boostError; "
                "boost-tenancy dlq list|redrive reads them.",
                "messages": {message: {"$ref": f"#/components/messages/{message}"}},
            },
            _key(f"{queue}.quarantine"): {
                "address": quarantine_queue(queue),
                "title": f"Quarantine of {queue}",
                "description": "Messages whose tenantUUID was missing or invalid, never given "
                "to a tenant; boost-tenancy quarantine list|redrive reads them.",
                "messages": {message: {"$ref": f"#/components/messages/{message}"}},
            },
        }
        if "{" in stored:
            dead = failures[_key(f"{queue}.dead-letters")]
            dead["parameters"] = {
                TENANT_PARAMETER: {
                    "description": f"The tenant id ({TENANT_PROPERTY}): {TENANT_PATTERN}",
                    "location": f"$message.header#/{TENANT_PROPERTY}",
                }
            }
        return failures


__all__ = ["ASYNCAPI_VERSION", "AsyncApiDocument", "dataclass_schema", "headers_schema"]
