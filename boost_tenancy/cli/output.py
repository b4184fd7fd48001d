"""How the commands print what they show: bodies bounded and safe for a terminal, recorded
failures, one shape for every command."""

from __future__ import annotations

import base64
from typing import Any

from boost_tenancy.resilience.records import FailureRecord

BODY_PREVIEW_CHARS = 2_000
"""The most of a body `dlq list --show-body` prints: characters of a text body, or the base64
of a binary one, so a huge or hostile message cannot flood the terminal."""


def body_json(body: str | bytes, limit: int = BODY_PREVIEW_CHARS) -> dict[str, Any]:
    """A body for JSON output, bounded: text as is (json escapes control characters, so no
    terminal escape sequence reaches the screen), bytes as base64; body_truncated says whether
    it was cut, body_length is its full length in characters or bytes."""
    if isinstance(body, str):
        try:
            body.encode("utf-8")
        except UnicodeEncodeError:  # decoded from invalid UTF-8: shown as the bytes it came as
            body = body.encode("utf-8", "surrogateescape")
    if isinstance(body, bytes):
        shown = body[: limit // 4 * 3]  # base64 makes 4 characters of every 3 bytes
        return {
            "body_encoding": "base64",
            "body": base64.b64encode(shown).decode("ascii"),
            "body_length": len(body),
            "body_truncated": len(shown) < len(body),
        }
    return {
        "body_encoding": "text",
        "body": body[:limit],
        "body_length": len(body),
        "body_truncated": len(body) > limit,
    }


def failure_json(record: FailureRecord, *, with_tenant: bool = False) -> dict[str, Any]:
    """One recorded failure of a message, as the listing commands print it."""
    shown: dict[str, Any] = {}
    if with_tenant:
        shown["tenant"] = None if record.tenant is None else record.tenant.value
    shown.update(
        attempt=record.attempt,
        outcome=record.outcome.value,
        error_type=record.error_type,
        error=record.error_text,
        at=record.occurred_at.isoformat(),
    )
    return shown
