"""Tests of the DocumentManager on the in-memory transport, the store on both backends.

Each input changes a document at most once and sends its outputs once, even across crashes.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProducer,
)
from boost_tenancy.header_values import derived_id
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, SQLiteErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.contract import (
    CMD_DOCUMENT_PROCESS,
    CMD_DOCUMENT_RETRY,
    CMD_EXTRACT_TEXT,
    CMD_INTERPRET,
    EVT_FAILED,
    EVT_INTERPRETATION_ERROR,
    EVT_INTERPRETED,
    EVT_NEEDS_REVIEW,
    EVT_PROCESSING_STARTED,
    EVT_READY,
    EVT_TEXT_ERROR,
    EVT_TEXT_EXTRACTED,
    DocumentState,
)
from services.common.documents import (
    Applied,
    Document,
    DocumentStore,
    NewDocument,
    OutputsOf,
    Transition,
)
from services.manager import DocumentManager
from tests.conftest import recorded, wait_until

ORG_A = TenantId("org-a")
ORG_B = TenantId("org-b")
INPUTS = DocumentManager.queues
OUTPUTS = DocumentManager.publishes
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_ms=20, max_delay_ms=50)
SHARED = Routing(Topology.SHARED)
"""One queue per name: the tests read what the manager sent, every tenant's, by queue name."""


class Pipeline:
    """A broker, the manager's runners and a producer; what the manager sent stays in the queues."""

    def __init__(self, documents: DocumentStore, errors: ErrorStore) -> None:
        self.documents = documents
        self.errors = errors
        self.broker = InMemoryBroker()
        self.runners: list[ProcessorRunner] = []
        producer_transport = InMemoryTransport(self.broker)
        producer_transport.connect()
        self.producer = TenantProducer(producer_transport, routing=SHARED)

    def start(self, store: DocumentStore | None = None) -> ProcessorRunner:
        runner = ProcessorRunner(
            DocumentManager(store or self.documents),
            InMemoryTransport(self.broker),
            [ORG_A, ORG_B],
            error_store=self.errors,
            settings=RunnerSettings(
                workers=3, prefetch=10, dispatch=DispatchSettings(retry=FAST_RETRY)
            ),
            routing=SHARED,
        )
        runner.start()
        self.runners.append(runner)
        return runner

    def create(self, tenant: TenantId = ORG_A) -> Document:
        document = str(uuid.uuid4())
        return self.documents.create(
            NewDocument(
                tenant=tenant,
                document_id=document,
                file_name="scan.png",
                content_type="image/png",
                blob_key=f"documents/{document}/original",
            )
        )

    def send(
        self, queue: str, tenant: TenantId, body: dict[str, Any], message_id: str | None = None
    ) -> str:
        return self.producer.send(queue, tenant, body, message_id=message_id).message_id

    def settled(self, timeout: float = 10.0) -> bool:
        """Every input handled: no input message left, scheduled retries included."""
        return wait_until(lambda: all(self.broker.depth(q) == 0 for q in INPUTS), timeout)

    def bodies(self, queue: str) -> list[dict[str, Any]]:
        return [json.loads(str(m.body)) for m in self.broker.messages(queue)]

    def ids(self, queue: str) -> list[str]:
        return [m.properties["boostMessageId"] for m in self.broker.messages(queue)]

    def counts(self) -> dict[str, int]:
        return {queue: self.broker.depth(queue) for queue in OUTPUTS}

    def state(self, document: Document) -> DocumentState:
        found = self.documents.get(document.tenant, document.document_id)
        assert found is not None
        return found.state

    def close(self) -> None:
        for runner in self.runners:
            runner.stop(grace_s=2)
        self.broker.close()


@pytest.fixture
def pipeline(documents: DocumentStore, tmp_path: Path) -> Iterator[Pipeline]:
    errors = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    made = Pipeline(documents, errors)
    try:
        yield made
    finally:
        made.close()
        errors.close()


