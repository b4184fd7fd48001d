"""STOMP 1.2 frames as the toolkit writes and reads them: header escaping, SEND encoding, the
rule that tells a text body from a byte body, and the headers of a MESSAGE that are not
application properties.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from boost_tenancy.errors import MessageEncodeError
from boost_tenancy.expiry import read_expiry
from boost_tenancy.header_values import has_surrogates
from boost_tenancy.messages import (
    BROKER_INSTRUCTIONS,
    DUPLICATE_ID_PROPERTY,
    FRAME_LEVEL_HEADERS,
    Body,
    WireMessage,
    check_queue_name,
)
from boost_tenancy.transports.base import Delivery
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

FRAME_HEADERS: Final = (
    FRAME_LEVEL_HEADERS
    # Scheduling instructions are consumed by the broker; copied onto a retry or dead-letter copy
    # they would delay it again (Classic AMQ_SCHEDULED_*, Artemis _AMQ_SCHED_DELIVERY).
    | BROKER_INSTRUCTIONS
    | frozenset(
        {
            "redelivered",
            "correlation-id",
            "timestamp",
            "type",
            "reply-to",
            "scheduledJobId",
            DUPLICATE_ID_PROPERTY,
        }
    )
)
"""Headers the broker sets on MESSAGE frames that are not application properties."""

QUEUE_PREFIX: Final = "/queue/"

TEXT_CONTENT_TYPE: Final = "text/plain;charset=utf-8"
"""Sent with every text body. Artemis puts content-length on every MESSAGE it delivers, so the
missing content-length that marks a TextMessage on Classic marks nothing there; both brokers
return the SEND's content-type on the MESSAGE (Classic as a string property of that name,
Artemis in its _AMQ_CONTENT_TYPE)."""
TEXT_MARKER_PROPERTY: Final = "boostBodyType"
TEXT_MARKER_VALUE: Final = "text"
BYTES_MARKER_VALUE: Final = "bytes"
"""What the toolkit stamps on a byte body: on Artemis an unmarked valid-UTF-8 body is text."""
"""A string property a JMS producer can set (a JMS property name cannot be content-type) so a
TextMessage read over STOMP on Artemis is text to the toolkit: boostBodyType=text."""
_UTF8_CHARSETS: Final = frozenset({"utf-8", "utf8"})

# Surrogates have no UTF-8 form; a str holds them when text was decoded with surrogateescape
# or surrogatepass, or parsed from a JSON "\ud83d" escape.
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def header_value(value: str) -> str:
    """A header name or value as a frame carries it: NUL and lone surrogates become U+FFFD.

    NUL is replaced because it ends a frame: Classic keeps it in the header and hands consumers
    the frame cut in two. Other control characters are left alone: Classic 5.17 and stomp.py
    carry every one of them through unchanged. The in-memory model applies the same rule.
    """
    if not value.isascii() and _SURROGATE.search(value) is not None:
        # Through UTF-16 so a surrogate pair becomes its character and a lone one U+FFFD.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value.replace("\x00", "\ufffd")


def _plain(text: str) -> bool:
    """Whether text goes into a header as it is: nothing to escape or replace."""
    # A few scans at C speed and no copy, which measured faster than one regular expression.
    return (
        text.isascii()
        and ":" not in text
        and "\\" not in text
        and "\n" not in text
        and "\r" not in text
        and "\x00" not in text
    )


def _escape(value: str) -> str:
    """header_value, then STOMP 1.2 escaping of backslash, carriage return, newline and colon."""
    if _plain(value):
        return value
    return (
        header_value(value)
        .replace("\\", "\\\\")
        .replace("\r", "\\r")
        .replace("\n", "\\n")
        .replace(":", "\\c")
    )


def encode_frame(command: str, headers: Mapping[str, str], body: bytes = b"") -> bytes:
    """One STOMP 1.2 frame.

    The toolkit encodes its own SEND, ACK, BEGIN and COMMIT frames so that a batch, or every
    acknowledgement waiting, goes out in one socket write instead of one stomp.py call each.
    Any header text is accepted: what a frame cannot carry is replaced (see _escape), so an
    error text copied into a header can never break the connection's framing.
    """
    if not headers:
        head = ""
    elif _plain("".join(headers)) and _plain("".join(headers.values())):
        # Most frames (every SEND and ACK): nothing to escape in any header, so the lines are
        # joined at C speed, 3 times faster than escaping each name and value in turn.
        head = "\n".join(map(":".join, headers.items())) + "\n"
    else:
        head = "".join(f"{_escape(name)}:{_escape(value)}\n" for name, value in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\x00"


def with_receipt(frame: bytes, receipt: str) -> bytes:
    """A frame encode_frame wrote, asking for receipt too: the header goes right after the
    command line, so a batch's frames are encoded once each, before it is known which is last."""
    command, rest = frame.split(b"\n", 1)
    return b"%s\nreceipt:%s\n%s" % (command, _escape(receipt).encode(), rest)


