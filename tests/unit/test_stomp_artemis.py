"""What the STOMP transport does differently on Artemis, without a broker: the text-or-bytes
rule both brokers' frames are read by, the byte window asked for instead of a message count
(also after a reconnection), the copy confirmed before the ack, and opaque ack values echoed
back exactly as received.
"""

from __future__ import annotations

from typing import Any

import pytest
from stomp.utils import Frame, parse_frame

from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import Delivery
from boost_tenancy.transports.options import (
    DEFAULT_ARTEMIS_WINDOW_BYTES,
    MAX_ARTEMIS_WINDOW_BYTES,
)
from boost_tenancy.transports.stomp import BrokerFlavour, StompSettings
from boost_tenancy.transports.stomp.flavour import MAX_CONSUMER_WINDOW, consumer_window_bytes
from boost_tenancy.transports.stomp.frames import (
    TEXT_CONTENT_TYPE,
    delivered_body,
    is_text_frame,
    send_frame,
)
from tests.conftest import Inbox, wait_until
from tests.unit.test_stomp_connect import RecordingSocket, recording_transport

ARTEMIS = "ActiveMQ-Artemis/2.44.0 ActiveMQ Artemis Messaging Engine"
CLASSIC = "ActiveMQ/5.17.2"

# -- text or bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "text"),
    [
        ({}, True),  # Classic: a TextMessage, from the toolkit or from Java
        ({"content-type": "application/octet-stream"}, True),  # still no content-length
        ({"content-length": "5"}, False),  # a BytesMessage; on Artemis also a bare JMS text
        ({"content-length": "5", "content-type": TEXT_CONTENT_TYPE}, True),  # toolkit on Artemis
        ({"content-length": "5", "content-type": "text/plain"}, True),  # STOMP: UTF-8 default
        ({"content-length": "5", "content-type": 'TEXT/JSON; Charset="UTF8"'}, True),
        ({"content-length": "5", "content-type": "text/plain;charset=iso-8859-1"}, False),
        ({"content-length": "5", "content-type": "application/json"}, False),
        ({"content-length": "5", "boostBodyType": "text"}, True),  # a JMS producer's marker
        ({"content-length": "5", "boostBodyType": "bytes"}, False),
    ],
)
def test_the_text_rule_reads_only_what_both_brokers_carry(
    headers: dict[str, str], text: bool
) -> None:
    assert is_text_frame(headers) is text
    body = delivered_body(headers, b"Z\xc3\xbcri")
    assert body == ("Züri" if text else b"Z\xc3\xbcri")


def test_invalid_utf8_read_as_text_goes_out_again_as_the_same_bytes() -> None:
    raw = b"ok \xff\xfe end"
    body = delivered_body({"content-length": "9", "content-type": TEXT_CONTENT_TYPE}, raw)
    assert isinstance(body, str)
    frame = parse_frame(send_frame("q", WireMessage(body=body, properties={}), 0, {})[:-1])
    assert frame.body == raw


def sent_headers(body: str | bytes, **properties: str) -> dict[str, str]:
    message = WireMessage(body=body, properties=properties)
    headers: dict[str, str] = parse_frame(send_frame("q", message, 0, {})[:-1]).headers
    return headers


def test_text_goes_out_with_a_text_content_type_and_no_content_length() -> None:
    headers = sent_headers("hello", **{"content-length": "99", "content-type": "x/y"})
    assert headers["content-type"] == TEXT_CONTENT_TYPE
    assert "content-length" not in headers, "Classic makes a TextMessage only without it"


def test_bytes_go_out_with_content_length_and_nothing_that_reads_as_text() -> None:
    headers = sent_headers(b"hello", **{"content-type": "text/plain", "boostBodyType": "text"})
    assert headers["content-length"] == "5"
    assert "content-type" not in headers
    assert headers["boostBodyType"] == "bytes", "marked, so valid UTF-8 stays bytes on Artemis"
    assert not is_text_frame(headers, b"hello", length_on_every_message=True)
    assert not is_text_frame(headers, b"hello")


# -- the Artemis window ----------------------------------------------------------------------------


def test_artemis_is_asked_for_a_byte_window_and_classic_for_a_count() -> None:
    assert BrokerFlavour.ARTEMIS.prefetch_headers(10, 65_536) == {
        "consumer-window-size": str(10 * 65_536)
    }
    assert BrokerFlavour.CLASSIC.prefetch_headers(10, 65_536) == {"activemq.prefetchSize": "10"}
    assert BrokerFlavour.OTHER.prefetch_headers(10, 65_536) == {"activemq.prefetchSize": "10"}
    assert consumer_window_bytes(10**6, MAX_ARTEMIS_WINDOW_BYTES) == MAX_CONSUMER_WINDOW


def test_only_classic_promises_prefetch_in_messages() -> None:
    assert {f: f.capabilities.prefetch_counts_messages for f in BrokerFlavour} == {
        BrokerFlavour.CLASSIC: True,
        BrokerFlavour.ARTEMIS: False,
        BrokerFlavour.OTHER: False,
    }


