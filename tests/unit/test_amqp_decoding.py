"""The AMQP transport's fast reader of delivered messages (transports/amqp/decoding.py) against
proton's own decoder: whatever the bytes, the transport makes the same Delivery of them either
way, and bytes proton refuses are refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, symbol, ubyte, ulong

from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp.codec import (
    delivered_body,
    message_id_text,
    text_or_none,
    text_properties,
    to_amqp,
)
from boost_tenancy.transports.amqp.decoding import (
    Received,
    read_common,
    read_message,
    received_from,
)


def what_the_transport_makes(received: Received) -> tuple[object, ...]:
    """The parts of a Delivery the transport builds from a decoded message."""
    return (
        delivered_body(received.body, received.properties, received.content_type),
        text_properties(received.properties),
        text_or_none(received.correlation_id),
        message_id_text(received.message_id),
        received.delivery_count,
        received.first_acquirer,
        received.absolute_expiry_time,
        received.ttl,
    )


def by_proton(data: bytes) -> tuple[object, ...] | str:
    try:
        message = Message()
        message.decode(data)
        return what_the_transport_makes(received_from(message))
    except Exception:
        return "refused"


def by_transport(data: bytes) -> tuple[object, ...] | str:
    try:
        return what_the_transport_makes(read_message(bytearray(data)))
    except Exception:
        return "refused"


ids = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.integers(min_value=0, max_value=2**64 - 1).map(ulong),
    st.uuids(),
    st.binary(max_size=20),
)
property_values = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=0, max_value=255).map(ubyte),
    st.floats(allow_nan=False),
    st.binary(max_size=10),
    st.uuids(),
    st.lists(st.integers(min_value=0, max_value=9), max_size=3),
)
annotation_values = st.one_of(
    st.text(max_size=20),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.booleans(),
    st.text(alphabet="abcxyz", max_size=8).map(symbol),
    st.dictionaries(st.text(max_size=3), st.integers(min_value=0, max_value=9), max_size=2),
)
bodies = st.one_of(
    st.none(),
    st.text(max_size=300),
    st.binary(max_size=300),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    message = Message(
        body=draw(bodies),
        properties=draw(st.none() | st.dictionaries(st.text(max_size=12), property_values)),
        id=draw(ids),
        correlation_id=draw(ids),
    )
    message.inferred = draw(st.booleans())
    message.durable = draw(st.booleans())
    message.first_acquirer = draw(st.booleans())
    message.delivery_count = draw(st.integers(min_value=0, max_value=2**32 - 1))
    message.priority = draw(st.integers(min_value=0, max_value=255))
    if draw(st.booleans()):
        message.content_type = draw(st.sampled_from(["text/plain", "application/json", "None"]))
    if draw(st.booleans()):
        message.subject = draw(st.text(max_size=10))
    if draw(st.booleans()):
        annotations: dict[Any, Any] = draw(
            st.dictionaries(st.text(alphabet="xyz-", min_size=1, max_size=8), annotation_values)
        )
        message.annotations = annotations
    if draw(st.booleans()):
        message.instructions = {symbol("x-opt-d"): draw(st.integers(0, 100))}
    if draw(st.booleans()):
        message.ttl = draw(st.integers(min_value=0, max_value=2**32 - 1)) / 1000
    if draw(st.booleans()):
        # Any timestamp: beyond expiry.LATEST_EXPIRY_MS or not positive reads as none.
        expiry = draw(st.integers(min_value=-(2**62), max_value=2**62))
        message.expiry_time = (expiry + 0.5) / 1000  # proton truncates seconds * 1000
    return message


@settings(max_examples=400, deadline=None)
@given(messages())
def test_every_message_becomes_the_same_delivery_as_through_proton(message: Message) -> None:
    data = message.encode()
    assert by_transport(data) == by_proton(data)


@settings(max_examples=400, deadline=None)
@given(messages(), st.data())
def test_damaged_bytes_are_refused_or_read_exactly_as_proton_reads_them(
    message: Message, data: st.DataObject
) -> None:
    encoded = bytearray(message.encode())
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded)))
    damaged = encoded[:cut]
    if damaged and data.draw(st.booleans()):
        at = data.draw(st.integers(min_value=0, max_value=len(damaged) - 1))
        damaged[at] = data.draw(st.integers(min_value=0, max_value=255))
    read = by_transport(bytes(damaged))
    # proton reads some damaged bytes as an empty or partial message; the transport refuses
    # those (the section check), and reads everything else exactly as proton does.
    assert read == "refused" or read == by_proton(bytes(damaged))


def toolkit_message(**changes: Any) -> bytes:
    wire = WireMessage(
        body=changes.pop("body", "x" * 1024),
        properties={"tenantUUID": "org-a", "boostMessageId": "m-1", "boostAttempt": "1"},
        correlation_id="c-1",
    )
    message = to_amqp(wire)
    for name, value in changes.items():
        setattr(message, name, value)
    return message.encode()


@pytest.mark.parametrize(
    "data",
    [
        toolkit_message(),
        toolkit_message(body=b"\x00\xff" * 600),
        toolkit_message(id=uuid.uuid4(), first_acquirer=True, delivery_count=3),
        toolkit_message(annotations={symbol("x-opt-jms-dest"): 0, "x-opt-to": "q"}),
        to_amqp(
            WireMessage(body="x", properties={"tenantUUID": "org-a"}, expires_at_ms=2_000_000),
            now=1_000_000,
        ).encode(),
    ],
    ids=["text", "bytes", "ids-and-header", "artemis-annotations", "expiry"],
)
def test_the_messages_the_toolkit_sends_take_the_fast_reader(data: bytes) -> None:
    """The fast reader is what makes consuming cheap: a message a producer of the toolkit (or
    a JMS client on Artemis) sends must not fall back to proton's decoder."""
    fast = read_common(bytearray(data))
    assert fast is not None
    assert what_the_transport_makes(fast) == by_proton(data)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"", "no bytes"),
        (b"\x00", "the section at byte 0 is malformed"),
        (b"\xff\xff", "byte 0 starts no described section"),
        (b"hello world", "byte 0 starts no described section"),
        (b"\x00\x53\x77\xa1\x05ab", "the section at byte 0 is malformed"),
        (bytes(Message(body="ok").encode()) + b"\x40", "byte 15 starts no described section"),
    ],
)
def test_bytes_of_no_message_are_refused_naming_where_they_stop_being_amqp(
    data: bytes, where: str
) -> None:
    """proton 0.40 reads bytes of no AMQP message as an empty message, raising nothing: a
    handler would get an empty body for them (and a JSON processor dead-letter it without the
    bytes). The transport refuses them instead (receiving.py rejects the transfer)."""
    assert read_common(bytearray(data)) is None
    assert by_proton(data) != "refused", "proton itself reads them"
    with pytest.raises(ValueError, match=f"no AMQP message: {where}"):
        read_message(bytearray(data))


def test_a_binary_message_id_reads_as_stable_text() -> None:
    message = Message(body="x", id=b"\x01\xff")
    assert message_id_text(read_message(bytearray(message.encode())).message_id) == "01ff"
