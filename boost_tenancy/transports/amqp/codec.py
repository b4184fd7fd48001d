"""Messages to and from AMQP 1.0: what the toolkit's WireMessage becomes on the wire (to_amqp,
as a proton Message; encoding.py writes the same bytes itself), and what a delivered message
becomes for the toolkit (from a proton Message, or from the parts decoding.py reads).

Text travels as an amqp-value string (a Java JMS consumer on Artemis reads a TextMessage), bytes
as a data section (a BytesMessage); properties as string application-properties (JMS string
properties, tenantUUID among them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proton import Message, symbol

from boost_tenancy.expiry import now_ms, read_expiry
from boost_tenancy.header_values import has_surrogates, new_id, sanitized_id
from boost_tenancy.messages import (
    DUPLICATE_ID_PROPERTY,
    FRAME_LEVEL_HEADERS,
    MESSAGE_ID_PROPERTY,
    Body,
    WireMessage,
    wire_body,
)
from boost_tenancy.transports.stomp.frames import (
    BYTES_MARKER_VALUE,
    TEXT_MARKER_PROPERTY,
    TEXT_MARKER_VALUE,
    header_value,
)

DELIVERY_DELAY: Final = symbol("x-opt-delivery-delay")
"""Message annotation: the broker holds the message back this many milliseconds (Artemis)."""
STOMP_ARTEFACTS: Final = FRAME_LEVEL_HEADERS | {DUPLICATE_ID_PROPERTY}
"""Frame headers, never the sender's properties. Artemis adds `content-length` and
`destination` (and keeps a transactional SEND's `transaction`) to a message sent over STOMP
when an AMQP client reads it (measured on 2.44). And Artemis's duplicate detection id, used up
where the message was sent (messages.DUPLICATE_ID_PROPERTY)."""
_TEXT_TYPES: Final = ("text/",)
HEADER_TTL_LIMIT_MS: Final = 2**32 - 1
"""header.ttl is a uint of milliseconds (about 49.7 days)."""


def header_ttl(expires_at_ms: int | None, now: int | None = None) -> int | None:
    """The header.ttl a message with this absolute expiry is sent with: what is left of it at
    now (epoch ms, the wall clock by default), at least 1 ms. RabbitMQ 3.10 honours only the
    ttl (as its per-message TTL; it ignores absolute-expiry-time), Artemis the absolute time
    first. None without an expiry, or when what is left does not fit a uint: the message then
    expires by its absolute-expiry-time alone, where the broker reads it (not on RabbitMQ)."""
    if expires_at_ms is None:
        return None
    left = expires_at_ms - (now_ms() if now is None else now)
    return None if left > HEADER_TTL_LIMIT_MS else max(1, left)


def delivered_expiry(
    absolute_expiry_time: int | None, ttl: int | None, now: int | None = None
) -> int | None:
    """A delivered message's expiry (epoch ms): its absolute-expiry-time; for a sender that set
    only a ttl, now plus that ttl (brokers hand the ttl on as it was sent)."""
    if absolute_expiry_time is not None or ttl is None:
        return absolute_expiry_time
    return read_expiry((now_ms() if now is None else now) + ttl)


def _proton_seconds(milliseconds: int) -> float:
    # proton takes seconds and truncates seconds * 1000 to an integer: half a millisecond more
    # makes it land on the exact millisecond whatever the float rounding.
    return (milliseconds + 0.5) / 1000.0


def wire_parts(message: WireMessage) -> tuple[dict[str, str], Body]:
    """The application-properties and body a message goes out with: its properties without
    frame-level headers (FRAME_LEVEL_HEADERS), marked text or bytes, and a text body that is
    not valid UTF-8 as its very bytes; MessageEncodeError for a surrogate of no byte."""
    properties = {
        header_value(k): header_value(v)
        for k, v in message.properties.items()
        if k not in FRAME_LEVEL_HEADERS
    }
    body = message.body
    if isinstance(body, str):
        properties[TEXT_MARKER_PROPERTY] = TEXT_MARKER_VALUE
        if has_surrogates(body):
            body = wire_body(body)
    else:
        properties[TEXT_MARKER_PROPERTY] = BYTES_MARKER_VALUE
    return properties, body


def amqp_message_id(message: WireMessage) -> str:
    """The AMQP message-id a message goes out with: its toolkit id (boostMessageId, made valid
    if a foreign one was carried over), or a fresh one. A message without the toolkit's id gets
    one derived from the message-id it arrives with, and an AMQP 1.0 broker gives a message no
    name of its own (unlike STOMP's message-id), so without it each delivery would get another
    id. A JMS producer sets one too (JMSMessageID)."""
    own = message.properties.get(MESSAGE_ID_PROPERTY)
    return sanitized_id(own) if own else new_id()


def to_amqp(
    message: WireMessage, delay_ms: int = 0, now: int | None = None, message_id: str | None = None
) -> Message:
    """The proton Message a WireMessage goes out as; MessageEncodeError for a body the wire
    cannot carry. message_id: the message-id, by default amqp_message_id(message).

    An expiry goes out twice: as properties.absolute-expiry-time, and as what is left of it in
    header.ttl (header_ttl; now: the wall clock in epoch ms, by default read here).

    A str that is not valid UTF-8 (text that arrived as invalid bytes, decoded with
    surrogateescape) has no amqp-value string form: it goes out as the very same bytes, marked
    text, so a retry or dead-letter copy is byte-exact. boostBodyType says text or bytes to
    STOMP readers on Artemis, where every body arrives with a content-length.
    """
    properties, body = wire_parts(message)
    out = Message(
        id=amqp_message_id(message) if message_id is None else message_id,
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
    if message.expires_at_ms is not None:
        out.expiry_time = _proton_seconds(message.expires_at_ms)
        ttl = header_ttl(message.expires_at_ms, now)
        if ttl is not None:
            out.ttl = _proton_seconds(ttl)
    return out


def properties_of(message: Message) -> dict[str, str]:
    """application-properties as strings, the way a JMS getStringProperty reads them; the
    artefacts of a STOMP sender and the body-type marker left out."""
    return text_properties(message.properties or {})


def text_properties(raw: Mapping[Any, Any]) -> dict[str, str]:
    """properties_of() for the application-properties as decoded."""
    return {
        str(key): _as_text(value)
        for key, value in raw.items()
        if str(key) not in STOMP_ARTEFACTS and str(key) != TEXT_MARKER_PROPERTY
    }


def _as_text(value: object) -> str:
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    # proton's own number types print their type (a JMS int property 5 is int32(5)).
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return str(float(value))
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def body_of(message: Message) -> Body:
    """The body as the toolkit hands it on: an amqp-value string is text; a data section (or
    binary value) is bytes unless its sender marked it text (boostBodyType, or a text
    content-type), as a STOMP sender's text reaches an AMQP reader on Artemis."""
    return delivered_body(message.body, message.properties or {}, message.content_type)


def delivered_body(body: object, properties: Mapping[Any, Any], content_type: object) -> Body:
    """body_of() for a body, application-properties and content-type as decoded."""
    if isinstance(body, str):
        return body
    if isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
        return (
            data.decode("utf-8", "surrogateescape")
            if _marked_text(properties, content_type)
            else data
        )
    if body is None:
        return b""
    # An amqp-sequence or a map from a foreign producer: its text form, never silently lost.
    return str(body)


def _marked_text(properties: Mapping[Any, Any], content_type: object) -> bool:
    marker = properties.get(TEXT_MARKER_PROPERTY)
    if marker in (TEXT_MARKER_VALUE, BYTES_MARKER_VALUE):
        return bool(marker == TEXT_MARKER_VALUE)
    if not content_type or content_type == "None":  # proton reads an unset one as 'None'
        content_type = properties.get("content-type") or ""
    return str(content_type).lower().startswith(_TEXT_TYPES)


def correlation_of(message: Message) -> str | None:
    return text_or_none(message.correlation_id)


def text_or_none(value: object) -> str | None:
    """A correlation id as decoded, as text."""
    return None if value is None else _as_text(value)


def message_id_text(value: object) -> str | None:
    """The broker's message id as decoded, as text: a binary one in hex, a number in digits
    (stable, unlike the repr of the memoryview proton hands over for a binary, which
    inbound.adopt would seed an id with, or proton's 'ulong(5)')."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return _as_text(value)