def test_the_window_per_message_is_read_from_the_environment_and_bounded() -> None:
    assert StompSettings().artemis_window_bytes == DEFAULT_ARTEMIS_WINDOW_BYTES == 64 * 1024
    assert stomp_settings_from_env({}).artemis_window_bytes == DEFAULT_ARTEMIS_WINDOW_BYTES
    env = {"BOOST_ARTEMIS_WINDOW_BYTES": "4096"}
    assert stomp_settings_from_env(env).artemis_window_bytes == 4096
    for raw in ("0", "-1", "lots", str(MAX_ARTEMIS_WINDOW_BYTES + 1)):
        with pytest.raises(ConfigError, match="BOOST_ARTEMIS_WINDOW_BYTES"):
            stomp_settings_from_env({"BOOST_ARTEMIS_WINDOW_BYTES": raw})
    with pytest.raises(ConfigError, match="artemis_window_bytes"):
        StompSettings(artemis_window_bytes=0)


def subscribes(sock: RecordingSocket) -> list[Any]:
    return [f for f in sock.frames() if f.cmd == "SUBSCRIBE"]


@pytest.mark.parametrize("server", [CLASSIC, ARTEMIS])
def test_subscribe_asks_each_flavour_in_its_unit_again_after_reconnecting(
    monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    settings = StompSettings(confirm_timeout_s=2, reconnect_wait_s=5, artemis_window_bytes=4096)
    transport, sockets = recording_transport(monkeypatch, server, settings=settings)
    transport.connect()
    try:
        transport.subscribe("in", selector=None, prefetch=7, on_delivery=Inbox())
        # Artemis: on a connection of its own, apart from the transport's sends.
        [carrier] = [sock for sock in sockets if subscribes(sock)]
        carrier.running = False
        carrier.listener.on_disconnected()
        assert wait_until(lambda: len(subscribes(sockets[-1])) == 1 and sockets[-1] is not carrier)
    finally:
        transport.close()
    carriers = [sock for sock in sockets if subscribes(sock)]
    assert len(carriers) == 2
    for sock in carriers:
        [frame] = subscribes(sock)
        if server == ARTEMIS:
            assert frame.headers["consumer-window-size"] == str(7 * 4096)
            assert "activemq.prefetchSize" not in frame.headers, "Artemis reads it as bytes"
        else:
            assert frame.headers["activemq.prefetchSize"] == "7"
            assert "consumer-window-size" not in frame.headers


# -- acknowledging on Artemis ----------------------------------------------------------------------

OPAQUE = "87061,87067"


def artemis_message(sock: RecordingSocket, sub_id: str, ack: str, body: bytes) -> None:
    """A MESSAGE as Artemis 2.44 sends it: opaque ids and content-length on every frame."""
    headers = {
        "subscription": sub_id,
        "message-id": ack,
        "ack": ack,
        "destination": "/queue/in",
        "content-length": str(len(body)),
        "content-type": TEXT_CONTENT_TYPE,
        "tenantUUID": "org-A",
    }
    sock.listener.on_message(Frame("MESSAGE", headers, body))


def test_opaque_ack_values_are_echoed_back_exactly_as_received(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, sockets = recording_transport(monkeypatch, ARTEMIS)
    transport.connect()
    [sock] = sockets
    inbox = Inbox()
    sub = transport.subscribe("in", selector=None, prefetch=5, on_delivery=inbox)
    artemis_message(sock, sub.id, OPAQUE, b'{"n": 1}')
    artemis_message(sock, sub.id, "87062,87068", b'{"n": 2}')
    [first, second] = inbox.items
    assert first.broker_message_id == OPAQUE.split(",")[1], "the message's part, not the consumer's"
    assert first.body == '{"n": 1}', "text on Artemis despite its content-length"
    assert first.properties == {"tenantUUID": "org-A"}
    transport.ack(first)
    transport.send_then_ack(second, [("out", WireMessage(body="copy", properties={}), 0)])
    transport.close()  # writes the acknowledgements still queued
    frames = [(f.cmd, f.headers.get("id")) for f in sock.frames() if f.cmd in ("SEND", "ACK")]
    assert sorted(frames, key=str) == [("ACK", OPAQUE), ("ACK", "87062,87068"), ("SEND", None)]
    # The acks are written by the ack thread; the forwarded one only after its copy.
    assert frames.index(("SEND", None)) < frames.index(("ACK", "87062,87068"))
    [send] = [f for f in sock.frames() if f.cmd == "SEND"]
    assert "receipt" in send.headers, "the copy is confirmed before the ack"


def delivery(ack: str) -> Delivery:
    return Delivery(
        queue="in",
        body="original",
        properties={},
        correlation_id=None,
        redelivered=False,
        subscription_id="sub-1",
        broker_message_id=ack,
        token=(0, 1, ack),  # (line, generation, ack id)
    )


def test_many_forwards_on_artemis_confirm_every_copy_with_one_receipt_before_any_ack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, sockets = recording_transport(monkeypatch, ARTEMIS)
    transport.connect()
    [sock] = sockets
    copy = WireMessage(body="copy", properties={})
    moves = [(delivery(f"{n},{n + 6}"), [("out", copy, 0), ("dlq", copy, 500)]) for n in (1, 2)]
    transport.send_then_ack_many(moves)
    transport.close()
    frames = sock.frames()
    assert [f.cmd for f in frames] == ["SEND"] * 4 + ["ACK", "ACK"]
    assert ["receipt" in f.headers for f in frames[:4]] == [False, False, False, True]
    assert [f.headers.get("AMQ_SCHEDULED_DELAY") for f in frames[:4]] == [None, "500"] * 2
    assert [f.headers["id"] for f in frames[4:]] == ["1,7", "2,8"]
    assert not any("transaction" in f.headers for f in frames), "Artemis ignores ACK in one"
