"""The message envelope: what the toolkit sends and what a handler receives, with the reserved
properties (tenant, message id, attempt) that applications cannot overwrite."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, NoReturn, Protocol

from boost_tenancy.errors import (
    ConfigError,
    MessageDecodeError,
    MessageEncodeError,
)
from boost_tenancy.expiry import check_expiry
from boost_tenancy.frozen import fast_init
from boost_tenancy.header_values import check_id, new_id
from boost_tenancy.json_bodies import (
    DataclassInstance,
    PydanticModel,
    encode_json_body,
    json_object,
)
from boost_tenancy.selectors import TENANT_PROPERTY, check_property_name
from boost_tenancy.tenancy import TenantId

MESSAGE_ID_PROPERTY: Final = "boostMessageId"
ATTEMPT_PROPERTY: Final = "boostAttempt"
ORIGINAL_QUEUE_PROPERTY: Final = "boostOriginalQueue"
DEAD_LETTER_REASON_PROPERTY: Final = "boostDeadLetterReason"
ERROR_TYPE_PROPERTY: Final = "boostErrorType"
ERROR_TEXT_PROPERTY: Final = "boostError"
REPLY_TO_PROPERTY: Final = "boostReplyTo"
"""The logical queue a request's reply goes to (reply.<name>): TenantRequester sets it, and
HandlerContext.reply sends there, as the request's tenant."""
REPLY_QUEUE_PREFIX: Final = "reply."
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
"""Reserved properties carry the tenant, the stable message id and the attempt count on the wire;
applications cannot overwrite them, so a handler cannot forge another tenant's message."""

FRAME_LEVEL_HEADERS: Final = frozenset(
    {
        "transaction",
        "receipt",
        "destination",
        "subscription",
        "message-id",
        "ack",
        "content-length",
        "content-type",
    }
)
"""Names that are frame-level headers of a wire protocol, never application properties: no
message may carry one as a property, and no transport copies one from a delivery into a message
it forwards. Artemis stores a STOMP SEND's `transaction` header as a property; a copy sent later
with it is filed under a transaction nobody commits, and is lost although its receipt came
(shared BROKERS.md, 2026-11-28)."""

BROKER_INSTRUCTIONS: Final = frozenset(
    {
        "persistent",
        "expires",
        "priority",
        "AMQ_SCHEDULED_DELAY",
        "AMQ_SCHEDULED_PERIOD",
        "AMQ_SCHEDULED_REPEAT",
        "AMQ_SCHEDULED_CRON",
        "_AMQ_SCHED_DELIVERY",
    }
)
"""SEND headers a broker reads as instructions (delivery mode, expiry, JMS priority, a schedule),
never application properties: the toolkit sets what it means by them itself (persistent,
expires_at_ms, delay_ms). As a property, `priority=high` made Artemis 2.44 answer the SEND with
an ERROR frame and close the connection, on every try."""

DUPLICATE_ID_PROPERTY: Final = "_AMQ_DUPL_ID"
"""Artemis's duplicate detection id: the broker drops a message whose id its address has seen,
and still confirms the send. Delivered as a property, it is not handed on (no Delivery carries
it): a retry's copy sent back to the same address with it was dropped, and the message lost."""

_QUEUE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
Body = str | bytes
"""A body as it travels: text (a JMS TextMessage) or bytes (a BytesMessage)."""

if TYPE_CHECKING:
    # The default makes a bare IncomingMessage (or TenantProcessor) mean [Any] to a type checker;
    # at run time it changes nothing, so the standard library's TypeVar is enough there.
    from typing_extensions import TypeVar

    M = TypeVar("M", default=Any)
else:
    from typing import TypeVar

    M = TypeVar("M")


MessageBody = Mapping[str, Any] | DataclassInstance | PydanticModel | str | bytes
"""What a producer or ctx.publish sends: a mapping, a dataclass instance or a pydantic model
(JSON with tenantUUID stamped in, values encoded by boost_tenancy.codec), or text or bytes as
they are."""


def check_queue_name(name: str) -> str:
    """Refuse a queue name that could address a topic, a wildcard or another broker path."""
    if not isinstance(name, str) or not _valid_queue_name(name):
        _refuse_queue_name(name)
    return name


@functools.lru_cache(maxsize=8192)
def _valid_queue_name(name: str) -> bool:
    # Asked for every message sent, of the few queues a process sends to: the answer is
    # remembered (only the answer: the caller gets its own argument back).
    return _QUEUE_RE.fullmatch(name) is not None


def _refuse_queue_name(name: object) -> NoReturn:
    raise ConfigError(
        f"invalid queue name {name!r}: expected 1-200 characters from A-Z a-z 0-9 . _ -"
    )


def wire_body(body: Body) -> bytes:
    """The bytes a body goes on the wire as. A text body that came in as invalid UTF-8 (decoded
    with surrogateescape) goes back out as the very same bytes; any other lone surrogate has no
    UTF-8 form and is refused before anything is written."""
    if isinstance(body, bytes):
        return body
    try:
        return body.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise MessageEncodeError(
            f"text body is not encodable as UTF-8 ({exc.reason} at position {exc.start}: "
            f"{body[exc.start : exc.end]!r}); send valid text or bytes"
        ) from exc


