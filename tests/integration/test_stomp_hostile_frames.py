"""Hostile text through the STOMP transport and a real broker: header values the frame format
cannot carry, bodies of invalid UTF-8, and text bodies with no UTF-8 form.

Each case must leave the connection's framing intact, keep bodies byte-exact, and fail a bad
message by itself (MessageEncodeError) rather than as a lost connection.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from boost_tenancy.errors import MessageEncodeError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.broker_target import raw_connect_frame
from tests.conftest import Inbox, unique_queue, wait_until

pytestmark = pytest.mark.broker

INVALID_UTF8 = b"ok \xff\xfe \xc3( \xed\xa0\xbd \xf0\x9f\x98 end"
LONE_HIGH = "price \ud83d"


class RawStomp:
    """A bare STOMP 1.2 client on a socket: frames exactly as the broker sends them."""

    def __init__(self, settings: StompSettings) -> None:
        self.sock = socket.create_connection((settings.host, settings.port), timeout=10)
        self.buffer = b""
        self.sock.sendall(raw_connect_frame(settings))
        command, _, _ = self.frame()
        assert command == "CONNECTED"

    def frame(self, timeout: float = 10.0) -> tuple[str, dict[str, str], bytes]:
        """The next frame (heart-beat newlines skipped): command, raw headers, body bytes."""
        self.sock.settimeout(timeout)
        while b"\x00" not in self.buffer.lstrip(b"\r\n"):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buffer += chunk
        self.buffer = self.buffer.lstrip(b"\r\n")
        raw, _, self.buffer = self.buffer.partition(b"\x00")
        head, _, body = raw.partition(b"\n\n")
        command, *lines = head.decode("utf-8").split("\n")
        headers = dict(line.split(":", 1) for line in lines)
        return command, headers, body

    def send_text(self, queue: str, body: bytes, *, marked_with_length: bool = False) -> None:
        """SEND without content-length (a TextMessage), confirmed by receipt; marked_with_length:
        with content-length and boostBodyType:text instead, as the toolkit sends text that is
        not valid UTF-8."""
        marked = f"content-length:{len(body)}\nboostBodyType:text\n" if marked_with_length else ""
        self.sock.sendall(
            f"SEND\ndestination:/queue/{queue}\ntenantUUID:org-A\npersistent:true\n"
            f"{marked}receipt:raw-1\n\n".encode()
            + body
            + b"\x00"
        )
        command, headers, _ = self.frame()
        assert (command, headers.get("receipt-id")) == ("RECEIPT", "raw-1")

    def subscribe(self, queue: str) -> None:
        self.sock.sendall(
            f"SUBSCRIBE\ndestination:/queue/{queue}\nid:raw\nack:auto\n\n\x00".encode()
        )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def transport(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    made = StompTransport(stomp_settings)
    made.connect()
    yield made
    made.close()


@pytest.fixture
def raw(stomp_settings: StompSettings) -> Iterator[RawStomp]:
    client = RawStomp(stomp_settings)
    yield client
    client.close()


def wire(body: str | bytes, **props: str) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": "org-A", **props})


def assert_still_sends_and_receives(transport: StompTransport) -> None:
    queue = unique_queue("hostile.after")
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    transport.send(queue, wire("still fine"))
    assert wait_until(lambda: len(inbox) == 1)
    assert inbox.bodies() == ["still fine"]
    transport.ack(inbox.items[0])


def test_header_values_with_nul_and_lone_surrogates_arrive_as_u_fffd_and_framing_holds(
    transport: StompTransport, stomp_settings: StompSettings
) -> None:
    queue = unique_queue("hostile.headers")
    receiver = StompTransport(stomp_settings)
    receiver.connect()
    try:
        inbox = Inbox()
        receiver.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
        transport.send(queue, wire("nul", boostError="bad\x00value"))
        transport.send(queue, wire("surrogate", note="a\ud83db: c\\d\ne"))
        transport.send(queue, wire("plain", colour="blue"))
        assert wait_until(lambda: len(inbox) == 3)
        nul, surrogate, plain = inbox.items
        assert nul.body == "nul"
        assert nul.properties["boostError"] == "bad\ufffdvalue"
        assert surrogate.body == "surrogate"
        assert surrogate.properties["note"] == "a\ufffdb: c\\d\ne"
        # The frames after them parse whole: no half frame, no "unknown response frame type".
        assert plain.body == "plain"
        assert plain.properties["colour"] == "blue"
        assert receiver.is_connected and transport.is_connected
    finally:
        receiver.close()
    assert_still_sends_and_receives(transport)


def test_a_forwarded_body_of_invalid_utf8_arrives_byte_exact(
    transport: StompTransport, stomp_settings: StompSettings, raw: RawStomp
) -> None:
    """Sent with content-length and marked text (how the toolkit sends text that is not valid
    UTF-8), the bytes survive both brokers, and so does the toolkit's copy of them."""
    source, target = unique_queue("hostile.in"), unique_queue("hostile.out")
    raw.send_text(source, INVALID_UTF8, marked_with_length=True)
    inbox = Inbox()
    transport.subscribe(source, selector=None, prefetch=5, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) == 1)
    delivery = inbox.items[0]
    assert isinstance(delivery.body, str)  # text to the toolkit: decoded with surrogateescape
    assert delivery.body.encode("utf-8", "surrogateescape") == INVALID_UTF8

    transport.send_then_ack(delivery, [(target, wire(delivery.body, **delivery.properties), 0)])

    reader = RawStomp(stomp_settings)
    try:
        reader.subscribe(target)
        command, headers, body = reader.frame()
    finally:
        reader.close()
    assert command == "MESSAGE"
    assert body == INVALID_UTF8
    assert headers["content-length"] == str(len(INVALID_UTF8))
    assert headers["boostBodyType"] == "text"


