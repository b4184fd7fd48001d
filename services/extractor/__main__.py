"""Runs the DocumentExtractor for the tenants in BOOST_TENANTS until SIGTERM.

Usage: `python -m services.extractor`; settings as in docs/pipeline.md.
"""

from __future__ import annotations

from services.common.blobs import LocalBlobStore
from services.common.runtime import run_service
from services.extractor.processor import DocumentExtractor

raise SystemExit(run_service(lambda s: DocumentExtractor(LocalBlobStore(s.blob_dir))))