def process_body(document: Document, blob_key: str = "documents/x/ignored") -> dict[str, Any]:
    return {
        "documentUUID": document.document_id,
        "blobKey": blob_key,
        "fileName": "ignored.pdf",
        "contentType": "application/pdf",
    }


def extracted_body(document: Document, run: int = 1) -> dict[str, Any]:
    return {
        "documentUUID": document.document_id,
        "run": run,
        "textKey": f"documents/{document.document_id}/text-{run}",
        "chars": 1234,
    }


def interpreted_body(document: Document, run: int = 1, *, review: bool = False) -> dict[str, Any]:
    return {
        "documentUUID": document.document_id,
        "run": run,
        "documentType": "receipt",
        "confidence": 0.31 if review else 1,
        "fields": {"total": "9.99"},
        "needsReview": review,
        "reasons": ["total unreadable"] if review else [],
    }


def error_body(document: Document, run: int = 1) -> dict[str, Any]:
    return {"documentUUID": document.document_id, "run": run, "reason": "unreadable scan"}


def test_process_sends_started_and_an_extract_command_from_the_stored_document(
    pipeline: Pipeline,
) -> None:
    document = pipeline.create()
    pipeline.start()
    sent = pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()

    ref = {"documentUUID": document.document_id, "run": 1, "tenantUUID": "org-a"}
    assert pipeline.bodies(EVT_PROCESSING_STARTED) == [ref]
    assert pipeline.bodies(CMD_EXTRACT_TEXT) == [
        {
            **ref,
            "blobKey": document.blob_key,
            "fileName": "scan.png",
            "contentType": "image/png",
        }
    ]
    assert pipeline.ids(CMD_EXTRACT_TEXT) == [derived_id(sent, CMD_EXTRACT_TEXT, 0)]
    extract = pipeline.broker.messages(CMD_EXTRACT_TEXT)[0]
    assert extract.properties["tenantUUID"] == "org-a"
    assert extract.correlation_id == sent
    assert pipeline.state(document) is DocumentState.PROCESSING


def test_the_whole_sequence_ends_ready(pipeline: Pipeline) -> None:
    document = pipeline.create()
    pipeline.start()
    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()
    pipeline.send(EVT_TEXT_EXTRACTED, ORG_A, extracted_body(document))
    assert pipeline.settled()
    assert pipeline.bodies(CMD_INTERPRET) == [
        {
            "documentUUID": document.document_id,
            "run": 1,
            "textKey": f"documents/{document.document_id}/text-1",
            "tenantUUID": "org-a",
        }
    ]
    pipeline.send(EVT_INTERPRETED, ORG_A, interpreted_body(document))
    assert pipeline.settled()

    assert pipeline.bodies(EVT_READY) == [
        {
            "documentUUID": document.document_id,
            "run": 1,
            "documentType": "receipt",
            "fields": {"total": "9.99"},
            "tenantUUID": "org-a",
        }
    ]
    assert pipeline.state(document) is DocumentState.READY
    assert pipeline.counts() == {
        EVT_PROCESSING_STARTED: 1,
        CMD_EXTRACT_TEXT: 1,
        CMD_INTERPRET: 1,
        EVT_READY: 1,
        EVT_NEEDS_REVIEW: 0,
        EVT_FAILED: 0,
    }


def test_low_confidence_sends_needs_review(pipeline: Pipeline) -> None:
    document = pipeline.create()
    pipeline.start()
    for queue, body in (
        (CMD_DOCUMENT_PROCESS, process_body(document)),
        (EVT_TEXT_EXTRACTED, extracted_body(document)),
        (EVT_INTERPRETED, interpreted_body(document, review=True)),
    ):
        pipeline.send(queue, ORG_A, body)
        assert pipeline.settled()
    assert pipeline.bodies(EVT_NEEDS_REVIEW) == [
        {
            "documentUUID": document.document_id,
            "run": 1,
            "documentType": "receipt",
            "confidence": 0.31,
            "reasons": ["total unreadable"],
            "tenantUUID": "org-a",
        }
    ]
    assert pipeline.bodies(EVT_READY) == []
    assert pipeline.state(document) is DocumentState.NEEDS_REVIEW