def ack_frame(ack_id: str) -> bytes:
    """encode_frame("ACK", {"id": ack_id}): the frame written for every message consumed.

    A broker's ack id is ASCII whose only character to escape is the colon (Classic's
    'ID:host-...:1:1:1:1'), which this escapes in one replace, 5 times faster than the general
    path that any other id takes.
    """
    if (
        ack_id.isascii()
        and "\\" not in ack_id
        and "\n" not in ack_id
        and "\r" not in ack_id
        and "\x00" not in ack_id
    ):
        return b"ACK\nid:%s\n\n\x00" % ack_id.replace(":", "\\c").encode("ascii")
    return encode_frame("ACK", {"id": ack_id})


def text_body_bytes(queue: str, text: str) -> bytes:
    """A text body as the bytes of its frame, or MessageEncodeError naming what is wrong.

    Encoded with surrogateescape: a body that arrived as invalid UTF-8 (decoded the same way)
    goes out again as the very same bytes, so a retry or dead-letter copy is byte-exact.
    """
    nul = text.find("\x00")
    if nul >= 0:
        # Sent without content-length (so Java consumers get a TextMessage), the body ends at
        # its first NUL: the rest would reach the broker as a frame of its own.
        raise MessageEncodeError(
            f"text body for {queue!r} has NUL at position {nul}, which would end the frame; "
            "send bytes instead"
        )
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise MessageEncodeError(
            f"text body for {queue!r} cannot be encoded: {text[exc.start : exc.end]!r} at "
            f"position {exc.start} ({exc.reason}: a lone surrogate has no UTF-8 form); send "
            "bytes or valid text"
        ) from exc


def body_headers(body: Body) -> dict[str, str]:
    """The headers a SEND carries to say what its body is.

    Text: no content-length, so both brokers create a TextMessage (Java getText() works), and a
    text content-type, which Artemis returns on the MESSAGE where it adds a content-length.
    Bytes: content-length, so both create a BytesMessage.
    """
    if isinstance(body, str):
        if has_surrogates(body):
            # Text that arrived as invalid UTF-8: without content-length Artemis rewrites the
            # bad bytes into U+FFFD (measured on 2.44), so it goes with one, marked text, and
            # stays byte-exact on both brokers (a BytesMessage to Java, which could not read
            # such text either).
            length = len(body.encode("utf-8", "surrogateescape"))
            return {"content-length": str(length), TEXT_MARKER_PROPERTY: TEXT_MARKER_VALUE}
        return {"content-type": TEXT_CONTENT_TYPE}
    return {"content-length": str(len(body)), TEXT_MARKER_PROPERTY: BYTES_MARKER_VALUE}


def send_frame(queue: str, message: WireMessage, delay_ms: int, extra: Mapping[str, str]) -> bytes:
    """One SEND frame; MessageEncodeError when the body cannot be put on the wire.

    No frame-level header is taken from the message's properties (FRAME_LEVEL_HEADERS): the
    frame's own are set here, and a `transaction` or `receipt` carried over from another frame
    would make the broker act on it."""
    headers = {k: v for k, v in message.properties.items() if k not in FRAME_LEVEL_HEADERS}
    headers["destination"] = QUEUE_PREFIX + check_queue_name(queue)
    headers["persistent"] = "true" if message.persistent else "false"
    if message.correlation_id is not None:
        headers["correlation-id"] = message.correlation_id
    if delay_ms > 0:
        headers["AMQ_SCHEDULED_DELAY"] = str(int(delay_ms))
    # Both brokers read `expires` as the absolute expiry (epoch ms): it comes from the message's
    # own field only, so an application property of that name cannot make a message expire.
    if message.expires_at_ms is not None:
        headers["expires"] = str(message.expires_at_ms)
    else:
        headers.pop("expires", None)
    headers.update(extra)
    body = message.body
    if isinstance(body, str):
        # A property of that name would turn the text into a BytesMessage, or end it early.
        headers.pop("content-length", None)
        if headers.get(TEXT_MARKER_PROPERTY) == BYTES_MARKER_VALUE:
            del headers[TEXT_MARKER_PROPERTY]
        data = text_body_bytes(queue, body)
    else:
        # Byte bodies stay bytes, whatever a property claims.
        headers.pop("content-type", None)
        if headers.get(TEXT_MARKER_PROPERTY) == TEXT_MARKER_VALUE:
            del headers[TEXT_MARKER_PROPERTY]
        data = body
    headers.update(body_headers(body))
    return encode_frame("SEND", headers, data)


