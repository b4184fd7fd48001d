"""The toolkit's own STOMP frames: every header escaped as STOMP 1.2 says, whichever way the
frame is built (a frame whose headers need no escaping is joined in one pass)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boost_tenancy.transports.stomp.frames import _escape, ack_frame, encode_frame, with_receipt

# Header text as a frame may meet it: plain names and values, and the characters STOMP escapes
# or the toolkit replaces (colon, backslash, CR, LF, NUL, non-ASCII, a lone surrogate).
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("abcXYZ019-_./ :\\\r\n\x00é\ud800"),
        st.characters(codec="utf-8"),
    ),
    max_size=12,
)


def escaped_one_by_one(command: str, headers: dict[str, str], body: bytes) -> bytes:
    head = "".join(f"{_escape(name)}:{_escape(value)}\n" for name, value in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\x00"


@given(st.dictionaries(TEXT, TEXT, max_size=8), st.binary(max_size=16))
def test_a_frame_is_the_same_however_it_is_built(headers: dict[str, str], body: bytes) -> None:
    assert encode_frame("SEND", headers, body) == escaped_one_by_one("SEND", headers, body)


def test_plain_headers_and_none_at_all() -> None:
    assert encode_frame("ACK", {"id": "a-1"}) == b"ACK\nid:a-1\n\n\x00"
    assert encode_frame("COMMIT", {}) == b"COMMIT\n\n\x00"
    assert encode_frame("SEND", {"k": "a:b"}, b"x") == b"SEND\nk:a\\cb\n\nx\x00"


@given(TEXT)
def test_an_ack_frame_is_the_frame_of_its_id(ack_id: str) -> None:
    assert ack_frame(ack_id) == encode_frame("ACK", {"id": ack_id})


def test_a_classic_ack_id_is_escaped() -> None:
    assert ack_frame("ID:box-1-2:1:1") == b"ACK\nid:ID\\cbox-1-2\\c1\\c1\n\n\x00"


@given(st.dictionaries(TEXT, TEXT, max_size=8), TEXT, st.binary(max_size=16))
def test_a_receipt_added_afterwards_is_the_frame_encoded_with_it_first(
    headers: dict[str, str], receipt: str, body: bytes
) -> None:
    """A plain batch encodes each SEND when it is added and asks the last one for the receipt
    at commit: the frame is then the one encode_frame writes with that header first."""
    headers.pop("receipt", None)
    frame = encode_frame("SEND", headers, body)
    expected = escaped_one_by_one("SEND", {"receipt": receipt, **headers}, body)
    assert with_receipt(frame, receipt) == expected


def test_a_receipt_added_to_a_frame_without_headers() -> None:
    assert with_receipt(b"SEND\n\nx\x00", "r-1") == b"SEND\nreceipt:r-1\n\nx\x00"