def test_failure_then_retry_runs_again_and_ignores_the_old_run(pipeline: Pipeline) -> None:
    document = pipeline.create()
    pipeline.start()
    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()
    pipeline.send(EVT_TEXT_ERROR, ORG_A, error_body(document))
    assert pipeline.settled()
    assert pipeline.bodies(EVT_FAILED) == [
        {
            "documentUUID": document.document_id,
            "run": 1,
            "stage": "extraction",
            "reason": "unreadable scan",
            "tenantUUID": "org-a",
        }
    ]

    pipeline.send(CMD_DOCUMENT_RETRY, ORG_A, {"documentUUID": document.document_id})
    assert pipeline.settled()
    assert [b["run"] for b in pipeline.bodies(CMD_EXTRACT_TEXT)] == [1, 2]

    # A late success of run 1 changes nothing and sends nothing.
    pipeline.send(EVT_TEXT_EXTRACTED, ORG_A, extracted_body(document, run=1))
    assert pipeline.settled()
    assert pipeline.bodies(CMD_INTERPRET) == []

    pipeline.send(EVT_TEXT_EXTRACTED, ORG_A, extracted_body(document, run=2))
    assert pipeline.settled()
    pipeline.send(EVT_INTERPRETATION_ERROR, ORG_A, error_body(document, run=2))
    assert pipeline.settled()
    assert [(b["run"], b["stage"]) for b in pipeline.bodies(EVT_FAILED)] == [
        (1, "extraction"),
        (2, "interpretation"),
    ]
    assert pipeline.state(document) is DocumentState.FAILED


def test_every_message_sent_twice_gives_each_output_once(pipeline: Pipeline) -> None:
    document = pipeline.create()
    pipeline.start()
    steps = [
        (CMD_DOCUMENT_PROCESS, process_body(document)),
        (EVT_TEXT_ERROR, error_body(document, run=1)),
        (CMD_DOCUMENT_RETRY, {"documentUUID": document.document_id}),
        (EVT_TEXT_EXTRACTED, extracted_body(document, run=2)),
        (EVT_INTERPRETED, interpreted_body(document, run=2)),
    ]
    for queue, body in steps:
        message_id = str(uuid.uuid4())
        pipeline.send(queue, ORG_A, body, message_id=message_id)
        pipeline.send(queue, ORG_A, body, message_id=message_id)
        assert pipeline.settled()

    assert pipeline.counts() == {
        EVT_PROCESSING_STARTED: 2,  # one per run
        CMD_EXTRACT_TEXT: 2,
        CMD_INTERPRET: 1,
        EVT_READY: 1,
        EVT_NEEDS_REVIEW: 0,
        EVT_FAILED: 1,
    }
    for queue in OUTPUTS:
        assert len(set(pipeline.ids(queue))) == pipeline.broker.depth(queue)
    assert pipeline.state(document) is DocumentState.READY


def test_a_second_process_command_with_a_new_id_is_ignored(pipeline: Pipeline) -> None:
    document = pipeline.create()
    pipeline.start()
    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()
    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()
    assert pipeline.counts()[CMD_EXTRACT_TEXT] == 1
    assert pipeline.errors.failures(tenant=ORG_A) == []


class CrashAfterCommit:
    """The real store, except that the first apply commits and then dies before returning."""

    def __init__(self, inner: DocumentStore, *, hold: bool = False) -> None:
        self.inner = inner
        self.hold = hold
        self.committed = threading.Event()
        self.release = threading.Event()
        self._crashed = False
        self._lock = threading.Lock()

    def create(self, doc: NewDocument) -> Document:
        return self.inner.create(doc)

    def get(self, tenant: TenantId, document_id: str) -> Document | None:
        return self.inner.get(tenant, document_id)

    def list(self, tenant: TenantId, *, limit: int = 100) -> list[Document]:
        return self.inner.list(tenant, limit=limit)

    def apply(
        self,
        tenant: TenantId,
        document_id: str,
        transition: Transition,
        *,
        event_id: str,
        outputs: OutputsOf | None = None,
    ) -> Applied:
        applied = self.inner.apply(
            tenant, document_id, transition, event_id=event_id, outputs=outputs
        )
        with self._lock:
            crash = not self._crashed
            self._crashed = True
        if crash:
            self.committed.set()
            if self.hold:
                self.release.wait(10)
            raise RuntimeError("worker died after the commit")
        return applied

    def close(self) -> None:
        self.inner.close()


