"""How the commands print what they show: bodies bounded and safe for a terminal, recorded
failures, one shape for every command."""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

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


OUTPUT_HELP: Final = (
    "table (the default on a terminal) or json (one object per line: the default when the output "
    "goes to a pipe or a file)"
)
CELL_CHARS: Final = 60
"""The most of a value a table cell shows; --output json shows all of it."""


def add_output_option(cmd: argparse.ArgumentParser) -> None:
    """--output, and --json for it as every listing takes it (add_table_output_option)."""
    cmd.add_argument("--output", choices=("table", "json"), help=OUTPUT_HELP)
    cmd.add_argument(
        "--json", action="store_const", dest="output", const="json", help="--output json"
    )


def add_table_output_option(cmd: argparse.ArgumentParser) -> None:
    """--output for a listing whose default is a table wherever it goes (scripts parse it), and
    its older spelling --json."""
    cmd.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table (the default) or json (one object per line)",
    )
    cmd.add_argument("--json", action="store_true", help="the same as --output json")


def wants_json(args: argparse.Namespace) -> bool:
    """--output json, or --json (add_table_output_option)."""
    return bool(args.json) or args.output == "json"


def wants_table(args: argparse.Namespace) -> bool:
    """--output table, or no --output on a terminal."""
    chosen = getattr(args, "output", None)
    return chosen == "table" or (chosen is None and sys.stdout.isatty())


def _cell(value: object) -> str:
    """A value as a table cell: one line, every non-printable character escaped (no terminal
    escape sequence reaches the screen), cut to CELL_CHARS."""
    text = "-" if value is None else str(value)
    safe = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return safe if len(safe) <= CELL_CHARS else safe[: CELL_CHARS - 1] + "…"


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """rows as a text table of columns (key, heading), one line per row."""
    cells = [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [
        max([len(heading), *(len(line[i]) for line in cells)])
        for i, (_, heading) in enumerate(columns)
    ]
    lines = [
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in [[heading for _, heading in columns], *cells]
    ]
    return "\n".join(lines) + "\n"
