"""Run the DocumentProfessor for BOOST_TENANTS: `python -m services.professor`.

Settings come from the environment (BOOST_BLOB_DIR, BOOST_RULES_DIR, BOOST_REVIEW_THRESHOLD...).
"""

from __future__ import annotations

from services.common.blobs import LocalBlobStore
from services.common.runtime import run_service
from services.professor.processor import DocumentProfessor

if __name__ == "__main__":
    raise SystemExit(
        run_service(
            lambda s: DocumentProfessor(LocalBlobStore(s.blob_dir), s.rules_dir, s.review_threshold)
        )
    )
