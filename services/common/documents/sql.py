"""The SQL of the document store: its tables, columns and statements, built for one driver.

Only a checked table prefix is put into SQL text; every value is bound as a parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from boost_tenancy import ConfigError

DEFAULT_PREFIX: Final = "boost_"
# The prefix is the only thing put into SQL text; 40 characters leave room for the longest
# derived name ("<prefix>processed_events") within PostgreSQL's 63-byte identifiers.
_PREFIX_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
COLUMNS: Final = (
    "tenant",
    "document_id",
    "file_name",
    "content_type",
    "blob_key",
    "state",
    "run",
    "text_key",
    "document_type",
    "confidence",
    "fields",
    "reasons",
    "error",
    "failed_stage",
    "created_at",
    "updated_at",
)
MUTABLE_COLUMNS: Final = (*COLUMNS[5:14], "updated_at")


def checked_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or _PREFIX_RE.fullmatch(prefix) is None:
        raise ConfigError(
            f"document store table prefix {prefix!r} is not a plain identifier: expected 1 to 40 "
            "characters from A-Z, a-z, 0-9 and '_', not starting with a digit"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement of the store, in one driver's placeholder and row-lock syntax."""

    schema: tuple[str, ...]
    insert: str
    select_one: str
    select_locked: str
    select_list: str
    update: str
    select_event: str
    insert_event: str

    @classmethod
    def build(
        cls, prefix: str, *, placeholder: str, row_lock: str, timestamp_type: str
    ) -> Statements:
        documents = f'"{prefix}documents"'
        events = f'"{prefix}processed_events"'
        columns = ", ".join(COLUMNS)
        marks = ", ".join([placeholder] * len(COLUMNS))
        by_id = f"WHERE tenant = {placeholder} AND document_id = {placeholder}"
        assignments = ", ".join(f"{c} = {placeholder}" for c in MUTABLE_COLUMNS)
        return cls(
            schema=(
                f"CREATE TABLE IF NOT EXISTS {documents} ("
                "tenant TEXT NOT NULL, "
                "document_id TEXT NOT NULL, "
                "file_name TEXT NOT NULL, "
                "content_type TEXT NOT NULL, "
                "blob_key TEXT NOT NULL, "
                "state TEXT NOT NULL, "
                "run INTEGER NOT NULL, "
                "text_key TEXT, "
                "document_type TEXT, "
                "confidence DOUBLE PRECISION, "
                "fields TEXT, "
                "reasons TEXT NOT NULL, "
                "error TEXT, "
                "failed_stage TEXT, "
                f"created_at {timestamp_type} NOT NULL, "
                f"updated_at {timestamp_type} NOT NULL, "
                "PRIMARY KEY (tenant, document_id))",
                f'CREATE INDEX IF NOT EXISTS "{prefix}documents_by_age" '
                f"ON {documents} (tenant, created_at)",
                f"CREATE TABLE IF NOT EXISTS {events} ("
                "tenant TEXT NOT NULL, "
                "document_id TEXT NOT NULL, "
                "event_id TEXT NOT NULL, "
                "outputs TEXT NOT NULL, "
                f"processed_at {timestamp_type} NOT NULL, "
                "PRIMARY KEY (tenant, document_id, event_id))",
            ),
            # The prefix is a checked identifier, the only text put into SQL; values are bound.
            insert=(
                f"INSERT INTO {documents} ({columns}) VALUES ({marks}) "  # noqa: S608
                "ON CONFLICT (tenant, document_id) DO NOTHING RETURNING document_id"
            ),
            select_one=f"SELECT {columns} FROM {documents} {by_id}",  # noqa: S608
            select_locked=f"SELECT {columns} FROM {documents} {by_id}{row_lock}",  # noqa: S608
            select_list=(
                f"SELECT {columns} FROM {documents} WHERE tenant = {placeholder} "  # noqa: S608
                f"ORDER BY created_at DESC, document_id LIMIT {placeholder}"
            ),
            update=f"UPDATE {documents} SET {assignments} {by_id}",  # noqa: S608
            select_event=(
                f"SELECT outputs FROM {events} {by_id} AND event_id = {placeholder}"  # noqa: S608
            ),
            insert_event=(
                f"INSERT INTO {events} "  # noqa: S608
                "(tenant, document_id, event_id, outputs, processed_at) "
                f"VALUES ({placeholder}, {placeholder}, {placeholder}, {placeholder}, "
                f"{placeholder})"
            ),
        )


__all__ = ["COLUMNS", "DEFAULT_PREFIX", "MUTABLE_COLUMNS", "Statements", "checked_prefix"]
