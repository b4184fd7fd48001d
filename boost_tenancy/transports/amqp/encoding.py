"""Writing an outgoing message's bytes on the sending thread: the AMQP 1.0 encoding of what
codec.to_amqp makes of a WireMessage, written in Python, so the loop thread only streams bytes.

proton's Message copies every value into C one call at a time and encodes it there when it is
sent, on the loop thread: a third of the loop thread's time when publishing (profiled), and 25
us per message of the benchmark's shape against 5 us here (measured on the same machine).
The sections are the ones to_amqp's Message encodes to, in the same encodings as proton's
(tests/unit/test_amqp_encoding.py compares the two): header (durable, ttl), message annotations
(a delivery delay), properties (message-id, correlation-id, absolute-expiry-time),
application-properties (strings) and the body (text: an amqp-value string; bytes: a data
section).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from cproton import pn_delivery, pn_link_advance, pn_link_send
from proton import Delivery, Sender

from boost_tenancy.errors import MessageEncodeError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp.codec import (
    DELIVERY_DELAY,
    amqp_message_id,
    header_ttl,
    wire_parts,
)
from boost_tenancy.transports.stomp.frames import (
    header_value,
)

_U32: Final = struct.Struct(">I").pack
_I64: Final = struct.Struct(">q").pack
_LONG_MAX: Final = 2**63 - 1

_HEADER_DURABLE: Final = b"\x00\x53\x70\xc0\x02\x01\x41"
"""header: a list of one element, durable true."""
_HEADER_EMPTY: Final = b"\x00\x53\x70\x45"
_HEADER: Final = b"\x00\x53\x70"
_MESSAGE_ANNOTATIONS: Final = b"\x00\x53\x72"
_PROPERTIES: Final = b"\x00\x53\x73"
_APPLICATION_PROPERTIES: Final = b"\x00\x53\x74"
_DATA: Final = b"\x00\x53\x75"
_AMQP_VALUE: Final = b"\x00\x53\x77"
_NULLS_BEFORE_CORRELATION: Final = b"\x40" * 4
"""user-id, to, subject, reply-to: unset."""
_NULLS_BEFORE_EXPIRY: Final = b"\x40" * 2
"""content-type, content-encoding: unset."""
_STR8: Final = tuple(b"\xa1" + bytes((size,)) for size in range(256))
"""A str8-utf8 string's constructor and one-byte size, by size."""
_NAMES: dict[str, bytes] = {}
"""Application-property names already encoded, shared by every sending thread (a dict's get
and set are atomic; a name encoded twice at once is the same bytes)."""
_MAX_NAMES: Final = 1024
"""Names kept at most: an application with more distinct names encodes the others each time."""


class EncodedMessage:
    """A message's bytes, sent as proton sends a Message: Sender.send and Transaction.send call
    its send(sender, tag)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def write(self, sender: Sender, tag: str | None = None) -> Any:
        """Write the message on sender as a new delivery; returns its pn_delivery_t, without
        the Python wrapper proton's Sender.delivery builds (sending.py keeps the C delivery)."""
        link = sender._impl
        impl = pn_delivery(link, tag or sender.delivery_tag())
        written = pn_link_send(link, self.data)
        if written < 0:
            raise TransportError(f"proton refused the message's bytes (error {written})")
        pn_link_advance(link)
        return impl

    def send(self, sender: Sender, tag: str | None = None) -> Delivery:
        return Delivery.wrap(self.write(sender, tag))  # type: ignore[no-any-return,no-untyped-call]


def encode_message(
    message: WireMessage, delay_ms: int = 0, now: int | None = None, message_id: str | None = None
) -> EncodedMessage:
    """The bytes of to_amqp(message, delay_ms, now, message_id); MessageEncodeError for a body
    the wire cannot carry (see to_amqp), raised before anything is sent."""
    properties, body = wire_parts(message)
    expires = message.expires_at_ms
    parts = [_header(message.persistent, header_ttl(expires, now))]
    if delay_ms > 0:
        parts.append(_delay(delay_ms))
    identity = amqp_message_id(message) if message_id is None else message_id
    parts.append(_properties(identity, message.correlation_id, expires))
    parts.append(_APPLICATION_PROPERTIES)
    parts.append(_string_map(properties))
    if isinstance(body, str):
        parts.append(_AMQP_VALUE)
        parts.append(_string(body))
    else:
        parts.append(_DATA)
        parts.append(_variable(body, b"\xa0", b"\xb0"))
    return EncodedMessage(b"".join(parts))


def _header(durable: bool, ttl: int | None) -> bytes:
    if ttl is None:
        return _HEADER_DURABLE if durable else _HEADER_EMPTY
    # durable (null when false, as proton writes it), priority unset, ttl: a uint, one byte
    # when it fits (smalluint).
    value = b"\x52" + bytes((ttl,)) if ttl < 256 else b"\x70" + _U32(ttl)
    return _HEADER + _list((b"\x41" if durable else b"\x40") + b"\x40" + value, 3)


def _properties(message_id: str, correlation: str | None, expires: int | None) -> bytes:
    fields = _string(message_id)
    if correlation is None and expires is None:
        return _PROPERTIES + _list(fields, 1)
    fields += _NULLS_BEFORE_CORRELATION
    fields += b"\x40" if correlation is None else _string(header_value(correlation))
    if expires is None:
        return _PROPERTIES + _list(fields, 6)
    # absolute-expiry-time: a timestamp, epoch milliseconds in a signed long.
    fields += _NULLS_BEFORE_EXPIRY + b"\x83" + _I64(expires)
    return _PROPERTIES + _list(fields, 9)


def _delay(delay_ms: int) -> bytes:
    if delay_ms > _LONG_MAX:
        raise MessageEncodeError(f"a delay of {delay_ms} ms does not fit the AMQP long it goes in")
    # A long: one byte when it fits (smalllong), as proton writes it.
    value = b"\x55" + bytes((delay_ms,)) if delay_ms < 128 else b"\x81" + _I64(delay_ms)
    entries = _variable(DELIVERY_DELAY.encode("ascii"), b"\xa3", b"\xb3") + value
    return _MESSAGE_ANNOTATIONS + b"\xd1" + _U32(len(entries) + 4) + _U32(2) + entries


def _variable(data: bytes, small: bytes, large: bytes) -> bytes:
    """A string, symbol or binary: one byte of size when it fits, else four."""
    size = len(data)
    if size < 256:
        return small + bytes((size,)) + data
    return large + _U32(size) + data


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    size = len(data)
    if size < 256:
        return _STR8[size] + data
    return b"\xb1" + _U32(size) + data


def _list(elements: bytes, count: int) -> bytes:
    size = len(elements) + 1
    if size < 256:
        return b"\xc0" + bytes((size, count)) + elements
    return b"\xd0" + _U32(len(elements) + 4) + _U32(count) + elements


def _string_map(entries: dict[str, str]) -> bytes:
    """A map of strings, in four-byte size and count, as proton writes every map. The names
    come from _NAMES once encoded (the same few on every message, which is sent from the
    sender's thread)."""
    parts: list[bytes] = []
    names = _NAMES
    for key, value in entries.items():
        name = names.get(key)
        if name is None:
            name = _string(key)
            if len(names) < _MAX_NAMES:
                names[key] = name
        parts.append(name)
        parts.append(_string(value))
    encoded = b"".join(parts)
    return b"\xd1" + _U32(len(encoded) + 4) + _U32(2 * len(entries)) + encoded
