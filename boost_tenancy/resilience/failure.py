"""A handling failure as the toolkit records and carries it: type, text and a bounded trace.

The same value goes into the error store, onto the retry copy and onto the dead-letter copy, so
a failure stays readable wherever the message ends up.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Final

TRACE_LIMIT: Final = 8_000
"""Characters of stack trace kept: the innermost frames (where it failed) are kept first."""
_TRACE_FRAMES: Final = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorInfo:
    """A failure: the exception's qualified type, its text and where it was raised."""

    type: str
    text: str
    trace: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        detail = "".join(traceback.format_exception_only(kind, exc)).strip()
        return cls(type=name, text=detail, trace=bounded_trace(exc))


def bounded_trace(exc: BaseException) -> str | None:
    """The traceback of exc, innermost frames first kept, cut to TRACE_LIMIT characters."""
    if exc.__traceback__ is None:
        return None
    # A negative limit keeps the last frames: the handler's own line, not the toolkit's.
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-_TRACE_FRAMES)
    text = "".join(lines).rstrip()
    if len(text) > TRACE_LIMIT:
        text = "\u2026" + text[-(TRACE_LIMIT - 1) :]
    return text


__all__ = ["ErrorInfo", "bounded_trace"]
