"""Received frames: the toolkit's parser gives stomp.py's Frame for any bytes, and a stomp.py
connection whose reader it replaced hands its listeners (its own heartbeat listener among them)
what stomp.py would."""

from __future__ import annotations

import time
from typing import Any

import pytest
import stomp
from hypothesis import given
from hypothesis import strategies as st
from stomp.utils import parse_frame as stomp_parse_frame

from boost_tenancy.transports.stomp.frames import encode_frame
from boost_tenancy.transports.stomp.parsing import parse_frame, read_frames_with

# Frames as a broker or a broken peer may send them: commands, header lines, escapes known and
# unknown, LF and CRLF line ends, blank lines, invalid UTF-8, colons in names and values.
PIECES = st.sampled_from(
    [
        b"MESSAGE",
        b"RECEIPT",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"\r",
        b":",
        b"\\",
        b"\\c",
        b"\\n",
        b"\\r",
        b"\\\\",
        b"\\x",
        b"destination",
        b"/queue/a",
        b"tenantUUID",
        b" ",
        b"\xff",
        b"\xc3\xa9",
        b"{}",
    ]
)


def as_tuple(frame: Any) -> tuple[str, dict[str, str], bytes] | None:
    return None if frame is None else (frame.cmd, frame.headers, frame.body)


@given(st.lists(PIECES, max_size=30).map(b"".join))
def test_any_bytes_parse_as_stomp_py_parses_them_without_their_leading_eols(data: bytes) -> None:
    assert as_tuple(parse_frame(data)) == as_tuple(stomp_parse_frame(data.lstrip(b"\r\n")))


def test_a_frame_after_several_eols_is_kept_where_stomp_py_drops_it() -> None:
    # A frame's trailing EOL and a heart-beat, read together with the next frame.
    data = b"\n\nMESSAGE\nsubscription:sub-1\nack:7\n\n{}"
    assert stomp_parse_frame(data) is None
    assert as_tuple(parse_frame(data)) == (
        "MESSAGE",
        {"subscription": "sub-1", "ack": "7"},
        b"{}",
    )
    assert parse_frame(b"\r\n\n\r\n") is None  # EOLs alone are no frame


@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=6),
    st.binary(max_size=16),
)
def test_a_frame_the_toolkit_encodes_parses_as_stomp_py_parses_it(
    headers: dict[str, str], body: bytes
) -> None:
    data = encode_frame("MESSAGE", headers, body)[:-1]  # the reader splits at the NUL
    assert as_tuple(parse_frame(data)) == as_tuple(stomp_parse_frame(data))


def test_a_message_frame() -> None:
    frame = parse_frame(
        b"MESSAGE\ndestination:/queue/a\nmessage-id:ID\\cbox-1\ntenantUUID:t1\n"
        b"tenantUUID:t2\nno colon here\n:no name\n\n{}"
    )
    assert frame.cmd == "MESSAGE"
    assert frame.headers == {
        "destination": "/queue/a",
        "message-id": "ID:box-1",
        "tenantUUID": "t1",
    }
    assert frame.body == b"{}"