def test_a_text_send_of_invalid_utf8_is_kept_by_classic_and_rewritten_by_artemis(
    transport: StompTransport, raw: RawStomp, broker_flavour: str
) -> None:
    """The broker fact behind sending such text with content-length: without it Artemis turns
    the bad bytes into U+FFFD when it stores the message (2.44), Classic keeps them."""
    queue = unique_queue("hostile.text")
    raw.send_text(queue, INVALID_UTF8)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) == 1)
    body = inbox.items[0].body
    assert isinstance(body, str)
    if broker_flavour == "artemis":
        # Java's decoder replaces each bad sequence with U+FFFD (its grouping is not Python's).
        assert body.startswith("ok \ufffd") and body.endswith(" end")
        assert body.encode("utf-8") != INVALID_UTF8  # valid UTF-8 now: the bytes are gone
    else:
        assert body.encode("utf-8", "surrogateescape") == INVALID_UTF8
    transport.ack(inbox.items[0])


def test_a_text_body_without_utf8_form_fails_alone_on_every_send_path(
    transport: StompTransport, stomp_settings: StompSettings, raw: RawStomp
) -> None:
    queue, source = unique_queue("hostile.bad"), unique_queue("hostile.src")
    bad, good = wire(LONE_HIGH), wire("good")
    with pytest.raises(MessageEncodeError, match="position 6"):
        transport.send(queue, bad)
    for atomic in (True, False):
        with pytest.raises(MessageEncodeError, match="position 6"):
            transport.send_batch([(queue, good), (queue, bad)], atomic=atomic)
    batch = transport.open_batch()
    batch.add(queue, wire("in batch"))
    with pytest.raises(MessageEncodeError):
        batch.add(queue, bad)
    batch.commit()

    raw.send_text(source, b"to forward")
    inbox = Inbox()
    transport.subscribe(source, selector=None, prefetch=5, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) == 1)
    delivery = inbox.items[0]
    with pytest.raises(MessageEncodeError, match="position 6"):
        transport.send_then_ack(delivery, [(queue, good, 0), (queue, bad, 0)])
    # Nothing was written for it: the delivery is still live and can be forwarded properly.
    assert transport.is_connected and transport.is_live(delivery)
    transport.send_then_ack(delivery, [(queue, wire("forwarded"), 0)])

    reader = RawStomp(stomp_settings)
    try:
        reader.subscribe(queue)
        bodies = [reader.frame()[2] for _ in range(2)]
        time.sleep(0.5)
        with pytest.raises(TimeoutError):
            reader.frame(timeout=0.5)  # none of the failed sends left a message behind
    finally:
        reader.close()
    assert bodies == [b"in batch", b"forwarded"]
    assert_still_sends_and_receives(transport)


@pytest.mark.parametrize("header", ["priority:high", "expires:soon"])
def test_a_broker_instruction_header_that_is_no_number_ends_the_connection(
    raw: RawStomp, header: str, broker_flavour: str
) -> None:
    """Measured on Classic 5.17 and Artemis 2.44: a SEND whose priority or expires is no number
    is answered with an ERROR frame (Artemis AMQ339031; Classic a NumberFormatException) and
    the connection is closed, with every delivery in flight on it. Which is why no message of
    the toolkit may carry either as a property (messages.BROKER_INSTRUCTIONS)."""
    raw.sock.sendall(
        f"SEND\ndestination:/queue/{unique_queue()}\ntenantUUID:org-A\n{header}\n"
        "receipt:raw-2\n\nbody\x00".encode()
    )
    closed = False
    try:
        command, _, _ = raw.frame()
        assert command == "ERROR", f"{broker_flavour} answered {command}"
        raw.frame(timeout=5)  # nothing more: the broker closes
    except (ConnectionError, OSError):
        closed = True
    assert closed, "the connection stayed open after the ERROR"
