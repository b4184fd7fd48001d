"""The document store's interface, and opening the backend a URL names.

Callers depend on DocumentStore; SQLite and PostgreSQL both implement it.
"""

from __future__ import annotations

import builtins
from typing import Protocol

from boost_tenancy import TenantId
from boost_tenancy.storage import parse_store_url
from services.common.documents.model import (
    Applied,
    Document,
    NewDocument,
    OutputsOf,
    Transition,
)
from services.common.documents.postgres import PostgresDocumentStore
from services.common.documents.sql import DEFAULT_PREFIX
from services.common.documents.sqlite import SQLiteDocumentStore


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


def open_document_store(url: str, *, prefix: str = DEFAULT_PREFIX) -> DocumentStore:
    """Open the document store a URL names: postgresql://, postgres://, sqlite:///path or a path."""
    parsed = parse_store_url(url, what="document store")
    if parsed.backend == "postgresql":
        return PostgresDocumentStore(parsed.target, prefix=prefix)
    return SQLiteDocumentStore(parsed.target, prefix=prefix)


__all__ = ["DocumentStore", "open_document_store"]