class Recorder(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: list[tuple[dict[str, str], bytes]] = []
        self.receipts: list[str] = []

    def on_message(self, frame: Any) -> None:
        self.messages.append((frame.headers, frame.body))

    def on_receipt(self, frame: Any) -> None:
        self.receipts.append(frame.headers["receipt-id"])


def fed_reader(chunks: list[bytes]) -> tuple[Any, Recorder]:
    """A stomp.py connection with the toolkit's reader, whose socket reads give chunks in turn,
    and the listener that records what it hands on."""
    conn = stomp.Connection12([("127.0.0.1", 1)], auto_decode=False)
    recorder = Recorder()
    conn.set_listener("recorder", recorder)
    transport = conn.transport
    assert read_frames_with(transport)
    transport.receive = lambda: chunks.pop(0)
    transport.running = True
    return conn, recorder


def test_a_stomp_py_connection_reads_through_the_parser() -> None:
    """The reader is put on the installed stomp.py's transport and used by it: if stomp.py
    renames what it replaces, read_frames_with says False and this fails."""
    chunks = [
        b"MESSAGE\ndestination:/queue/a\nsubscription:1\nk:a\\cb\n\nbody\x00\n",
        b"RECEIPT\nreceipt-id:r-1\n\n\x00MESSAGE\ndestination:/queue/b\n",
        b"content-length:3\n\na\x00b\x00",
    ]
    conn, recorder = fed_reader(chunks)
    transport = conn.transport
    # stomp.py's heartbeat listener counts a MESSAGE as a sign of life (the first chunk is one).
    conn.received_heartbeat = time.monotonic() - 1.0
    transport._BaseTransport__read_frames()
    assert conn.received_heartbeat > time.monotonic() - 0.5
    while chunks:
        transport._BaseTransport__read_frames()
    assert recorder.messages == [
        ({"destination": "/queue/a", "subscription": "1", "k": "a:b"}, b"body"),
        ({"destination": "/queue/b", "content-length": "3"}, b"a\x00b"),
    ]
    assert recorder.receipts == ["r-1"]


def test_a_message_after_a_split_trailing_eol_and_a_heartbeat_reaches_the_listeners() -> None:
    chunks = [
        b"RECEIPT\nreceipt-id:r-1\n\n\x00",
        b"\n\nMESSAGE\ndestination:/queue/a\nsubscription:1\n\nbody\x00",
    ]
    conn, recorder = fed_reader(chunks)
    while chunks:
        conn.transport._BaseTransport__read_frames()
    assert recorder.receipts == ["r-1"]
    assert recorder.messages == [({"destination": "/queue/a", "subscription": "1"}, b"body")]


def test_a_decoding_transport_keeps_stomp_py_s_reader() -> None:
    conn = stomp.Connection12([("127.0.0.1", 1)], auto_decode=True)
    assert not read_frames_with(conn.transport)


class Ordered(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name = name
        self.calls = calls

    def on_before_message(self, frame: Any) -> None:
        self.calls.append(f"{self.name}.before")

    def on_message(self, frame: Any) -> None:
        self.calls.append(f"{self.name}.message")

    def on_receipt(self, frame: Any) -> None:
        self.calls.append(f"{self.name}.{frame.headers['receipt-id']}")


class Bare:
    """A listener with none of those methods: stomp.py skips it."""


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (
            b"MESSAGE\ndestination:/queue/a\n\nx\x00",
            ["a.before", "b.before", "a.message", "b.message"],
        ),
        (b"RECEIPT\nreceipt-id:r-7\n\n\x00", ["a.r-7", "b.r-7"]),
    ],
    ids=["message", "toolkit-receipt"],
)
def test_a_frame_the_toolkit_hands_on_reaches_the_listeners_as_stomp_py_hands_it_on(
    frame: bytes, expected: list[str]
) -> None:
    """A MESSAGE: every listener's on_before_message, then every one's on_message; a RECEIPT the
    toolkit asked for: every one's on_receipt; in the order of their names, a listener without
    the method skipped, as stomp.py's notify skips it; stomp.py's heart-beat listener among them,
    which counts the frame as a sign of life."""
    calls: list[str] = []
    for toolkit in (False, True):
        conn = stomp.Connection12([("127.0.0.1", 1)], auto_decode=False)
        conn.set_listener("b", Ordered("b", calls))
        conn.set_listener("a", Ordered("a", calls))
        conn.set_listener("c", Bare())
        transport = conn.transport
        if toolkit:
            assert read_frames_with(transport)
        transport.receive = lambda: frame
        transport.running = True
        conn.received_heartbeat = time.monotonic() - 1.0
        transport._BaseTransport__read_frames()
        assert conn.received_heartbeat > time.monotonic() - 0.5
    stomp_py, toolkit_calls = calls[: len(expected)], calls[len(expected) :]
    assert stomp_py == expected
    assert toolkit_calls == stomp_py


def test_only_the_toolkit_s_receipts_skip_stomp_py_s_own_handling() -> None:
    """A receipt stomp.py asked for (its DISCONNECT's, which closes the socket) goes through
    stomp.py's process_frame, as every frame but a MESSAGE and the toolkit's receipts does."""
    conn = stomp.Connection12([("127.0.0.1", 1)], auto_decode=False)
    calls: list[str] = []
    conn.set_listener("a", Ordered("a", calls))
    transport = conn.transport
    through_stomp_py: list[str] = []
    transport.process_frame = lambda frame, data: through_stomp_py.append(
        frame.headers.get("receipt-id", frame.cmd)
    )
    assert read_frames_with(transport)
    chunks = [
        b"RECEIPT\nreceipt-id:r-1\n\n\x00",
        b"RECEIPT\nreceipt-id:5f0c6a1e-disconnect\n\n\x00",
        b"ERROR\nmessage:no\n\n\x00",
    ]
    transport.receive = lambda: chunks.pop(0)
    transport.running = True
    while chunks:
        transport._BaseTransport__read_frames()
    assert calls == ["a.r-1"]
    assert through_stomp_py == ["5f0c6a1e-disconnect", "ERROR"]
