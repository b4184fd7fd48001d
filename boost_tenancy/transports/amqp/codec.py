"""Messages to and from AMQP 1.0: what the toolkit's WireMessage becomes on the wire, and what
a delivered proton Message becomes for the toolkit.

Text travels as an amqp-value string (a Java JMS consumer on Artemis reads a TextMessage), bytes
as a data section (a BytesMessage); properties as string application-properties (JMS string
properties, tenantUUID among them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proton import Message, symbol

from boost_tenancy.messages import Body, WireMessage, wire_body
from boost_tenancy.transports.stomp.frames import (
    BYTES_MARKER_VALUE,
    TEXT_MARKER_PROPERTY,
    TEXT_MARKER_VALUE,
    header_value,
)

DELIVERY_DELAY: Final = symbol("x-opt-delivery-delay")
"""Message annotation: the broker holds the message back this many milliseconds (Artemis)."""
STOMP_ARTEFACTS: Final = frozenset({"content-length", "destination"})
"""Properties Artemis adds to a message sent over STOMP when an AMQP client reads it (measured
on 2.44): frame headers, not the sender's properties."""
_TEXT_TYPES: Final = ("text/",)


def to_amqp(message: WireMessage, delay_ms: int = 0) -> Message:
    """The proton Message a WireMessage goes out as; MessageEncodeError for a body the wire
    cannot carry.

    A str that is not valid UTF-8 (text that arrived as invalid bytes, decoded with
    surrogateescape) has no amqp-value string form: it goes out as the very same bytes, marked
    text, so a retry or dead-letter copy is byte-exact. boostBodyType says text or bytes to
    STOMP readers on Artemis, where every body arrives with a content-length.
    """
    properties = {header_value(k): header_value(v) for k, v in message.properties.items()}
    body: Any = message.body
    if isinstance(body, str):
        properties[TEXT_MARKER_PROPERTY] = TEXT_MARKER_VALUE
        if _has_surrogates(body):
            body = wire_body(body)  # raises MessageEncodeError for a surrogate of no byte
    else:
        properties[TEXT_MARKER_PROPERTY] = BYTES_MARKER_VALUE
    out = Message(
        body=body,
        properties=properties,
        durable=message.persistent,
        correlation_id=None
        if message.correlation_id is None
        else header_value(message.correlation_id),
    )
    # A bytes body as a data section, not as an amqp-value holding binary: that is what JMS
    # reads as a BytesMessage.
    out.inferred = isinstance(body, bytes)
    if delay_ms > 0:
        out.annotations = {DELIVERY_DELAY: int(delay_ms)}
    return out


def _has_surrogates(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def properties_of(message: Message) -> dict[str, str]:
    """application-properties as strings, the way a JMS getStringProperty reads them; the
    artefacts of a STOMP sender and the body-type marker left out."""
    raw: Mapping[Any, Any] = message.properties or {}
    return {
        str(key): _as_text(value)
        for key, value in raw.items()
        if str(key) not in STOMP_ARTEFACTS and str(key) != TEXT_MARKER_PROPERTY
    }


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def body_of(message: Message) -> Body:
    """The body as the toolkit hands it on: an amqp-value string is text; a data section (or
    binary value) is bytes unless its sender marked it text (boostBodyType, or a text
    content-type), as a STOMP sender's text reaches an AMQP reader on Artemis."""
    body = message.body
    if isinstance(body, str):
        return body
    if isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
        return data.decode("utf-8", "surrogateescape") if _marked_text(message) else data
    if body is None:
        return b""
    # An amqp-sequence or a map from a foreign producer: its text form, never silently lost.
    return str(body)


def _marked_text(message: Message) -> bool:
    props: Mapping[Any, Any] = message.properties or {}
    marker = props.get(TEXT_MARKER_PROPERTY)
    if marker in (TEXT_MARKER_VALUE, BYTES_MARKER_VALUE):
        return bool(marker == TEXT_MARKER_VALUE)
    content_type: object = message.content_type
    if not content_type or content_type == "None":  # proton reads an unset one as 'None'
        content_type = props.get("content-type") or ""
    return str(content_type).lower().startswith(_TEXT_TYPES)


def correlation_of(message: Message) -> str | None:
    value = message.correlation_id
    return None if value is None else _as_text(value)
