"""Runs the Thumbnailer for the tenants in BOOST_TENANTS until SIGTERM.

Usage: `python -m services.thumbnailer`; settings as in docs/pipeline.md.
"""

from __future__ import annotations

from services.common.blobs import LocalBlobStore
from services.common.runtime import run_service
from services.thumbnailer.processor import Thumbnailer

raise SystemExit(run_service(lambda s: Thumbnailer(LocalBlobStore(s.blob_dir))))
