"""The SQL document store both backends build on: create, get, list, apply and row decoding.

A backend supplies its connection, its timestamp encoding and how it runs one transaction.
"""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from boost_tenancy import TenantId
from services.common.contract import DocumentState
from services.common.documents.errors import (
    DocumentExistsError,
    DocumentStoreError,
    InvalidDocumentError,
)
from services.common.documents.model import (
    Applied,
    Document,
    Failed,
    Interpreted,
    NewDocument,
    Output,
    OutputsOf,
    Skip,
    StartRun,
    TextExtracted,
    Transition,
    checked_document_id,
)
from services.common.documents.sql import COLUMNS, Statements, checked_prefix
from services.common.documents.states import advance

_MAX_EVENT_ID: Final = 200

_T = TypeVar("_T")
Run = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one statement inside the current transaction and returns its rows (none for writes)."""


def _json(value: object) -> str:
    # NaN and Infinity are not JSON; refusing them keeps stored bodies readable by any consumer.
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidDocumentError(f"value is not storable as JSON: {exc}") from exc


class SqlDocumentStore:
    """What both backends share: validation, the statements, the state machine and decoding."""

    def __init__(
        self, prefix: str, *, placeholder: str, row_lock: str, timestamp_type: str
    ) -> None:
        self._prefix = checked_prefix(prefix)
        self._sql = Statements.build(
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

        def work(run: Run) -> Document:
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
            checked_document_id(document_id)
        except InvalidDocumentError:
            return None  # no stored document can have a malformed id

        def work(run: Run) -> Document | None:
            rows = run(self._sql.select_one, (owner.value, document_id))
            return self._decode(rows[0], owner) if rows else None

        return self._transaction("get", work, write=False)

    def list(self, tenant: TenantId, *, limit: int = 100) -> builtins.list[Document]:
        """The tenant's documents, newest first."""
        owner = TenantId.parse(tenant)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidDocumentError(f"limit must be a positive integer, got {limit!r}")

        def work(run: Run) -> builtins.list[Document]:
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
        checked_document_id(document_id)
        if not isinstance(transition, StartRun | TextExtracted | Interpreted | Failed):
            raise InvalidDocumentError(f"not a transition: {transition!r}")
        if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_EVENT_ID:
            raise InvalidDocumentError(f"event_id must be 1-{_MAX_EVENT_ID} characters")
        key = (owner.value, document_id)

        def work(run: Run) -> Applied:
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
        """The values of MUTABLE_COLUMNS, in order, for INSERT and UPDATE."""
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
        values = dict(zip(COLUMNS, row, strict=True))
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

    def _transaction(self, operation: str, work: Callable[[Run], _T], *, write: bool) -> _T:
        """Run work in one transaction: committed if it returns, rolled back if it raises."""
        raise NotImplementedError


__all__ = ["Run", "SqlDocumentStore"]
