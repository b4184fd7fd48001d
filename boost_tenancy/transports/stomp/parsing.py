"""Received STOMP frames parsed the way stomp.py parses them, at a third of its cost.

stomp.py's receiving thread parses each frame with one regular expression per header line and
one `re.sub` (through `re`'s pattern cache) per header name and value, then takes a lock and
sorts its listeners twice per MESSAGE: 41.9 us per MESSAGE of Classic's and 51.9 us of
Artemis's, against 13.5 and 16.6 us here (benchmarks/bench_stomp_receive.py). The frames brokers
send have lines ending in LF and escapes in a few values only (Classic's message-id and ack), so
`parse_frame` splits them with string methods and unescapes only the names and values that hold
a backslash; any other frame (CRLF line ends, no blank line) goes to stomp.py's own parser. The
result is the same Frame, header for header (tests/unit/test_stomp_parsing.py holds the two
parsers to each other).

`read_frames_with` puts the parser on one stomp.py transport: the object's own frame reader, not
stomp.py's module, so no other stomp.py connection of the process is touched.
"""

from __future__ import annotations

import re
from typing import Any, Final

from stomp.utils import HEARTBEAT_FRAME, Frame
from stomp.utils import parse_frame as stomp_parse_frame

from boost_tenancy.transports.stomp.receipts import RECEIPT_PREFIX

_ESCAPE: Final = re.compile(r"\\.")
_UNESCAPES: Final = {"\\r": "\r", "\\n": "\n", "\\c": ":", "\\\\": "\\"}


def _unescape_one(match: re.Match[str]) -> str:
    escaped = match.group(0)
    # stomp.py leaves an unknown escape as it is; so does this parser.
    return _UNESCAPES.get(escaped, escaped)


def _unescaped(text: str) -> str:
    """STOMP 1.2's header escapes undone, left to right, as stomp.py undoes them, in text that
    holds a backslash (parse_frame calls it for those names and values only)."""
    if "\x00" in text:  # (never in a header the reader splits off; kept exact anyway)
        return _ESCAPE.sub(_unescape_one, text)
    # An escaped backslash first, held as NUL, so that its second half starts no escape.
    return (
        text.replace("\\\\", "\x00")
        .replace("\\c", ":")
        .replace("\\n", "\n")
        .replace("\\r", "\r")
        .replace("\x00", "\\")
    )


class ReceivedFrame(Frame):  # type: ignore[misc]  # stomp.py has no type hints
    """A stomp.py Frame without the copy of its headers that Frame's constructor makes:
    original_headers is the headers dict itself (nothing in the toolkit or in stomp.py changes a
    received frame's headers)."""

    def __init__(self, cmd: str, headers: dict[str, str], body: bytes) -> None:
        self.cmd = cmd
        self.headers = headers
        self.original_headers = headers
        self.body = body


def parse_frame(frame: bytes) -> Any:
    """stomp.utils.parse_frame's Frame (or None for a frame of blank lines) for frame's bytes,
    the EOLs before its command skipped.

    STOMP 1.2 lets any number of EOLs follow a frame, and a heart-beat is one: those that reach
    the start of the next frame (a frame's trailing EOL and a heart-beat read together with the
    next frame) are not part of it. stomp.py's parser takes two of them for the blank line that
    ends the headers and drops the frame: a MESSAGE dropped so is never handed on nor
    acknowledged, and the broker holds it for as long as the connection lives."""
    if frame[:1] in (b"\n", b"\r"):
        frame = frame.lstrip(b"\r\n")
    end = frame.find(b"\n\n")
    if end < 0 or b"\r" in frame[:end]:
        # No blank line, or CRLF line ends (which stomp.py splits by regular expression).
        return stomp_parse_frame(frame)
    lines = frame[:end].decode("utf-8", "replace").split("\n")
    first = 0
    while first < len(lines) and not lines[first]:
        first += 1
    if first == len(lines):
        return None
    headers: dict[str, str] = {}
    for line in lines[first + 1 :]:
        name, colon, value = line.partition(":")
        if not colon or not name:
            continue  # not a header line: stomp.py skips it too
        if "\\" in name:
            name = _unescaped(name)
        if name not in headers:  # STOMP 1.2: the first of a repeated header counts
            headers[name] = _unescaped(value) if "\\" in value else value
    return ReceivedFrame(lines[first], headers, frame[end + 2 :])


def read_frames_with(transport: Any) -> bool:
    """Have stomp.py's transport object parse what it receives with parse_frame.

    It replaces that one object's frame reader (stomp.py's private `__read_frames`, which reads,
    splits and parses) with one that keeps stomp.py's reading and splitting, parses with
    parse_frame, and hands a MESSAGE to the listeners itself as stomp.py's process_frame does
    (each listener's on_before_message, then each one's on_message, in the order of their names,
    a listener without the method skipped), with one look at the listeners under stomp.py's lock
    instead of two. A RECEIPT the toolkit asked for (receipts.RECEIPT_PREFIX) goes to each
    listener's on_receipt the same way: stomp.py's own bookkeeping of receipts (a condition
    taken and notified for every one) concerns only those it asked for, its DISCONNECT's, which
    go through stomp.py's process_frame with every other frame.

    False, leaving stomp.py's reader, when the stomp.py installed lacks any of what this takes
    over (a version this was not written for), or when the transport decodes bodies (the toolkit
    creates its transports with auto_decode=False).
    """
    read = getattr(transport, "_BaseTransport__read", None)
    is_eol = getattr(transport, "_BaseTransport__is_eol", None)
    listeners_changing = getattr(transport, "_BaseTransport__listeners_change_condition", None)
    listeners: dict[str, Any] | None = getattr(transport, "listeners", None)
    if (
        read is None
        or is_eol is None
        or listeners_changing is None
        or listeners is None
        or getattr(transport, "_BaseTransport__auto_decode", True)
        or not hasattr(transport, "_BaseTransport__read_frames")
    ):
        return False
    process_frame = transport.process_frame

    def hand_on(frame: Frame, *methods: str) -> None:
        # As stomp.py's notify: each method in turn, of every listener in the order of their
        # names, a listener without it skipped.
        with listeners_changing:
            ordered = [listener for _, listener in sorted(listeners.items())]
        for method in methods:
            for listener in ordered:
                call = getattr(listener, method, None)
                if call is not None:
                    call(frame)

    def read_frames() -> None:
        for data in read():
            frame = HEARTBEAT_FRAME if is_eol(data) else parse_frame(data)
            if frame is None:
                continue
            if frame.cmd == "MESSAGE":
                hand_on(frame, "on_before_message", "on_message")
            elif frame.cmd == "RECEIPT" and frame.headers.get("receipt-id", "").startswith(
                RECEIPT_PREFIX
            ):
                hand_on(frame, "on_receipt")
            else:
                process_frame(frame, data)

    transport._BaseTransport__read_frames = read_frames
    return True
