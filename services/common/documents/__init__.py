"""The document store: each tenant's documents and the one state machine that moves them.

SQLite serves a single host and PostgreSQL a fleet; both share one schema and one set of queries.
"""

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
)
from services.common.documents.postgres import PostgresDocumentStore
from services.common.documents.sqlite import SQLiteDocumentStore
from services.common.documents.states import advance
from services.common.documents.store import DocumentStore, open_document_store

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
