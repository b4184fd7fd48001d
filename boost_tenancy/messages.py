"""The message envelope: what the toolkit sends and what a handler receives.

Reserved properties carry the tenant, the stable message id and the attempt count on the wire;
applications cannot overwrite them, so a handler cannot forge another tenant's message.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from boost_tenancy.errors import ConfigError, MessageDecodeError, TenantMismatchError
from boost_tenancy.selectors import TENANT_PROPERTY, check_property_name
from boost_tenancy.tenancy import TenantId

MESSAGE_ID_PROPERTY: Final = "boostMessageId"
ATTEMPT_PROPERTY: Final = "boostAttempt"
ORIGINAL_QUEUE_PROPERTY: Final = "boostOriginalQueue"
DEAD_LETTER_REASON_PROPERTY: Final = "boostDeadLetterReason"
ERROR_TYPE_PROPERTY: Final = "boostErrorType"
ERROR_TEXT_PROPERTY: Final = "boostError"
RESERVED_PROPERTIES: Final = frozenset(
    {
        TENANT_PROPERTY,
        MESSAGE_ID_PROPERTY,
        ATTEMPT_PROPERTY,
        ORIGINAL_QUEUE_PROPERTY,
        DEAD_LETTER_REASON_PROPERTY,
        ERROR_TYPE_PROPERTY,
        ERROR_TEXT_PROPERTY,
    }
)
# The BOOST JSON bodies name the tenant under either key (seed 001, "Fallback Handling").
BODY_TENANT_KEYS: Final = ("tenantUUID", "organizationId")

_QUEUE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

Body = str | bytes


def check_queue_name(name: str) -> str:
    """Refuse a queue name that could address a topic, a wildcard or another broker path."""
    if not isinstance(name, str) or _QUEUE_RE.fullmatch(name) is None:
        raise ConfigError(
            f"invalid queue name {name!r}: expected 1-200 characters from A-Z a-z 0-9 . _ -"
        )
    return name


def check_id(kind: str, value: str) -> str:
    """Message and correlation ids travel as properties and into logs: keep them plain."""
    if not isinstance(value, str) or _ID_RE.fullmatch(value) is None:
        raise ConfigError(f"invalid {kind} {value!r}: expected 1-128 characters [A-Za-z0-9._:-]")
    return value


def new_id() -> str:
    """A fresh random message or correlation id."""
    return str(uuid.uuid4())


_DERIVED_NAMESPACE: Final = uuid.UUID("6f1d4d7e-3b1c-4a55-9a55-0b8f3f2c9e10")


def derived_id(parent_id: str, queue: str, index: int) -> str:
    """A deterministic id for the index-th message a handler publishes to queue.

    A retried handler publishes the same ids again, so downstream idempotency holds across retries.
    """
    return str(uuid.uuid5(_DERIVED_NAMESPACE, f"{parent_id}/{queue}/{index}"))


def encode_json_body(tenant: TenantId, body: Mapping[str, Any]) -> str:
    """JSON text with the tenant in the body too; a body naming another tenant is refused."""
    for key in BODY_TENANT_KEYS:
        claimed = body.get(key)
        if claimed is not None and claimed != tenant.value:
            raise TenantMismatchError(
                f"body field {key}={claimed!r} does not match the message tenant {tenant.value!r}"
            )
    return json.dumps({**body, TENANT_PROPERTY: tenant.value}, ensure_ascii=False)


def check_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Application properties: JMS identifiers, string values, none of the reserved names."""
    checked: dict[str, str] = {}
    for name, value in properties.items():
        check_property_name(name)
        if name in RESERVED_PROPERTIES:
            raise ConfigError(f"message property {name!r} is reserved for the toolkit")
        if not isinstance(value, str):
            raise ConfigError(f"message property {name!r} must be a string, got {value!r}")
        checked[name] = value
    return checked


@dataclass(frozen=True, slots=True, kw_only=True)
class WireMessage:
    """What a transport puts on the wire: a body and string properties, nothing tenant-aware."""

    body: Body
    properties: Mapping[str, str]
    correlation_id: str | None = None
    persistent: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """An outgoing message of one tenant; a str body travels as a JMS TextMessage."""

    tenant: TenantId
    body: Body
    message_id: str = field(default_factory=new_id)
    correlation_id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 1
    persistent: bool = True

    def __post_init__(self) -> None:
        # Keep the parsed value: a str tenant is validated and stored as a TenantId.
        object.__setattr__(self, "tenant", TenantId.parse(self.tenant))
        check_id("message id", self.message_id)
        if self.correlation_id is not None:
            check_id("correlation id", self.correlation_id)
        if isinstance(self.body, str) and "\x00" in self.body:
            # STOMP frames a text body without content-length by its NUL terminator.
            raise ConfigError("a text body cannot contain NUL characters; send bytes instead")
        if not isinstance(self.body, str | bytes):
            raise ConfigError(f"message body must be str or bytes, got {type(self.body).__name__}")
        if self.attempt < 1:
            raise ConfigError(f"attempt must be at least 1, got {self.attempt}")

    def to_wire(self) -> WireMessage:
        """Stamp the reserved properties; they always win over application properties."""
        props = dict(self.properties)
        props[TENANT_PROPERTY] = self.tenant.value
        props[MESSAGE_ID_PROPERTY] = self.message_id
        props[ATTEMPT_PROPERTY] = str(self.attempt)
        return WireMessage(
            body=self.body,
            properties=props,
            correlation_id=self.correlation_id or self.message_id,
            persistent=self.persistent,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class IncomingMessage:
    """A delivered message whose tenant has been checked against its subscription."""

    tenant: TenantId
    queue: str
    body: Body
    message_id: str
    correlation_id: str
    attempt: int
    redelivered: bool
    properties: Mapping[str, str]
    data: Any = None
    """The decoded JSON body, when the processor asks for JSON bodies."""

    @property
    def text(self) -> str:
        """The body as text; a bytes body that is not UTF-8 is a decode error."""
        if isinstance(self.body, str):
            return self.body
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"body is not UTF-8 text: {exc}") from exc


def decode_json_body(text: str, tenant: TenantId) -> Any:
    """Parse a JSON body and check any tenant it names; raises MessageDecodeError or mismatch."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageDecodeError(f"body is not valid JSON: {exc}") from exc
    if isinstance(data, dict):
        for key in BODY_TENANT_KEYS:
            claimed = data.get(key)
            if claimed is not None and claimed != tenant.value:
                raise TenantMismatchError(
                    f"body field {key}={claimed!r} does not match the tenantUUID property "
                    f"{tenant.value!r}"
                )
    return data
