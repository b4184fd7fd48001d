"""The document store: each tenant's documents and the one state machine that moves them.

SQLite serves a single host and PostgreSQL a fleet; both share one schema and one set of queries.
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from boost_tenancy import ConfigError, PermanentError, TenantId, TransientError
from boost_tenancy.storage import parse_store_url
from services.common.blobs import check_key
from services.common.contract import DocumentState, document_id

if TYPE_CHECKING:
    import psycopg

_DEFAULT_PREFIX: Final = "boost_"
# The prefix is the only thing put into SQL text; 40 characters leave room for the longest
# derived name ("<prefix>processed_events") within PostgreSQL's 63-byte identifiers.
_PREFIX_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_MAX_TEXT: Final = 8000
_TRUNCATION_MARKER: Final = "\u2026[truncated]"
_NUL_REPLACEMENT: Final = "\ufffd"
_MAX_EVENT_ID: Final = 200
_COLUMNS: Final = (
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
_MUTABLE_COLUMNS: Final = (*_COLUMNS[5:14], "updated_at")

_T = TypeVar("_T")
_Run = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one statement inside the current transaction and returns its rows (none for writes)."""


# -- errors ---------------------------------------------------------------------------------------
class DocumentStoreError(TransientError):
    """The database failed or is unreachable; the message that needed it is retried."""


class DocumentExistsError(PermanentError, ValueError):
    """A document with this id already exists for the tenant."""


class InvalidDocumentError(PermanentError, ValueError):
    """A document, transition or argument is malformed; retrying the same data cannot help."""


# -- values ---------------------------------------------------------------------------------------
def _require_text(name: str, value: object, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value) or "\x00" in value:
        raise InvalidDocumentError(f"{name} must be a non-empty string without NUL, got {value!r}")
    return value


