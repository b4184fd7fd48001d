"""The W3C trace context a message carries as `traceparent` and `tracestate`: parsed strictly
off the wire, where one that is not exactly W3C's is dropped, never forwarded."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from boost_tenancy.frozen import fast_init

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
TRACE_PROPERTIES: Final = frozenset({TRACEPARENT, TRACESTATE})
"""Both names are Java identifiers (JMS property names) and plain STOMP headers."""

_MAX_TRACEPARENT: Final = 512
_MAX_TRACESTATE: Final = 512
_MAX_MEMBERS: Final = 32
_TRACEPARENT_RE: Final = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-"
    r"(?P<flags>[0-9a-f]{2})(?P<rest>-[\x21-\x7e]*)?"
)
_KEY_CHARS: Final = r"[a-z0-9_\-*/]"
_KEY_RE: Final = re.compile(
    rf"[a-z]{_KEY_CHARS}{{0,255}}|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}}"
)
_VALUE_RE: Final = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


@fast_init
@dataclass(frozen=True, slots=True)
class TraceContext:
    """A valid W3C trace context: what a message carries, and what continues from it."""

    trace_id: str
    """32 lowercase hex digits, never all zeros."""
    span_id: str
    """16 lowercase hex digits, never all zeros: the parent of whatever continues this context."""
    flags: str = "01"
    state: str = ""
    """The tracestate header, validated and normalised; empty when there is none."""

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @property
    def sampled(self) -> bool:
        return bool(int(self.flags, 16) & 1)

    def properties(self) -> dict[str, str]:
        """The message properties that carry this context."""
        carried = {TRACEPARENT: self.traceparent}
        if self.state:
            carried[TRACESTATE] = self.state
        return carried

    @classmethod
    def new(cls) -> TraceContext:
        """A new trace, for a message sent outside any. Flagged sampled ("the caller may have
        recorded"), so the first service that records spans with a parent-based sampler keeps
        the rest of the trace instead of dropping it.

        The ids come from `random` (seeded from the system's entropy, and again in a forked
        child), as OpenTelemetry's SDK makes its own: they must be unique, not secret, and a
        system call for each (`secrets`) cost two per message sent outside a trace."""
        traceparent = new_traceparent()
        return cls(traceparent[3:35], traceparent[36:52])

    @classmethod
    def parse(cls, traceparent: object, tracestate: object = None) -> TraceContext | None:
        """The context of a traceparent and tracestate off the wire, or None when the
        traceparent is not valid. An invalid tracestate is dropped on its own (W3C: the
        traceparent stands without it)."""
        if not isinstance(traceparent, str) or len(traceparent) > _MAX_TRACEPARENT:
            return None
        match = _TRACEPARENT_RE.fullmatch(traceparent)
        if match is None:
            return None
        version, trace_id, span_id = match["version"], match["trace"], match["span"]
        if version == "ff" or (version == "00" and match["rest"] is not None):
            return None
        if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
            return None
        # A later version's own fields are not understood; its first four are version 00's.
        return cls(trace_id, span_id, match["flags"], parse_tracestate(tracestate) or "")

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> TraceContext | None:
        """The context a message's properties carry, or None (absent or invalid)."""
        return cls.parse(properties.get(TRACEPARENT), properties.get(TRACESTATE))


def new_traceparent() -> str:
    """The traceparent of a new trace (TraceContext.new), written without making the object:
    what every message sent outside any trace carries, at half the cost."""
    return f"00-{random.getrandbits(128) or 1:032x}-{random.getrandbits(64) or 1:016x}-01"


def parse_tracestate(value: object) -> str | None:
    """A tracestate header normalised (no blanks, no empty members), or None when it breaks
    W3C's rules: too long, too many members, a bad key or value, a key given twice."""
    if not isinstance(value, str) or not value or len(value) > _MAX_TRACESTATE:
        return None
    members: list[str] = []
    keys: set[str] = set()
    for raw in value.split(","):
        member = raw.strip(" \t")
        if not member:
            continue
        key, eq, val = member.partition("=")
        if not eq or _KEY_RE.fullmatch(key) is None or _VALUE_RE.fullmatch(val) is None:
            return None
        if key in keys:
            return None
        keys.add(key)
        members.append(member)
    if not members or len(members) > _MAX_MEMBERS:
        return None
    return ",".join(members)


__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "TRACE_PROPERTIES",
    "TraceContext",
    "parse_tracestate",
]