def test_a_handler_failing_after_the_commit_sends_the_outputs_on_its_retry(
    pipeline: Pipeline,
) -> None:
    document = pipeline.create()
    crashing = CrashAfterCommit(pipeline.documents)
    pipeline.start(crashing)
    sent = pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()

    assert crashing.committed.is_set()
    retries = recorded(pipeline.errors, 1, tenant=ORG_A, outcome=FailureOutcome.RETRY)
    assert [(r.message_id, r.attempt) for r in retries] == [(sent, 1)]
    # The state changed on attempt 1; attempt 2 found the event applied and resent its outputs,
    # with the ids a clean first attempt would have given them.
    assert pipeline.ids(CMD_EXTRACT_TEXT) == [derived_id(sent, CMD_EXTRACT_TEXT, 0)]
    assert pipeline.ids(EVT_PROCESSING_STARTED) == [derived_id(sent, EVT_PROCESSING_STARTED, 0)]
    assert pipeline.bodies(CMD_EXTRACT_TEXT)[0]["run"] == 1
    assert pipeline.state(document) is DocumentState.PROCESSING


def test_a_worker_lost_after_the_commit_has_the_outputs_sent_on_redelivery(
    pipeline: Pipeline,
) -> None:
    document = pipeline.create()
    crashing = CrashAfterCommit(pipeline.documents, hold=True)
    first = pipeline.start(crashing)
    sent = pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))

    # The change commits, then the worker loses the broker before acknowledging: the message
    # goes back to the queue unacknowledged, as after a killed process.
    assert crashing.committed.wait(5)
    assert not first.stop(grace_s=0)
    crashing.release.set()
    assert pipeline.state(document) is DocumentState.PROCESSING
    assert pipeline.broker.depth(CMD_DOCUMENT_PROCESS) == 1
    assert pipeline.counts() == dict.fromkeys(OUTPUTS, 0)

    pipeline.start()
    assert pipeline.settled()
    assert pipeline.ids(EVT_PROCESSING_STARTED) == [derived_id(sent, EVT_PROCESSING_STARTED, 0)]
    assert pipeline.ids(CMD_EXTRACT_TEXT) == [derived_id(sent, CMD_EXTRACT_TEXT, 0)]
    assert pipeline.bodies(CMD_EXTRACT_TEXT) == [
        {
            "documentUUID": document.document_id,
            "run": 1,
            "blobKey": document.blob_key,
            "fileName": "scan.png",
            "contentType": "image/png",
            "tenantUUID": "org-a",
        }
    ]
    assert pipeline.state(document) is DocumentState.PROCESSING


def test_a_redelivered_duplicate_resends_the_same_outputs_a_fresh_copy_does_not(
    documents: DocumentStore,
) -> None:
    """The handler alone: what it publishes for a first, a copied and a redelivered message."""
    document = documents.create(
        NewDocument(
            tenant=ORG_A,
            document_id=str(uuid.uuid4()),
            file_name="a.txt",
            content_type="text/plain",
            blob_key="documents/a/original",
        )
    )
    manager = DocumentManager(documents)
    body = {"documentUUID": document.document_id}

    def deliver(*, redelivered: bool, attempt: int) -> list[tuple[str, str]]:
        message = IncomingMessage(
            tenant=ORG_A,
            queue=CMD_DOCUMENT_PROCESS,
            body=json.dumps(body),
            message_id="cmd-1",
            correlation_id="cmd-1",
            attempt=attempt,
            redelivered=redelivered,
            properties={},
            data=body,
        )
        ctx = HandlerContext(
            tenant=ORG_A,
            queue=CMD_DOCUMENT_PROCESS,
            message_id="cmd-1",
            correlation_id="cmd-1",
            attempt=attempt,
            log=_NullLog(),
        )
        manager.handle(message, ctx)
        return [(queue, str(wire.body)) for queue, wire, _ in ctx.outputs]

    first = deliver(redelivered=False, attempt=1)
    assert [queue for queue, _ in first] == [EVT_PROCESSING_STARTED, CMD_EXTRACT_TEXT]
    assert deliver(redelivered=False, attempt=1) == []
    assert deliver(redelivered=True, attempt=1) == first
    assert deliver(redelivered=False, attempt=2) == first