def _require_run(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidDocumentError(f"run must be an integer of at least 1, got {value!r}")
    return value


def _checked_document_id(value: object) -> str:
    try:
        return document_id(value)
    except PermanentError as exc:
        raise InvalidDocumentError(str(exc)) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class NewDocument:
    """What the IntegrationsServer knows of an upload before any processing."""

    tenant: TenantId
    document_id: str
    file_name: str
    content_type: str
    blob_key: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenant", TenantId.parse(self.tenant))
        _checked_document_id(self.document_id)
        _require_text("file_name", self.file_name)
        _require_text("content_type", self.content_type)
        try:
            check_key(_require_text("blob_key", self.blob_key))
        except PermanentError as exc:
            raise InvalidDocumentError(str(exc)) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """One document of one tenant as stored, at one point of its pipeline."""

    tenant: TenantId
    document_id: str
    file_name: str
    content_type: str
    blob_key: str
    state: DocumentState
    run: int
    """The processing run: 0 before the first process command, +1 for each retry."""
    document_type: str | None
    confidence: float | None
    fields: dict[str, Any] | None
    reasons: tuple[str, ...]
    error: str | None
    failed_stage: str | None
    created_at: datetime
    updated_at: datetime
    text_key: str | None = None
    """The blob key of the extracted text of the current run, once extracted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun:
    """A process (retry=False) or retry command: starts the next processing run."""

    retry: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TextExtracted:
    """The extractor stored the text of a run under text_key."""

    run: int
    text_key: str

    def __post_init__(self) -> None:
        _require_run(self.run)
        try:
            check_key(_require_text("text_key", self.text_key))
        except PermanentError as exc:
            raise InvalidDocumentError(str(exc)) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreted:
    """The interpreter classified a run's text: ready, or in need of a person's review."""

    run: int
    document_type: str
    confidence: float
    fields: Mapping[str, Any]
    needs_review: bool
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_run(self.run)
        _require_text("document_type", self.document_type)
        confidence: object = self.confidence
        if (
            not isinstance(confidence, int | float)
            or isinstance(confidence, bool)
            or not math.isfinite(confidence)
            or not 0.0 <= confidence <= 1.0
        ):
            raise InvalidDocumentError(f"confidence must be within [0, 1], got {confidence!r}")
        object.__setattr__(self, "confidence", float(confidence))
        if not isinstance(self.fields, Mapping):
            raise InvalidDocumentError(f"fields must be a mapping, got {self.fields!r}")
        if not isinstance(self.needs_review, bool):
            raise InvalidDocumentError(f"needs_review must be a bool, got {self.needs_review!r}")
        reasons = tuple(self.reasons)
        for reason in reasons:
            _require_text("a reason", reason, allow_empty=True)
        object.__setattr__(self, "reasons", reasons)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """A stage of a run failed for good; the document waits for a retry."""

    run: int
    stage: str
    reason: str

    def __post_init__(self) -> None:
        _require_run(self.run)
        _require_text("stage", self.stage)
        if not isinstance(self.reason, str):
            raise InvalidDocumentError(f"reason must be a string, got {self.reason!r}")


Transition = StartRun | TextExtracted | Interpreted | Failed


class Skip(enum.StrEnum):
    """Why an apply changed nothing; none of these is an error."""

    DUPLICATE = "duplicate"
    """This event was applied before; its recorded outputs come back with the result."""
    STALE_RUN = "stale run"
    """The event belongs to an earlier run than the document's current one."""
    UNKNOWN_RUN = "unknown run"
    """The event names a run the document has not started."""
    NOT_ALLOWED = "not allowed"
    """The transition does not lead on from the document's state (repeated or out of order)."""
    UNKNOWN_DOCUMENT = "unknown document"
    """The tenant has no document with this id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """A message a transition calls for, recorded with the event that caused it."""

    queue: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """The result of apply: whether the document changed, and if not, why."""

    changed: bool
    reason: Skip | None = None
    document: Document | None = None
    """The document after the apply (as found, when nothing changed); None if unknown."""
    outputs: tuple[Output, ...] = ()
    """What the transition produced: when changed, and again for a duplicate event."""

    @property
    def run(self) -> int | None:
        """The document's run after the apply (for StartRun: the run just started)."""
        return None if self.document is None else self.document.run


OutputsOf = Callable[[Document], Sequence[Output]]
"""Computes, inside the transaction, the outputs of a transition from the document it produced."""


_ALLOWED_FROM: Final[Mapping[type, frozenset[DocumentState]]] = {
    # The transition table: the states each transition may leave. Anything else is a repeated or
    # out-of-order message, and a document never moves back to an earlier state of its run.
    TextExtracted: frozenset({DocumentState.PROCESSING}),
    Interpreted: frozenset({DocumentState.EXTRACTED}),
    Failed: frozenset({DocumentState.PROCESSING, DocumentState.EXTRACTED}),
}
_START_FROM: Final = frozenset({DocumentState.UPLOADED, DocumentState.FAILED})
_RETRY_FROM: Final = frozenset({DocumentState.FAILED})


def _skip_reason(document: Document, transition: Transition) -> Skip | None:
    if isinstance(transition, StartRun):
        allowed = _RETRY_FROM if transition.retry else _START_FROM
    else:
        if transition.run < document.run:
            return Skip.STALE_RUN
        if transition.run > document.run:
            return Skip.UNKNOWN_RUN
        allowed = _ALLOWED_FROM[type(transition)]
    return None if document.state in allowed else Skip.NOT_ALLOWED


def advance(document: Document, transition: Transition, now: datetime) -> Document | Skip:
    """The state machine: the document after transition, or why the transition does not apply."""
    skip = _skip_reason(document, transition)
    if skip is not None:
        return skip
    if isinstance(transition, StartRun):
        # A new run starts clean: nothing of a failed run's results may leak into it.
        return replace(
            document,
            state=DocumentState.PROCESSING,
            run=document.run + 1,
            text_key=None,
            document_type=None,
            confidence=None,
            fields=None,
            reasons=(),
            error=None,
            failed_stage=None,
            updated_at=now,
        )
    if isinstance(transition, TextExtracted):
        return replace(
            document, state=DocumentState.EXTRACTED, text_key=transition.text_key, updated_at=now
        )
    if isinstance(transition, Interpreted):
        return replace(
            document,
            state=DocumentState.NEEDS_REVIEW if transition.needs_review else DocumentState.READY,
            document_type=transition.document_type,
            confidence=transition.confidence,
            fields=dict(transition.fields),
            reasons=transition.reasons,
            updated_at=now,
        )
    return replace(
        document,
        state=DocumentState.FAILED,
        error=_storable_text(transition.reason),
        failed_stage=transition.stage,
        updated_at=now,
    )


# -- the store ------------------------------------------------------------------------------------
class DocumentStore(Protocol):
    """Each tenant's documents; apply is the only way a document's state changes."""

    def create(self, doc: NewDocument) -> Document:
        """Store a new document (UPLOADED, run 0); an existing id raises DocumentExistsError."""
        ...

    def get(self, tenant: TenantId, document_id: str) -> Document | None:
        """The tenant's document, or None (another tenant's id is as unknown as a missing one)."""
        ...

    def list(self, tenant: TenantId, *, limit: int = 100) -> builtins.list[Document]:
        """The tenant's documents, newest first."""
        ...

    def apply(
        self,
        tenant: TenantId,
        document_id: str,
        transition: Transition,
        *,
        event_id: str,
        outputs: OutputsOf | None = None,
    ) -> Applied:
        """Apply a transition at most once per event_id, in one transaction; never raises for
        a transition that does not apply (Applied.changed is False, Applied.reason says why)."""
        ...

    def close(self) -> None:
        """Release the connection; the store cannot be used afterwards."""
        ...


def _checked_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or _PREFIX_RE.fullmatch(prefix) is None:
        raise ConfigError(
            f"document store table prefix {prefix!r} is not a plain identifier: expected 1 to 40 "
            "characters from A-Z, a-z, 0-9 and '_', not starting with a digit"
        )
    return prefix


def _storable_text(text: str) -> str:
    # PostgreSQL text cannot hold NUL; an error reason from a message may carry anything.
    text = text.replace("\x00", _NUL_REPLACEMENT)
    if len(text) > _MAX_TEXT:
        text = text[: _MAX_TEXT - len(_TRUNCATION_MARKER)] + _TRUNCATION_MARKER
    return text


def _json(value: object) -> str:
    # NaN and Infinity are not JSON; refusing them keeps stored bodies readable by any consumer.
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidDocumentError(f"value is not storable as JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Statements:
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
    ) -> _Statements:
        documents = f'"{prefix}documents"'
        events = f'"{prefix}processed_events"'
        columns = ", ".join(_COLUMNS)
        marks = ", ".join([placeholder] * len(_COLUMNS))
        by_id = f"WHERE tenant = {placeholder} AND document_id = {placeholder}"
        assignments = ", ".join(f"{c} = {placeholder}" for c in _MUTABLE_COLUMNS)
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


class _SqlDocumentStore:
    """What both backends share: validation, the statements, the state machine and decoding."""

    def __init__(
        self, prefix: str, *, placeholder: str, row_lock: str, timestamp_type: str
    ) -> None:
        self._prefix = _checked_prefix(prefix)
        self._sql = _Statements.build(
            self._prefix,
            placeholder=placeholder,
            row_lock=row_lock,
            timestamp_type=timestamp_type,
        )
        # One connection serves every worker thread; the lock serialises its use.
        self._lock = threading.Lock()
        self._closed = False
        self._connection: Any = None
        self._driver_error: type[Exception] = Exception

    # -- public API -------------------------------------------------------------------------------
    def create(self, doc: NewDocument) -> Document:
        """Store a new document (UPLOADED, run 0); an existing id raises DocumentExistsError."""
        if not isinstance(doc, NewDocument):
            raise InvalidDocumentError(f"expected a NewDocument, got {type(doc).__name__}")
        now = datetime.now(UTC)
        document = Document(
            tenant=doc.tenant,
            document_id=doc.document_id,
            file_name=doc.file_name,
            content_type=doc.content_type,
            blob_key=doc.blob_key,
            state=DocumentState.UPLOADED,
            run=0,
            document_type=None,
            confidence=None,
            fields=None,
            reasons=(),
            error=None,
            failed_stage=None,
            created_at=now,
            updated_at=now,
        )
        stamp = self._encode_time(now)
        values = (
            doc.tenant.value,
            doc.document_id,
            doc.file_name,
            doc.content_type,
            doc.blob_key,
            *self._mutable_values(document)[:-1],
            stamp,
            stamp,
        )

        def work(run: _Run) -> Document:
            if not run(self._sql.insert, values):
                raise DocumentExistsError(
                    f"document {doc.document_id} of tenant {doc.tenant} already exists"
                )
            return document

        return self._transaction("create", work, write=True)

    def get(self, tenant: TenantId, document_id: str) -> Document | None:
        """The tenant's document, or None (another tenant's id is as unknown as a missing one)."""
        owner = TenantId.parse(tenant)
        try:
            _checked_document_id(document_id)
        except InvalidDocumentError:
            return None  # no stored document can have a malformed id

        def work(run: _Run) -> Document | None:
            rows = run(self._sql.select_one, (owner.value, document_id))
            return self._decode(rows[0], owner) if rows else None

        return self._transaction("get", work, write=False)

    def list(self, tenant: TenantId, *, limit: int = 100) -> builtins.list[Document]:
        """The tenant's documents, newest first."""
        owner = TenantId.parse(tenant)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidDocumentError(f"limit must be a positive integer, got {limit!r}")

        def work(run: _Run) -> builtins.list[Document]:
            rows = run(self._sql.select_list, (owner.value, limit))
            return [self._decode(row, owner) for row in rows]

        return self._transaction("list", work, write=False)

    def apply(
        self,
        tenant: TenantId,
        document_id: str,
        transition: Transition,
        *,
        event_id: str,
        outputs: OutputsOf | None = None,
    ) -> Applied:
        """Apply a transition at most once per event_id, in one transaction; never raises for
        a transition that does not apply (Applied.changed is False, Applied.reason says why)."""
        owner = TenantId.parse(tenant)
        _checked_document_id(document_id)
        if not isinstance(transition, StartRun | TextExtracted | Interpreted | Failed):
            raise InvalidDocumentError(f"not a transition: {transition!r}")
        if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_EVENT_ID:
            raise InvalidDocumentError(f"event_id must be 1-{_MAX_EVENT_ID} characters")
        key = (owner.value, document_id)

        def work(run: _Run) -> Applied:
            # The row lock (PostgreSQL) or the write lock (SQLite) makes concurrent applies to
            # one document take turns, so the processed-event check below cannot race.
            rows = run(self._sql.select_locked, key)
            if not rows:
                return Applied(changed=False, reason=Skip.UNKNOWN_DOCUMENT)
            current = self._decode(rows[0], owner)
            recorded = run(self._sql.select_event, (*key, event_id))
            if recorded:
                return Applied(
                    changed=False,
                    reason=Skip.DUPLICATE,
                    document=current,
                    outputs=self._decode_outputs(recorded[0][0]),
                )
            now = datetime.now(UTC)
            result = advance(current, transition, now)
            if isinstance(result, Skip):
                # Not recorded as processed: an ignored event changes nothing, so seeing it
                # again later (in the right order) must still be able to apply.
                return Applied(changed=False, reason=result, document=current)
            produced = tuple(outputs(result)) if outputs is not None else ()
            encoded = _json([{"queue": o.queue, "body": dict(o.body)} for o in produced])
            run(self._sql.update, (*self._mutable_values(result), *key))
            run(self._sql.insert_event, (*key, event_id, encoded, self._encode_time(now)))
            return Applied(changed=True, document=result, outputs=produced)

        return self._transaction("apply", work, write=True)

    def close(self) -> None:
        """Close the connection; later calls fail with DocumentStoreError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._connection.close()
            except self._driver_error as exc:
                raise self._failure("close", exc) from exc

    # -- encoding ---------------------------------------------------------------------------------
    def _mutable_values(self, document: Document) -> tuple[object, ...]:
        """The values of _MUTABLE_COLUMNS, in order, for INSERT and UPDATE."""
        return (
            document.state.value,
            document.run,
            document.text_key,
            document.document_type,
            document.confidence,
            None if document.fields is None else _json(document.fields),
            _json(list(document.reasons)),
            document.error,
            document.failed_stage,
            self._encode_time(document.updated_at),
        )

    def _decode(self, row: Sequence[Any], tenant: TenantId) -> Document:
        values = dict(zip(_COLUMNS, row, strict=True))
        # The WHERE clause already scopes by tenant; this turns a query bug into an error
        # instead of another tenant's document.
        if values["tenant"] != tenant.value:
            raise DocumentStoreError(
                f"document store {self._prefix!r} returned a document of another tenant"
            )
        try:
            fields = None if values["fields"] is None else json.loads(values["fields"])
            reasons = json.loads(values["reasons"])
            if not (fields is None or isinstance(fields, dict)) or not isinstance(reasons, list):
                raise ValueError("fields or reasons have the wrong JSON type")
            return Document(
                tenant=tenant,
                document_id=values["document_id"],
                file_name=values["file_name"],
                content_type=values["content_type"],
                blob_key=values["blob_key"],
                state=DocumentState(values["state"]),
                run=int(values["run"]),
                text_key=values["text_key"],
                document_type=values["document_type"],
                confidence=None if values["confidence"] is None else float(values["confidence"]),
                fields=fields,
                reasons=tuple(str(r) for r in reasons),
                error=values["error"],
                failed_stage=values["failed_stage"],
                created_at=self._decode_time(values["created_at"]),
                updated_at=self._decode_time(values["updated_at"]),
            )
        except (ValueError, TypeError) as exc:
            raise DocumentStoreError(
                f"document store {self._prefix!r} holds an unreadable document: {exc}"
            ) from exc

    def _decode_outputs(self, text: Any) -> tuple[Output, ...]:
        try:
            items = json.loads(text)
            return tuple(Output(queue=str(i["queue"]), body=dict(i["body"])) for i in items)
        except (ValueError, TypeError, KeyError) as exc:
            raise DocumentStoreError(
                f"document store {self._prefix!r} holds unreadable event outputs: {exc}"
            ) from exc

    def _failure(self, operation: str, exc: BaseException) -> DocumentStoreError:
        return DocumentStoreError(f"document store {self._prefix!r}: {operation} failed: {exc}")

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise DocumentStoreError(f"document store {self._prefix!r}: {operation} after close")

    # -- backend specifics ------------------------------------------------------------------------
    def _encode_time(self, when: datetime) -> object:
        raise NotImplementedError

    def _decode_time(self, value: Any) -> datetime:
        raise NotImplementedError

    def _transaction(self, operation: str, work: Callable[[_Run], _T], *, write: bool) -> _T:
        """Run work in one transaction: committed if it returns, rolled back if it raises."""
        raise NotImplementedError


class SQLiteDocumentStore(_SqlDocumentStore):
    """A document store in one SQLite file (WAL journal), for a single host."""

    def __init__(self, path: str | os.PathLike[str], *, prefix: str = _DEFAULT_PREFIX) -> None:
        super().__init__(prefix, placeholder="?", row_lock="", timestamp_type="TEXT")
        self._driver_error = sqlite3.Error
        location = Path(path)
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are begun explicitly, so BEGIN IMMEDIATE can
            # take the write lock before the read that a transition depends on. The timeout
            # lets other processes (the IntegrationsServer) wait out each other's write lock.
            connection = sqlite3.connect(
                location, check_same_thread=False, timeout=30.0, isolation_level=None
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._failure(f"open {str(location)!r}", exc) from exc
        try:
            self._create_schema(connection)
        except sqlite3.Error as exc:
            connection.close()
            raise self._failure("create schema", exc) from exc
        self._connection = connection

    def _create_schema(self, connection: sqlite3.Connection) -> None:
        # Switching a new file to WAL can answer "database is locked" at once while another
        # process does the same (SQLite does not wait on the busy timeout for it): a few
        # short retries let stores opened together on a new file all start.
        for attempt in range(1, 21):
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                # A NORMAL sync in WAL mode can lose the last commits on power loss, and a lost
                # processed event would let a redelivered event apply twice.
                connection.execute("PRAGMA synchronous=FULL")
                connection.execute("BEGIN IMMEDIATE")
                for statement in self._sql.schema:
                    connection.execute(statement)
                connection.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if "locked" not in str(exc) or attempt == 20:
                    raise
                time.sleep(0.05 * attempt)

    def _encode_time(self, when: datetime) -> object:
        # Fixed-width UTC text sorts in time order, which ORDER BY created_at relies on.
        return when.astimezone(UTC).isoformat(timespec="microseconds")

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, str):
            raise ValueError(f"timestamp is not ISO-8601 text: {value!r}")
        return datetime.fromisoformat(value).astimezone(UTC)

    def _run(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._connection.execute(sql, params).fetchall()
        return rows

    def _transaction(self, operation: str, work: Callable[[_Run], _T], *, write: bool) -> _T:
        with self._lock:
            self._check_open(operation)
            connection: sqlite3.Connection = self._connection
            try:
                connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = work(self._run)
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                # The original error is the one worth reporting; a failed rollback adds nothing.
                if connection.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        connection.execute("ROLLBACK")
                raise self._failure(operation, exc) from exc


class _NotSent(Exception):  # noqa: N818  # an internal signal, never raised to callers
    """A driver error before COMMIT was sent on a connection that is now closed."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PostgresDocumentStore(_SqlDocumentStore):
    """A document store in PostgreSQL tables, shared by every host; needs psycopg 3."""

    def __init__(self, dsn: str, *, prefix: str = _DEFAULT_PREFIX) -> None:
        super().__init__(
            prefix, placeholder="%s", row_lock=" FOR UPDATE", timestamp_type="TIMESTAMPTZ"
        )
        try:
            # Imported here so the services import without the `postgres` extra.
            import psycopg  # noqa: PLC0415
        except ImportError as exc:
            raise ConfigError(
                "PostgresDocumentStore needs psycopg 3; install the `postgres` extra "
                "(pip install 'boost-tenancy[postgres]')"
            ) from exc
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(f"PostgreSQL DSN {dsn!r} is empty")
        self._dsn = dsn
        self._driver_error = psycopg.Error
        self._connection_class: type[psycopg.Connection[tuple[Any, ...]]] = psycopg.Connection
        try:
            self._connection = self._connect()
        except self._driver_error as exc:
            raise self._failure("connect", exc) from exc
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalogue when
        # the manager and the IntegrationsServer start together; a lock per prefix orders them.
        lock_key = int.from_bytes(hashlib.sha256(self._prefix.encode()).digest()[:8], "big") >> 1
        try:
            self._run("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
            for statement in self._sql.schema:
                self._run(statement, ())
            self._connection.commit()
        except self._driver_error as exc:
            self._connection.close()
            raise self._failure("create schema", exc) from exc

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        # Not autocommit: every operation is one explicit transaction, committed by _transaction.
        return self._connection_class.connect(self._dsn, autocommit=False)

    def _encode_time(self, when: datetime) -> object:
        return when

    def _decode_time(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise TypeError(f"timestamp is not a datetime: {value!r}")
        # Returned in the connection's TimeZone setting; documents carry UTC.
        return value.astimezone(UTC)

    def _run(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        with self._connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall() if cursor.description else []
            return rows

    def _rollback_quietly(self) -> None:
        if not self._connection.closed:
            with contextlib.suppress(self._driver_error):
                self._connection.rollback()

    def _attempt(self, work: Callable[[_Run], _T]) -> _T:
        if self._connection.closed:
            self._connection = self._connect()
        try:
            result = work(self._run)
        except self._driver_error as exc:
            self._rollback_quietly()
            if self._connection.closed:
                raise _NotSent(exc) from exc
            raise
        except BaseException:
            self._rollback_quietly()
            raise
        self._connection.commit()
        return result

    def _transaction(self, operation: str, work: Callable[[_Run], _T], *, write: bool) -> _T:
        with self._lock:
            self._check_open(operation)
            try:
                try:
                    return self._attempt(work)
                except _NotSent:
                    # A dropped connection (server restart, failover, idle timeout) is common
                    # enough to try once more on a fresh one; nothing was committed, so that is
                    # safe even for writes. A failed COMMIT is not retried here: it may have
                    # happened, and the caller's retry then finds the event already processed.
                    return self._attempt(work)
            except _NotSent as exc:
                raise self._failure(f"{operation} (after reconnecting)", exc.cause) from exc.cause
            except self._driver_error as exc:
                self._rollback_quietly()
                raise self._failure(operation, exc) from exc


def open_document_store(url: str, *, prefix: str = _DEFAULT_PREFIX) -> DocumentStore:
    """Open the document store a URL names: postgresql://, postgres://, sqlite:///path or a path."""
    parsed = parse_store_url(url, what="document store")
    if parsed.backend == "postgresql":
        return PostgresDocumentStore(parsed.target, prefix=prefix)
    return SQLiteDocumentStore(parsed.target, prefix=prefix)


__all__ = [
    "Applied",
    "Document",
    "DocumentExistsError",
    "DocumentStore",
    "DocumentStoreError",
    "Failed",
    "Interpreted",
    "InvalidDocumentError",
    "NewDocument",
    "Output",
    "OutputsOf",
    "PostgresDocumentStore",
    "SQLiteDocumentStore",
    "Skip",
    "StartRun",
    "TextExtracted",
    "Transition",
    "advance",
    "open_document_store",
]
