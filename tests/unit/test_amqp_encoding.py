"""The AMQP transport's encoder of outgoing messages (transports/amqp/encoding.py) against
proton's: the bytes it writes are the bytes proton writes for codec.to_amqp's Message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from boost_tenancy.errors import MessageEncodeError
from boost_tenancy.expiry import LATEST_EXPIRY_MS
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp.codec import amqp_message_id, body_of, properties_of, to_amqp
from boost_tenancy.transports.amqp.encoding import encode_message

texts = st.one_of(
    st.text(max_size=40),
    st.text(max_size=400),
    # Text that came in as invalid UTF-8 (surrogateescape), and lone surrogates.
    st.binary(max_size=30).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
    st.sampled_from(["\x00", "a\ud800b", "\udcff", "\ud83d\ude00"]),
)
wire_messages = st.builds(
    WireMessage,
    body=st.one_of(
        st.text(max_size=600),
        st.binary(max_size=600),
        st.binary(max_size=40).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
    ),
    properties=st.dictionaries(texts, texts, max_size=6),
    correlation_id=st.none() | texts,
    persistent=st.booleans(),
    expires_at_ms=st.none() | st.integers(min_value=1, max_value=LATEST_EXPIRY_MS),
)
delays = st.one_of(st.just(0), st.integers(min_value=1, max_value=2**63 - 1))
sending_times = st.integers(min_value=1, max_value=LATEST_EXPIRY_MS)
"""When a message is encoded (epoch ms): the header.ttl is what is left of its expiry then."""


@settings(max_examples=500, deadline=None)
@given(wire_messages, delays, sending_times)
def test_the_encoder_writes_the_bytes_proton_writes(
    message: WireMessage, delay_ms: int, now: int
) -> None:
    message_id = amqp_message_id(message)
    encoded = encode_message(message, delay_ms, now, message_id).data
    assert encoded == bytes(to_amqp(message, delay_ms, now, message_id).encode())


def test_a_large_message_keeps_its_body_and_properties() -> None:
    message = WireMessage(
        body="é" * 70_000,
        properties={"k" * 300: "v" * 70_000, "tenantUUID": "org-a"},
        correlation_id="c" * 300,
    )
    decoded = Message()
    decoded.decode(encode_message(message, 5_000).data)
    assert body_of(decoded) == message.body
    assert properties_of(decoded) == dict(message.properties)
    assert decoded.correlation_id == "c" * 300
    assert decoded.annotations == {"x-opt-delivery-delay": 5_000}


def test_a_lone_surrogate_in_the_body_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(MessageEncodeError):
        encode_message(WireMessage(body="\ud83d", properties={}))


def test_property_names_encoded_once_give_the_same_bytes_and_are_kept_up_to_a_bound() -> None:
    from boost_tenancy.transports.amqp import encoding

    message = WireMessage(body="x", properties={"tenantUUID": "org-a", "ünïcode": "v"})
    first = encode_message(message, 0, 1, "m-1").data
    assert "ünïcode" in encoding._NAMES
    assert encode_message(message, 0, 1, "m-1").data == first
    assert first == bytes(to_amqp(message, 0, 1, "m-1").encode())
    many = WireMessage(body="x", properties={f"name-{i}": "v" for i in range(1_500)})
    assert encode_message(many, 0, 1, "m-2").data == bytes(to_amqp(many, 0, 1, "m-2").encode())
    assert len(encoding._NAMES) <= encoding._MAX_NAMES