def check_text_body(body: str) -> str:
    """A text body the wire can carry: no NUL (STOMP ends a text frame with it), no lone
    surrogate other than the escapes of a received body that was not valid UTF-8."""
    if "\x00" in body:
        # STOMP frames a text body without content-length by its NUL terminator.
        raise ConfigError("a text body cannot contain NUL characters; send bytes instead")
    if not body.isascii():
        # A received body decoded from invalid UTF-8 passes (it goes out as the same bytes).
        wire_body(body)
    return body


def check_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Application properties: JMS identifiers, string values, none of the reserved names."""
    checked: dict[str, str] = {}
    for name, value in properties.items():
        check_property_name(name)
        if name in RESERVED_PROPERTIES:
            raise ConfigError(f"message property {name!r} is reserved for the toolkit")
        if name in FRAME_LEVEL_HEADERS:
            raise ConfigError(
                f"message property {name!r} is a frame header of the wire protocol, not an "
                "application property: a broker would act on it (a STOMP `transaction` files "
                "the message under a transaction nobody commits); choose another name"
            )
        if name in BROKER_INSTRUCTIONS:
            raise ConfigError(
                f"message property {name!r} is a header a broker reads as an instruction "
                "(delivery mode, expiry, priority or schedule), not an application property: "
                "choose another name (expiry and delays are set by the toolkit's own options)"
            )
        if not isinstance(value, str):
            raise ConfigError(f"message property {name!r} must be a string, got {value!r}")
        checked[name] = value
    return checked


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class WireMessage:
    """What a transport puts on the wire: a body and string properties, nothing tenant-aware."""

    body: Body
    properties: Mapping[str, str]
    correlation_id: str | None = None
    persistent: bool = True
    expires_at_ms: int | None = None
    """When the broker expires the message (epoch milliseconds), or None: it never does. Each
    transport sends it as its broker honours it; what a broker does with an expired message is
    the broker's (docs/fairness.md, "Message time-to-live")."""


class PublishCheck(Protocol):
    """Admits a tenant's messages to a (logical) queue before they are sent, or raises
    PublishRefusedError; quotas.PublishGuard is the toolkit's."""

    def check(self, tenant: TenantId, queue: str, messages: Sequence[WireMessage]) -> None: ...


@fast_init
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
    expires_at_ms: int | None = None
    """The absolute expiry (epoch milliseconds) the tenant's time-to-live gave it, or None."""

    def __post_init__(self) -> None:
        # Keep the parsed value: a str tenant is validated and stored as a TenantId.
        object.__setattr__(self, "tenant", TenantId.parse(self.tenant))
        check_id("message id", self.message_id)
        if self.correlation_id is not None:
            check_id("correlation id", self.correlation_id)
        if isinstance(self.body, str):
            check_text_body(self.body)
        elif not isinstance(self.body, bytes):
            raise ConfigError(f"message body must be str or bytes, got {type(self.body).__name__}")
        if self.attempt < 1:
            raise ConfigError(f"attempt must be at least 1, got {self.attempt}")
        check_expiry(self.expires_at_ms)

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
            expires_at_ms=self.expires_at_ms,
        )


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class IncomingMessage(Generic[M]):
    """A delivered message whose tenant has been checked against its subscription.

    IncomingMessage[M] is the message of a processor with the model M (boost_tenancy.models):
    model holds the body validated into it.
    """

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
    model: M = None  # type: ignore[assignment]  # no model: None, and M is then Any
    """The body validated into the processor's model; None when it declares none."""

    @property
    def text(self) -> str:
        """The body as text; a body that is not UTF-8 is a decode error."""
        return body_text(self.body)


def body_text(body: Body) -> str:
    """A body as valid text, or MessageDecodeError: bytes that are not UTF-8, and text a
    transport decoded from invalid UTF-8 (it holds surrogate escapes), are not text."""
    try:
        if isinstance(body, bytes):
            return body.decode("utf-8")
        if not body.isascii():
            body.encode("utf-8")
    except UnicodeError as exc:
        raise MessageDecodeError(f"body is not UTF-8 text: {exc}") from exc
    return body


def build_message(
    tenant: TenantId | str,
    body: MessageBody,
    *,
    message_id: str | None = None,
    correlation_id: str | None = None,
    properties: Mapping[str, str] | None = None,
    expires_at_ms: int | None = None,
) -> Message:
    """A tenant's message; a mapping, dataclass or pydantic model body becomes JSON text
    carrying tenantUUID too."""
    tenant_id = TenantId.parse(tenant)
    payload: Body
    mapping = None if isinstance(body, str | bytes) else json_object(body)
    if isinstance(body, str | bytes):
        payload = body
    elif mapping is not None:
        payload = encode_json_body(tenant_id, mapping)
    else:
        raise TypeError(
            f"message body must be a mapping, a dataclass instance, a pydantic model, str or "
            f"bytes, got {type(body).__name__}"
        )
    extra: dict[str, Any] = {}
    if message_id is not None:
        extra["message_id"] = message_id
    return Message(
        tenant=tenant_id,
        body=payload,
        correlation_id=correlation_id,
        properties=check_properties(properties or {}),
        expires_at_ms=expires_at_ms,
        **extra,
    )