class _NullLog:
    def info(self, *_args: object, **_kwargs: object) -> None:
        pass


def test_an_unknown_document_is_dead_lettered(pipeline: Pipeline) -> None:
    pipeline.start()
    missing = str(uuid.uuid4())
    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, {"documentUUID": missing})
    dlq = dead_letter_queue(CMD_DOCUMENT_PROCESS)
    assert wait_until(lambda: pipeline.broker.depth(dlq) == 1)
    assert pipeline.settled()
    dead = pipeline.broker.messages(dlq)[0]
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert missing in dead.properties["boostError"]
    assert pipeline.counts() == dict.fromkeys(OUTPUTS, 0)


def test_another_tenants_command_cannot_touch_a_document(pipeline: Pipeline) -> None:
    document = pipeline.create(ORG_A)
    pipeline.start()
    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_B, process_body(document))
    dlq = dead_letter_queue(CMD_DOCUMENT_PROCESS)
    assert wait_until(lambda: pipeline.broker.depth(dlq) == 1)
    assert pipeline.broker.messages(dlq)[0].properties["tenantUUID"] == "org-b"
    assert pipeline.state(document) is DocumentState.UPLOADED
    assert pipeline.counts()[CMD_EXTRACT_TEXT] == 0

    pipeline.send(CMD_DOCUMENT_PROCESS, ORG_A, process_body(document))
    assert pipeline.settled()
    assert [m.properties["tenantUUID"] for m in pipeline.broker.messages(CMD_EXTRACT_TEXT)] == [
        "org-a"
    ]


@dataclass(frozen=True)
class Malformed:
    queue: str
    body: dict[str, Any]


@pytest.mark.parametrize(
    "case",
    [
        Malformed(CMD_DOCUMENT_PROCESS, {"documentUUID": "not-a-uuid"}),
        Malformed(EVT_TEXT_EXTRACTED, {"documentUUID": "{doc}", "textKey": "documents/a/t"}),
        Malformed(EVT_TEXT_EXTRACTED, {"documentUUID": "{doc}", "run": 1, "textKey": "../x"}),
        Malformed(
            EVT_INTERPRETED,
            {
                "documentUUID": "{doc}",
                "run": 1,
                "documentType": "x",
                "confidence": "high",
                "fields": {},
                "needsReview": False,
                "reasons": [],
            },
        ),
    ],
    ids=["bad-id", "no-run", "bad-text-key", "bad-confidence"],
)
def test_malformed_messages_are_dead_lettered(pipeline: Pipeline, case: Malformed) -> None:
    document = pipeline.create()
    pipeline.start()
    body = {k: (document.document_id if v == "{doc}" else v) for k, v in case.body.items()}
    pipeline.send(case.queue, ORG_A, body)
    dlq = dead_letter_queue(case.queue)
    assert wait_until(lambda: pipeline.broker.depth(dlq) == 1)
    assert pipeline.broker.messages(dlq)[0].properties["boostDeadLetterReason"] == "permanent"
    assert pipeline.state(document) is DocumentState.UPLOADED


def test_queues_are_the_commands_and_stage_events() -> None:
    assert DocumentManager.queues == (
        CMD_DOCUMENT_PROCESS,
        CMD_DOCUMENT_RETRY,
        EVT_TEXT_EXTRACTED,
        EVT_TEXT_ERROR,
        EVT_INTERPRETED,
        EVT_INTERPRETATION_ERROR,
    )
