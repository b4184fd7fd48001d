"""Runs one pipeline processor on the in-memory transport, with a tenant-scoped blob folder.

Shared by the extractor and thumbnailer processor tests; no broker or network is involved.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from boost_tenancy import (
    DispatchSettings,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.blobs import LocalBlobStore, document_key
from tests.conftest import wait_until

SAMPLES = Path(__file__).resolve().parents[3] / "services" / "samples"
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_ms=50, max_delay_ms=200)
SHARED = Routing(Topology.SHARED)
"""One broker queue per name, so the tests read every tenant's events of a queue by its name; the
services run routed by default (scripts/demo), and routing has its own contract tests."""

CONTENT_TYPES = {
    "invoice.pdf": "application/pdf",
    "corrupt.pdf": "application/pdf",
    "receipt.txt": "text/plain",
    "letter.html": "text/html",
    "contract.docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "photo.png": "image/png",
}


def new_document() -> str:
    return str(uuid.uuid4())


class Harness:
    """A processor's runner, a producer, the broker to inspect, the blob store and error store."""

    def __init__(
        self,
        factory: Callable[[LocalBlobStore], TenantProcessor],
        tmp_path: Path,
        tenants: tuple[str, ...] = ("org-a",),
        retry: RetryPolicy = FAST_RETRY,
    ) -> None:
        self.blob_root = tmp_path / "blobs"
        self.blob_root.mkdir()
        self.blobs = LocalBlobStore(self.blob_root)
        self.errors = SQLiteErrorStore(tmp_path / "errors.sqlite3")
        self.broker = InMemoryBroker()
        self.processor = factory(self.blobs)
        self.runner = ProcessorRunner(
            self.processor,
            InMemoryTransport(self.broker),
            tenants,
            error_store=self.errors,
            settings=RunnerSettings(workers=2, prefetch=5, dispatch=DispatchSettings(retry=retry)),
            routing=SHARED,
        )
        self._sender = InMemoryTransport(self.broker)
        self._sender.connect()
        self.producer = TenantProducer(self._sender, routing=SHARED)
        self.runner.start()

    def upload(self, tenant: str, sample: str, document: str) -> str:
        """Stores a sample as the tenant's original of the document; returns its blob key."""
        key = document_key(document, "original" + Path(sample).suffix)
        self.blobs.put(TenantId(tenant), key, (SAMPLES / sample).read_bytes())
        return key

    def send(self, queue: str, tenant: str, body: dict[str, Any]) -> str:
        return self.producer.send(queue, tenant, body, correlation_id="corr-1").message_id

    def messages(self, queue: str) -> list[WireMessage]:
        return self.broker.messages(queue)

    def bodies(self, queue: str) -> list[dict[str, Any]]:
        return [json.loads(str(m.body)) for m in self.broker.messages(queue)]

    def wait_for(self, queue: str, count: int = 1, timeout: float = 10.0) -> list[WireMessage]:
        assert wait_until(lambda: len(self.broker.messages(queue)) >= count, timeout=timeout), (
            f"no message on {queue}"
        )
        return self.broker.messages(queue)

    def wait_idle(self, queue: str) -> None:
        """Until the command queue is empty: every command acknowledged or moved on."""
        assert wait_until(lambda: self.broker.depth(queue) == 0 and self.runner.in_flight == 0)

    def remove_blob_root(self) -> None:
        shutil.rmtree(self.blob_root)

    def close(self) -> None:
        assert self.runner.stop(grace_s=5)
        self._sender.close()
        self.broker.close()
        self.errors.close()