def is_text_frame(
    headers: Mapping[str, str], body: bytes = b"", *, length_on_every_message: bool = False
) -> bool:
    """Whether a MESSAGE carries text, decided by what both brokers carry.

    No content-length: a TextMessage on Classic (whoever sent it). boostBodyType: text or bytes
    as the producer says (the toolkit marks its byte bodies). A content-type text/* in UTF-8 (the
    STOMP default for text/*): the toolkit's own text on either broker. Where content-length is
    on every MESSAGE (Artemis), an unmarked body is text when it is valid UTF-8: a Java
    TextMessage has no other sign there, and its retry copies and dead letters must stay
    TextMessages for Java consumers. Anything else is bytes.
    """
    if "content-length" not in headers:
        return True
    if b"\x00" in body:
        return False  # STOMP ends a text frame at NUL: such a body can only travel as bytes
    marker = headers.get(TEXT_MARKER_PROPERTY)
    if marker is not None and marker in (TEXT_MARKER_VALUE, BYTES_MARKER_VALUE):
        return marker == TEXT_MARKER_VALUE
    content_type = headers.get("content-type")
    if content_type is not None:
        return _is_utf8_text_type(content_type)
    return length_on_every_message and _is_utf8(body)


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _is_utf8_text_type(content_type: str) -> bool:
    media, *parameters = content_type.split(";")
    if not media.strip().lower().startswith("text/"):
        return False
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            # Another charset would not come back byte-exact from a UTF-8 decoding: bytes.
            return value.strip().strip('"').lower() in _UTF8_CHARSETS
    return True


def delivered_body(
    headers: Mapping[str, str], body: bytes, *, length_on_every_message: bool = False
) -> bytes | str:
    """A MESSAGE body as the toolkit hands it on: text (see is_text_frame) or bytes.

    Text is decoded with surrogateescape, so invalid UTF-8 goes out again as the same bytes.
    """
    if is_text_frame(headers, body, length_on_every_message=length_on_every_message):
        return body.decode("utf-8", "surrogateescape")
    return body


def properties_of(headers: Mapping[str, str]) -> dict[str, str]:
    """The application properties of a MESSAGE: every header the broker did not set itself."""
    return {k: v for k, v in headers.items() if k not in FRAME_HEADERS}


def delivery_of(
    headers: Mapping[str, str],
    body: bytes,
    *,
    subscription_id: str,
    token: object,
    flavour: BrokerFlavour = BrokerFlavour.OTHER,
) -> Delivery:
    """The Delivery a MESSAGE frame of flavour's broker becomes. The ack value is the token's,
    echoed as received (Artemis 2.44 sends '87061,87067'); broker_message_id is the part of the
    message-id that names the message on each of its deliveries (BrokerFlavour.message_identity)."""
    return Delivery(
        queue=headers.get("destination", "").removeprefix(QUEUE_PREFIX),
        body=delivered_body(headers, body, length_on_every_message=flavour.length_on_every_message),
        properties=properties_of(headers),
        correlation_id=headers.get("correlation-id"),
        redelivered=headers.get("redelivered") == "true",
        subscription_id=subscription_id,
        broker_message_id=flavour.message_identity(headers.get("message-id")),
        # expires:0 on every MESSAGE without one (Classic 5.17 and Artemis alike).
        expires_at_ms=read_expiry(headers.get("expires")),
        token=token,
    )
