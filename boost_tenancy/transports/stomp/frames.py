"""STOMP 1.2 frames as the toolkit writes and reads them: header escaping, SEND encoding and
the headers of a MESSAGE that are not application properties.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from boost_tenancy.errors import MessageEncodeError
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.transports.base import Outgoing

FRAME_HEADERS: Final = frozenset(
    {
        "destination",
        "message-id",
        "subscription",
        "ack",
        "redelivered",
        "persistent",
        "correlation-id",
        "content-length",
        "content-type",
        "expires",
        "priority",
        "timestamp",
        "type",
        "reply-to",
        "receipt",
        # Scheduling instructions are consumed by the broker; copied onto a retry or dead-letter
        # copy they would delay it again (Classic AMQ_SCHEDULED_*, Artemis _AMQ_SCHED_DELIVERY).
        "AMQ_SCHEDULED_DELAY",
        "AMQ_SCHEDULED_PERIOD",
        "AMQ_SCHEDULED_REPEAT",
        "AMQ_SCHEDULED_CRON",
        "scheduledJobId",
        "_AMQ_SCHED_DELIVERY",
    }
)
"""Headers the broker sets on MESSAGE frames that are not application properties."""

QUEUE_PREFIX: Final = "/queue/"

# Surrogates have no UTF-8 form; a str holds them when text was decoded with surrogateescape
# or surrogatepass, or parsed from a JSON "\ud83d" escape.
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def _escape(value: str) -> str:
    """A header name or value fit for a frame: NUL and lone surrogates become U+FFFD, then
    STOMP 1.2 escaping of backslash, carriage return, newline and colon.

    NUL is replaced because it ends a frame: Classic keeps it in the header and hands consumers
    the frame cut in two. Other control characters are left alone: Classic 5.17 and stomp.py
    carry every one of them through unchanged.
    """
    ascii_only = value.isascii()
    if (
        ascii_only
        and ":" not in value
        and "\\" not in value
        and "\n" not in value
        and "\r" not in value
        and "\x00" not in value
    ):
        # Most names and values (every SEND and ACK has several): a few scans at C speed and
        # no copy, which measured faster than one regular expression search.
        return value
    if not ascii_only and _SURROGATE.search(value) is not None:
        # Through UTF-16 so a surrogate pair becomes its character and a lone one U+FFFD.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return (
        value.replace("\x00", "\ufffd")
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
    head = "".join(f"{_escape(name)}:{_escape(value)}\n" for name, value in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\x00"


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


def check_bodies(items: Iterable[Outgoing]) -> None:
    """Raise MessageEncodeError for the first body that cannot be sent, before any is sent."""
    for queue, message, _ in items:
        if isinstance(message.body, str):
            text_body_bytes(queue, message.body)


def send_frame(queue: str, message: WireMessage, delay_ms: int, extra: Mapping[str, str]) -> bytes:
    """One SEND frame; MessageEncodeError when the body cannot be put on the wire."""
    headers = dict(message.properties)
    headers["destination"] = QUEUE_PREFIX + check_queue_name(queue)
    headers["persistent"] = "true" if message.persistent else "false"
    if message.correlation_id is not None:
        headers["correlation-id"] = message.correlation_id
    if delay_ms > 0:
        headers["AMQ_SCHEDULED_DELAY"] = str(int(delay_ms))
    headers.update(extra)
    if isinstance(message.body, str):
        # No content-length: both brokers then create a TextMessage (Java getText() works).
        return encode_frame("SEND", headers, text_body_bytes(queue, message.body))
    headers["content-length"] = str(len(message.body))
    return encode_frame("SEND", headers, message.body)


def delivered_body(headers: Mapping[str, str], body: bytes) -> bytes | str:
    """A MESSAGE body: text when the frame has no content-length (a TextMessage on Classic)."""
    if "content-length" in headers:
        return body
    return body.decode("utf-8", "surrogateescape")


def properties_of(headers: Mapping[str, str]) -> dict[str, str]:
    """The application properties of a MESSAGE: every header the broker did not set itself."""
    return {k: v for k, v in headers.items() if k not in FRAME_HEADERS}
