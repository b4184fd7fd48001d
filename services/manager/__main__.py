"""Runs the DocumentManager for the tenants in BOOST_TENANTS until SIGTERM/SIGINT.

The document store comes from BOOST_DOCUMENT_STORE (SQLite file or PostgreSQL DSN).
"""

from services.common.documents import open_document_store
from services.common.runtime import run_service
from services.manager.processor import DocumentManager

if __name__ == "__main__":
    raise SystemExit(
        run_service(lambda s: DocumentManager(open_document_store(s.document_store_url)))
    )
