"""How each transport puts a message's expiry on the wire and reads it back: STOMP `expires`
(epoch ms, from the message's field only; `expires:0` is none), AMQP 1.0 absolute-expiry-time
plus what is left of it as header.ttl (the one RabbitMQ 3.10 honours), read back preferring
the absolute time."""

from __future__ import annotations

import pytest
from proton import Message

from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp.codec import (
    HEADER_TTL_LIMIT_MS,
    delivered_expiry,
    header_ttl,
    to_amqp,
)
from boost_tenancy.transports.amqp.decoding import read_message
from boost_tenancy.transports.amqp.encoding import encode_message
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import delivery_of, send_frame

NOW = 1_795_426_852_313


def frame_headers(frame: bytes) -> dict[str, str]:
    head = frame.split(b"\n\n", 1)[0].decode().split("\n")[1:]
    return dict(line.split(":", 1) for line in head)


def test_a_stomp_send_carries_the_expiry_as_the_expires_header() -> None:
    message = WireMessage(body="x", properties={"tenantUUID": "org-A"}, expires_at_ms=NOW)
    assert frame_headers(send_frame("q", message, 0, {}))["expires"] == str(NOW)


def test_a_property_named_expires_cannot_make_a_stomp_message_expire() -> None:
    forged = WireMessage(body="x", properties={"expires": "1"})
    assert "expires" not in frame_headers(send_frame("q", forged, 0, {}))
    replaced = WireMessage(body="x", properties={"expires": "1"}, expires_at_ms=NOW)
    assert frame_headers(send_frame("q", replaced, 0, {}))["expires"] == str(NOW)


@pytest.mark.parametrize(
    ("header", "expected"), [(str(NOW), NOW), ("0", None), (None, None), ("soon", None)]
)
def test_a_stomp_message_frame_gives_its_expiry_to_the_delivery_not_its_properties(
    header: str | None, expected: int | None
) -> None:
    headers = {"destination": "/queue/q", "message-id": "m", "tenantUUID": "org-A"}
    if header is not None:
        headers["expires"] = header
    delivery = delivery_of(headers, b"x", subscription_id="s", token=None)
    assert delivery.expires_at_ms == expected
    assert "expires" not in delivery.properties


@pytest.mark.parametrize(
    ("left_ms", "ttl"),
    [
        (30_000, 30_000),
        (1, 1),
        (0, 1),  # due now: the broker expires it at once rather than never
        (-5_000, 1),
        (HEADER_TTL_LIMIT_MS, HEADER_TTL_LIMIT_MS),
        (HEADER_TTL_LIMIT_MS + 1, None),  # does not fit the uint: absolute time only
    ],
)
def test_the_amqp_header_ttl_is_what_is_left_of_the_expiry(left_ms: int, ttl: int | None) -> None:
    assert header_ttl(NOW + left_ms, NOW) == ttl
    assert header_ttl(None, NOW) is None


def test_an_amqp_message_carries_both_the_absolute_expiry_and_the_ttl_left() -> None:
    wire = WireMessage(body="x", properties={}, expires_at_ms=NOW + 2_500)
    sent = Message()
    sent.decode(encode_message(wire, 0, NOW).data)
    assert round(sent.expiry_time * 1000) == NOW + 2_500
    assert round(sent.ttl * 1000) == 2_500
    plain = Message()
    plain.decode(encode_message(WireMessage(body="x", properties={}), 0, NOW).data)
    assert (plain.expiry_time, plain.ttl) == (0, 0)


def test_the_expiry_read_back_prefers_the_absolute_time_then_the_ttl() -> None:
    received = read_message(
        bytearray(
            to_amqp(WireMessage(body="x", properties={}, expires_at_ms=NOW), 0, NOW - 700).encode()
        )
    )
    assert (received.absolute_expiry_time, received.ttl) == (NOW, 700)
    assert delivered_expiry(received.absolute_expiry_time, received.ttl, NOW + 10_000) == NOW
    ttl_only = Message(body="x")
    ttl_only.ttl = 4.0
    only = read_message(bytearray(ttl_only.encode()))
    assert (only.absolute_expiry_time, only.ttl) == (None, 4_000)
    assert delivered_expiry(only.absolute_expiry_time, only.ttl, NOW) == NOW + 4_000
    assert delivered_expiry(None, None, NOW) is None


@pytest.mark.parametrize(
    ("flavour", "delay_ms", "expires", "headers"),
    [
        (BrokerFlavour.CLASSIC, 300, NOW, {"timestamp": "0"}),
        (BrokerFlavour.CLASSIC, 0, NOW, {}),
        (BrokerFlavour.CLASSIC, 300, None, {}),
        (BrokerFlavour.ARTEMIS, 300, NOW, {}),
        (BrokerFlavour.OTHER, 300, NOW, {}),
    ],
)
def test_only_classic_needs_a_delayed_expiring_send_unstamped_to_keep_its_expiry(
    flavour: BrokerFlavour, delay_ms: int, expires: int | None, headers: dict[str, str]
) -> None:
    """Classic's scheduler moves the expiry of a stamped message by the time it was held
    (tests/integration/test_message_ttl_broker.py proves the result on the real broker)."""
    assert flavour.scheduled_send_headers(delay_ms, expires) == headers
