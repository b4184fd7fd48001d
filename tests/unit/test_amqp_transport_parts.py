"""The AMQP transport's parts that need no broker: settings from a URL, the flavour read from an
open frame and its capabilities, and the message codec."""

from __future__ import annotations

import pytest
from proton import Message, byte, int32, ulong

from boost_tenancy.application.environment import connect_options_from_env
from boost_tenancy.errors import ConfigError, MessageEncodeError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp import AmqpFlavour, AmqpSettings, AmqpTransport
from boost_tenancy.transports.amqp.codec import body_of, properties_of, to_amqp
from boost_tenancy.transports.registry import open_transport, parse_transport_url


def test_amqp_and_amqps_urls_open_the_amqp_transport_with_their_settings() -> None:
    plain = open_transport("amqp://app:s%40cret@broker.example:5673/tenants")
    assert isinstance(plain, AmqpTransport)
    settings = AmqpSettings.from_url(parse_transport_url("amqps://broker.example"))
    assert settings.tls is not None and settings.tls.verify_host
    assert (settings.port, settings.username) == (5671, None)
    named = AmqpSettings.from_url(parse_transport_url("amqp://app:s%40cret@h:5673/tenants"))
    assert (named.host, named.port, named.username, named.password, named.vhost) == (
        "h",
        5673,
        "app",
        "s@cret",
        "tenants",
    )
    assert "s@cret" not in repr(named)


@pytest.mark.parametrize(
    ("url", "env", "needle"),
    [
        ("amqp://h?x=1", {}, "no query"),
        ("amqp://h/a/b", {}, "one segment"),
        ("amqp://h", {"BOOST_BROKER_CA_FILE": "/etc/hostname"}, "apply to TLS URLs only"),
        (
            "amqps://h",
            {"BOOST_BROKER_CA_FILE": "/nonexistent/ca.pem"},
            "BOOST_BROKER_CA_FILE names .*, which is no file",
        ),
        ("amqps://h", {"BOOST_BROKER_CERT_FILE": "/etc/hostname"}, "needs its key"),
        ("amqp://h", {"BOOST_BROKER_CONNECT_TIMEOUT_S": "0"}, "BOOST_BROKER_CONNECT_TIMEOUT_S"),
        ("amqp://h", {"BOOST_BROKER_VERIFY_HOST": "maybe"}, "BOOST_BROKER_VERIFY_HOST"),
        ("amqp://h", {"BOOST_AMQP_CA_FILE": "/etc/hostname"}, "BOOST_BROKER_CA_FILE"),
        ("amqp://h:1,h:0", {}, "port must be 1-65535"),
    ],
)
def test_bad_amqp_settings_are_refused_naming_what_is_wrong(
    url: str, env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        AmqpSettings.from_url(parse_transport_url(url), connect_options_from_env(env))


def test_the_flavour_comes_from_the_open_frames_product() -> None:
    assert AmqpFlavour.from_open({"product": "apache-activemq-artemis"}) is AmqpFlavour.ARTEMIS
    assert AmqpFlavour.from_open({"product": "RabbitMQ"}) is AmqpFlavour.RABBITMQ
    assert AmqpFlavour.from_open(None) is AmqpFlavour.OTHER


def test_only_artemis_is_trusted_with_selectors_counts_and_transactions() -> None:
    artemis = AmqpFlavour.ARTEMIS.capabilities(["DELAYED_DELIVERY"])
    assert artemis.server_side_selectors and artemis.native_delivery_count
    assert artemis.atomic_forward and artemis.atomic_batches and artemis.delayed_delivery
    rabbit = AmqpFlavour.RABBITMQ.capabilities()
    assert not (rabbit.server_side_selectors or rabbit.native_delivery_count)
    assert not (rabbit.atomic_forward or rabbit.atomic_batches or rabbit.delayed_delivery)
    other = AmqpFlavour.OTHER.capabilities(["DELAYED_DELIVERY"])
    assert other.delayed_delivery and not other.server_side_selectors


def test_addresses_follow_the_broker() -> None:
    assert AmqpFlavour.RABBITMQ.address("cmd.x") == "/queue/cmd.x"
    assert AmqpFlavour.ARTEMIS.address("cmd.x") == "cmd.x"
    assert AmqpFlavour.RABBITMQ.queue_of("/queue/cmd.x") == "cmd.x"


def round_trip(message: Message) -> Message:
    decoded = Message()
    decoded.decode(message.encode())
    return decoded


def test_text_is_an_amqp_value_string_and_bytes_a_data_section() -> None:
    text = to_amqp(WireMessage(body="Zürich", properties={"tenantUUID": "t1"}), delay_ms=1500)
    assert text.body == "Zürich" and text.inferred is False
    assert text.annotations == {"x-opt-delivery-delay": 1500}
    assert text.durable is True
    data = round_trip(to_amqp(WireMessage(body=b"\x00\xff", properties={"tenantUUID": "t1"})))
    assert bytes(data.body) == b"\x00\xff" and data.inferred is True
    assert body_of(data) == b"\x00\xff"
    assert properties_of(data) == {"tenantUUID": "t1"}


def test_text_from_invalid_utf8_goes_out_as_the_same_bytes_and_comes_back_as_text() -> None:
    original = b"caf\xe9"
    text = original.decode("utf-8", "surrogateescape")
    out = round_trip(to_amqp(WireMessage(body=text, properties={})))
    assert bytes(out.body) == original
    assert body_of(out) == text


def test_a_lone_surrogate_in_text_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(MessageEncodeError):
        to_amqp(WireMessage(body="\ud83d", properties={}))


def test_stomp_artefacts_are_dropped_and_a_marked_data_body_is_text() -> None:
    """A message sent over STOMP and read over AMQP on Artemis: binary body, content-length and
    destination properties (measured on 2.44)."""
    came = Message(
        body=b'{"a": 1}',
        properties={
            "tenantUUID": "t1",
            "content-length": 8,
            "destination": "/queue/q",
            "content-type": "text/plain; charset=utf-8",
        },
    )
    came.inferred = True
    decoded = round_trip(came)
    assert body_of(decoded) == '{"a": 1}'
    # content-type says the body is text, and is then gone: a frame header, never a property
    # a forwarded copy may carry.
    assert properties_of(decoded) == {"tenantUUID": "t1"}


def test_properties_of_other_types_read_as_jms_string_properties() -> None:
    came = Message(body="x", properties={"n": 5, "flag": True, "name": "a"})
    assert properties_of(round_trip(came)) == {"n": "5", "flag": "true", "name": "a"}


def test_proton_number_types_read_as_plain_digits() -> None:
    """A JMS int property arrives as an AMQP int, which proton prints as int32(5)."""
    came = Message(body="x", properties={"i": int32(5), "b": byte(-1), "u": ulong(7)})
    assert properties_of(round_trip(came)) == {"i": "5", "b": "-1", "u": "7"}
