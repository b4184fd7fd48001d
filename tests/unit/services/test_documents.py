"""Tests of the document store and its state machine, run against both SQLite and PostgreSQL.

Every state change goes through apply: once per event, in order, never backwards, per tenant.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import psycopg.conninfo
import pytest

from boost_tenancy import ConfigError, PermanentError, TenantId, TransientError
from services.common.contract import FINAL_STATES, DocumentState
from services.common.documents import (
    Applied,
    Document,
    DocumentExistsError,
    DocumentStore,
    DocumentStoreError,
    Failed,
    Interpreted,
    InvalidDocumentError,
    NewDocument,
    Output,
    PostgresDocumentStore,
    Skip,
    SQLiteDocumentStore,
    StartRun,
    TextExtracted,
    Transition,
    open_document_store,
)
from tests.unit.services.conftest import StoreBackend, new_prefix

ORG_A = TenantId("org-a")
ORG_B = TenantId("org-b")


def new_document(tenant: TenantId = ORG_A, document: str | None = None) -> NewDocument:
    document = document or str(uuid.uuid4())
    return NewDocument(
        tenant=tenant,
        document_id=document,
        file_name="invoice 42.pdf",
        content_type="application/pdf",
        blob_key=f"documents/{document}/original",
    )


def echo(document: Document) -> Sequence[Output]:
    """Outputs naming the state and run reached, to check what apply records and returns."""
    return (Output(queue="out", body={"state": document.state.value, "run": document.run}),)


def extracted(run: int = 1) -> TextExtracted:
    return TextExtracted(run=run, text_key=f"documents/d/text-{run}")


def interpreted(run: int = 1, *, review: bool = False) -> Interpreted:
    return Interpreted(
        run=run,
        document_type="invoice",
        confidence=0.42 if review else 0.97,
        fields={"total": "12.50", "lines": [1, 2]},
        needs_review=review,
        reasons=("low confidence",) if review else (),
    )


class Doc:
    """One created document and a counter of fresh event ids, to keep the tests short."""

    def __init__(self, store: DocumentStore, tenant: TenantId = ORG_A) -> None:
        self.store = store
        self.tenant = tenant
        self.id = store.create(new_document(tenant)).document_id
        self._events = 0

    def apply(self, transition: Transition, event_id: str | None = None) -> Applied:
        if event_id is None:
            self._events += 1
            event_id = f"evt-{self._events}"
        return self.store.apply(self.tenant, self.id, transition, event_id=event_id, outputs=echo)

    @property
    def now(self) -> Document:
        found = self.store.get(self.tenant, self.id)
        assert found is not None
        return found


def test_create_stores_an_uploaded_document_of_run_zero(documents: DocumentStore) -> None:
    new = new_document()
    created = documents.create(new)
    assert created.state is DocumentState.UPLOADED
    assert created.run == 0
    assert (created.file_name, created.content_type, created.blob_key) == (
        "invoice 42.pdf",
        "application/pdf",
        new.blob_key,
    )
    assert created.reasons == ()
    assert created.fields is None and created.error is None and created.text_key is None
    assert documents.get(ORG_A, new.document_id) == created
    assert documents.list(ORG_A) == [created]


def test_duplicate_id_is_refused_and_changes_nothing(documents: DocumentStore) -> None:
    new = new_document()
    first = documents.create(new)
    with pytest.raises(DocumentExistsError) as excinfo:
        documents.create(new)
    assert isinstance(excinfo.value, PermanentError)
    assert isinstance(excinfo.value, ValueError)
    assert documents.list(ORG_A) == [first]


def test_happy_path_to_ready(documents: DocumentStore) -> None:
    doc = Doc(documents)

    started = doc.apply(StartRun())
    assert started.changed and started.reason is None
    assert started.run == 1
    assert started.document == doc.now
    assert doc.now.state is DocumentState.PROCESSING
    assert started.outputs == (Output(queue="out", body={"state": "processing", "run": 1}),)

    got_text = doc.apply(extracted())
    assert got_text.changed
    assert doc.now.state is DocumentState.EXTRACTED
    assert doc.now.text_key == "documents/d/text-1"

    done = doc.apply(interpreted())
    assert done.changed
    assert done.outputs == (Output(queue="out", body={"state": "ready", "run": 1}),)
    final = doc.now
    assert final.state is DocumentState.READY
    assert (final.document_type, final.confidence) == ("invoice", 0.97)
    assert final.fields == {"total": "12.50", "lines": [1, 2]}
    assert final.reasons == ()
    assert final.updated_at >= final.created_at


def test_low_confidence_ends_in_needs_review(documents: DocumentStore) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    doc.apply(extracted())
    assert doc.apply(interpreted(review=True)).changed
    final = doc.now
    assert final.state is DocumentState.NEEDS_REVIEW
    assert final.confidence == 0.42
    assert final.reasons == ("low confidence",)


def test_failure_then_retry_starts_a_clean_second_run(documents: DocumentStore) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    doc.apply(extracted())
    failed = doc.apply(Failed(run=1, stage="interpretation", reason="model unavailable"))
    assert failed.changed
    assert (doc.now.state, doc.now.failed_stage, doc.now.error) == (
        DocumentState.FAILED,
        "interpretation",
        "model unavailable",
    )

    retried = doc.apply(StartRun(retry=True))
    assert retried.changed
    assert retried.run == 2
    second = doc.now
    assert second.state is DocumentState.PROCESSING
    assert (second.error, second.failed_stage, second.text_key) == (None, None, None)
    assert (second.document_type, second.fields, second.confidence) == (None, None, None)

    # Late events of run 1 (a slow extractor, a duplicate interpreter) must not touch run 2.
    for stale in (
        extracted(run=1),
        interpreted(run=1),
        Failed(run=1, stage="extraction", reason="late"),
    ):
        ignored = doc.apply(stale)
        assert (ignored.changed, ignored.reason) == (False, Skip.STALE_RUN)
        assert ignored.outputs == ()
    assert doc.now == second

    assert doc.apply(extracted(run=2)).changed
    assert doc.apply(interpreted(run=2)).changed
    assert (doc.now.state, doc.now.run, doc.now.text_key) == (
        DocumentState.READY,
        2,
        "documents/d/text-2",
    )


def test_failure_during_extraction_and_a_process_command_on_a_failed_document(
    documents: DocumentStore,
) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    assert doc.apply(Failed(run=1, stage="extraction", reason="corrupt pdf")).changed
    assert doc.now.failed_stage == "extraction"
    # A process command restarts a failed document like a retry does.
    restarted = doc.apply(StartRun())
    assert (restarted.changed, restarted.run) == (True, 2)


@pytest.mark.parametrize(
    ("setup", "retry"),
    [
        ((), True),
        ((StartRun(),), False),
        ((StartRun(),), True),
        ((StartRun(), extracted()), False),
        ((StartRun(), extracted()), True),
    ],
)
def test_start_is_ignored_where_the_state_machine_refuses_it(
    documents: DocumentStore, setup: tuple[Transition, ...], retry: bool
) -> None:
    doc = Doc(documents)
    for transition in setup:
        assert doc.apply(transition).changed
    before = doc.now
    ignored = doc.apply(StartRun(retry=retry))
    assert (ignored.changed, ignored.reason, ignored.outputs) == (False, Skip.NOT_ALLOWED, ())
    assert ignored.document == before
    assert doc.now == before


def test_a_repeated_event_id_applies_once_and_returns_the_recorded_outputs(
    documents: DocumentStore, backend: StoreBackend
) -> None:
    doc = Doc(documents)
    steps: list[tuple[str, Transition]] = [
        ("cmd-process", StartRun()),
        ("evt-text", extracted()),
        ("evt-interpreted", interpreted()),
    ]
    for event_id, transition in steps:
        first = doc.apply(transition, event_id)
        assert first.changed
        after_first = doc.now
        for _ in range(2):
            again = doc.apply(transition, event_id)
            assert (again.changed, again.reason) == (False, Skip.DUPLICATE)
            # The outputs of the first application come back, for a crashed handler to resend.
            assert again.outputs == first.outputs
            assert again.document == after_first
        assert doc.now == after_first
    assert doc.now.run == 1
    recorded = backend.query(
        f'SELECT event_id FROM "{backend.prefix}processed_events" ORDER BY event_id'
    )
    assert recorded == [("cmd-process",), ("evt-interpreted",), ("evt-text",)]


def test_a_repeated_start_event_after_a_retry_does_not_start_a_third_run(
    documents: DocumentStore,
) -> None:
    doc = Doc(documents)
    doc.apply(StartRun(), "cmd-1")
    doc.apply(Failed(run=1, stage="extraction", reason="x"), "evt-1")
    assert doc.apply(StartRun(retry=True), "cmd-retry").run == 2
    doc.apply(Failed(run=2, stage="extraction", reason="y"), "evt-2")
    again = doc.apply(StartRun(retry=True), "cmd-retry")
    assert (again.changed, again.reason) == (False, Skip.DUPLICATE)
    assert (doc.now.state, doc.now.run) == (DocumentState.FAILED, 2)


def test_events_out_of_order_are_ignored_and_apply_once_their_turn_comes(
    documents: DocumentStore,
) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    early = doc.apply(interpreted(), "evt-interpreted")
    assert (early.changed, early.reason) == (False, Skip.NOT_ALLOWED)
    assert doc.now.state is DocumentState.PROCESSING
    assert doc.apply(extracted(), "evt-text").changed
    # An ignored event is not recorded, so the same message redelivered later still applies.
    late = doc.apply(interpreted(), "evt-interpreted")
    assert late.changed
    assert doc.now.state is DocumentState.READY


def test_an_event_of_a_run_not_yet_started_is_ignored(documents: DocumentStore) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    future = doc.apply(extracted(run=2))
    assert (future.changed, future.reason) == (False, Skip.UNKNOWN_RUN)
    uploaded = Doc(documents)
    assert uploaded.apply(extracted(run=1)).reason == Skip.UNKNOWN_RUN
    assert uploaded.now.state is DocumentState.UPLOADED


@pytest.mark.parametrize("final", sorted(FINAL_STATES))
def test_a_final_document_never_moves_backwards(
    documents: DocumentStore, final: DocumentState
) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    if final is DocumentState.FAILED:
        doc.apply(Failed(run=1, stage="extraction", reason="x"))
    else:
        doc.apply(extracted())
        doc.apply(interpreted(review=final is DocumentState.NEEDS_REVIEW))
    before = doc.now
    assert before.state is final
    backwards: list[Transition] = [
        extracted(),
        interpreted(),
        Failed(run=1, stage="interpretation", reason="late"),
    ]
    if final is not DocumentState.FAILED:
        backwards += [StartRun(), StartRun(retry=True)]
    for transition in backwards:
        result = doc.apply(transition)
        assert (result.changed, result.reason) == (False, Skip.NOT_ALLOWED), transition
    assert doc.now == before


def test_an_extracted_document_does_not_go_back_to_extracted(documents: DocumentStore) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    doc.apply(extracted())
    again = doc.apply(TextExtracted(run=1, text_key="documents/d/other"))
    assert again.reason == Skip.NOT_ALLOWED
    assert doc.now.text_key == "documents/d/text-1"


def test_another_tenant_never_sees_or_changes_a_document(documents: DocumentStore) -> None:
    doc = Doc(documents, ORG_A)
    doc.apply(StartRun(), "shared-event")
    before = doc.now

    assert documents.get(ORG_B, doc.id) is None
    assert documents.list(ORG_B) == []
    for transition in (StartRun(), StartRun(retry=True), extracted(), interpreted()):
        foreign = documents.apply(ORG_B, doc.id, transition, event_id="foreign", outputs=echo)
        assert foreign == Applied(changed=False, reason=Skip.UNKNOWN_DOCUMENT)
    assert doc.now == before

    # Ids are scoped by tenant too: the other tenant's document of the same id is its own, and
    # an event id already used by org-a is new to it.
    mine = documents.create(new_document(ORG_B, doc.id))
    assert mine.tenant == ORG_B and mine.state is DocumentState.UPLOADED
    assert documents.apply(ORG_B, doc.id, StartRun(), event_id="shared-event").changed
    assert documents.list(ORG_B) == [documents.get(ORG_B, doc.id)]
    assert [d.tenant for d in documents.list(ORG_A)] == [ORG_A]
    assert doc.now == before


def test_list_gives_the_newest_first_up_to_the_limit(documents: DocumentStore) -> None:
    created = [documents.create(new_document()) for _ in range(5)]
    listed = documents.list(ORG_A)
    assert [d.document_id for d in listed] == [d.document_id for d in reversed(created)]
    assert len(documents.list(ORG_A, limit=2)) == 2
    with pytest.raises(InvalidDocumentError):
        documents.list(ORG_A, limit=0)


def test_get_of_a_malformed_id_is_none(documents: DocumentStore) -> None:
    assert documents.get(ORG_A, "../../etc/passwd") is None
    assert documents.get(ORG_A, str(uuid.uuid4())) is None


def test_an_outputs_error_rolls_the_transition_back(documents: DocumentStore) -> None:
    doc = Doc(documents)
    before = doc.now

    def broken(_document: Document) -> Sequence[Output]:
        raise RuntimeError("cannot build outputs")

    with pytest.raises(RuntimeError):
        documents.apply(ORG_A, doc.id, StartRun(), event_id="e1", outputs=broken)
    assert doc.now == before
    # Nothing was recorded either: the same event applies once the problem is gone.
    assert doc.apply(StartRun(), "e1").changed


def test_unstorable_fields_are_refused_as_permanent(documents: DocumentStore) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    doc.apply(extracted())
    bad = Interpreted(
        run=1,
        document_type="invoice",
        confidence=0.9,
        fields={"total": float("nan")},
        needs_review=False,
    )
    with pytest.raises(InvalidDocumentError):
        doc.apply(bad)
    assert doc.now.state is DocumentState.EXTRACTED


def test_a_nul_in_a_failure_reason_is_stored_readably(documents: DocumentStore) -> None:
    doc = Doc(documents)
    doc.apply(StartRun())
    doc.apply(Failed(run=1, stage="extraction", reason="bad \x00 byte" + "x" * 9000))
    error = doc.now.error
    assert error is not None
    assert error.startswith("bad \ufffd byte")
    assert len(error) == 8000


def _race(store_for: list[DocumentStore], document: str, event_ids: list[str]) -> list[Applied]:
    start = threading.Barrier(len(event_ids))

    def apply(index: int) -> Applied:
        start.wait()
        return store_for[index].apply(
            ORG_A, document, StartRun(), event_id=event_ids[index], outputs=echo
        )

    with ThreadPoolExecutor(max_workers=len(event_ids)) as pool:
        return list(pool.map(apply, range(len(event_ids))))


@pytest.mark.parametrize("connections", ["shared", "one-per-thread"])
def test_eight_concurrent_applies_of_one_event_change_it_once(
    documents: DocumentStore, backend: StoreBackend, connections: str
) -> None:
    threads = 8
    doc = Doc(documents)
    stores = (
        [documents] * threads
        if connections == "shared"
        else [backend.open() for _ in range(threads)]
    )
    results = _race(stores, doc.id, ["same-event"] * threads)

    assert sum(r.changed for r in results) == 1
    assert sorted(str(r.reason) for r in results if not r.changed) == ["duplicate"] * 7
    assert [r.outputs for r in results] == [
        (Output(queue="out", body={"state": "processing", "run": 1}),)
    ] * threads
    assert (doc.now.state, doc.now.run) == (DocumentState.PROCESSING, 1)
    assert backend.query(f'SELECT count(*) FROM "{backend.prefix}processed_events"') == [(1,)]


def test_eight_concurrent_process_commands_start_one_run(
    documents: DocumentStore, backend: StoreBackend
) -> None:
    doc = Doc(documents)
    stores = [backend.open() for _ in range(8)]
    results = _race(stores, doc.id, [f"cmd-{n}" for n in range(8)])
    assert sum(r.changed for r in results) == 1
    assert {r.reason for r in results if not r.changed} == {Skip.NOT_ALLOWED}
    assert doc.now.run == 1


def test_documents_survive_close_and_reopen(
    documents: DocumentStore, backend: StoreBackend
) -> None:
    doc = Doc(documents)
    doc.apply(StartRun(), "e1")
    before = doc.now
    documents.close()
    reopened = backend.open()
    assert reopened.get(ORG_A, doc.id) == before
    assert reopened.apply(ORG_A, doc.id, StartRun(), event_id="e1").reason == Skip.DUPLICATE


def test_use_after_close_is_a_transient_store_error(documents: DocumentStore) -> None:
    documents.close()
    documents.close()
    with pytest.raises(DocumentStoreError, match="after close") as excinfo:
        documents.get(ORG_A, str(uuid.uuid4()))
    assert isinstance(excinfo.value, TransientError)
    with pytest.raises(DocumentStoreError, match="after close"):
        documents.create(new_document())


def test_prefixes_keep_stores_apart(documents: DocumentStore, backend: StoreBackend) -> None:
    documents.create(new_document())
    other = StoreBackend(backend.kind, backend.location)
    try:
        assert other.open().list(ORG_A) == []
    finally:
        other.cleanup()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("bad", ["", "1x", "bad-prefix", 'x"; DROP TABLE y; --', "a" * 41, "të"])
def test_invalid_prefix_is_refused(kind: str, bad: str, tmp_path: Path) -> None:
    path = tmp_path / "documents.sqlite3"
    with pytest.raises(ConfigError) as excinfo:
        if kind == "sqlite":
            SQLiteDocumentStore(path, prefix=bad)
        else:
            # Validation comes before connecting, so no server is needed to refuse the prefix.
            PostgresDocumentStore("postgresql://nobody@127.0.0.1:1/none", prefix=bad)
    assert repr(bad) in str(excinfo.value)
    assert not path.exists()


@pytest.mark.parametrize(
    "values",
    [
        {"document_id": "not-a-uuid"},
        {"document_id": "6F9619FF-8B86-D011-B42D-00CF4FC964FF"},
        {"file_name": ""},
        {"content_type": "text/plain\x00"},
        {"blob_key": "../../other-tenant/secret"},
    ],
)
def test_malformed_new_documents_are_refused(values: dict[str, str]) -> None:
    good = new_document()
    fields = {
        "tenant": good.tenant,
        "document_id": good.document_id,
        "file_name": good.file_name,
        "content_type": good.content_type,
        "blob_key": good.blob_key,
        **values,
    }
    with pytest.raises(InvalidDocumentError):
        NewDocument(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "build",
    [
        lambda: TextExtracted(run=0, text_key="documents/d/text"),
        lambda: TextExtracted(run=True, text_key="documents/d/text"),
        lambda: TextExtracted(run=1, text_key="/etc/passwd"),
        lambda: Interpreted(
            run=1, document_type="x", confidence=1.5, fields={}, needs_review=False
        ),
        lambda: Interpreted(run=1, document_type="", confidence=0.5, fields={}, needs_review=False),
        lambda: Failed(run=1, stage="", reason="x"),
    ],
)
def test_malformed_transitions_are_refused(build: object) -> None:
    with pytest.raises(InvalidDocumentError):
        build()  # type: ignore[operator]


def test_sqlite_url_forms_open_sqlite_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    forms = {
        "sqlite:///rel/a.sqlite3": tmp_path / "rel" / "a.sqlite3",
        f"sqlite:///{tmp_path}/abs/b.sqlite3": tmp_path / "abs" / "b.sqlite3",
        str(tmp_path / "plain" / "c.sqlite3"): tmp_path / "plain" / "c.sqlite3",
    }
    for url, expected in forms.items():
        store = open_document_store(url, prefix=new_prefix())
        try:
            assert isinstance(store, SQLiteDocumentStore)
            store.create(new_document())
        finally:
            store.close()
        assert expected.is_file(), url


@pytest.mark.parametrize("url", ["", "mysql://u:s3cret@db/x", "sqlite://host/x", "sqlite:///"])
def test_unusable_urls_are_refused_without_showing_a_password(url: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        open_document_store(url)
    assert "s3cret" not in str(excinfo.value)


@pytest.mark.postgres
def test_postgres_url_opens_a_postgres_store(postgres_dsn: str) -> None:
    backend = StoreBackend("postgres", postgres_dsn)
    try:
        store = open_document_store(postgres_dsn, prefix=backend.prefix)
        backend.opened.append(store)
        assert isinstance(store, PostgresDocumentStore)
        assert store.create(new_document()).state is DocumentState.UPLOADED
    finally:
        backend.cleanup()


@pytest.mark.postgres
def test_postgres_reconnects_after_losing_its_connection(postgres_dsn: str) -> None:
    application = "boost_docs_" + uuid.uuid4().hex[:12]
    backend = StoreBackend(
        "postgres", psycopg.conninfo.make_conninfo(postgres_dsn, application_name=application)
    )
    try:
        store = backend.open()
        doc = Doc(store)
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (application,),
            ).fetchall()
        assert killed == [(True,)]
        # The lost connection failed before anything was sent, so the apply is safely repeated.
        assert doc.apply(StartRun(), "e1").changed
        assert doc.now.state is DocumentState.PROCESSING
    finally:
        backend.cleanup()


def test_driver_errors_become_document_store_errors(
    documents: DocumentStore, backend: StoreBackend
) -> None:
    doc = Doc(documents)
    if backend.kind == "sqlite":
        connection = sqlite3.connect(backend.location)
        connection.execute(f'DROP TABLE "{backend.prefix}processed_events"')
        connection.commit()
        connection.close()
        driver_error: type[Exception] = sqlite3.Error
    else:
        with psycopg.connect(backend.location, autocommit=True) as admin:
            admin.execute(f'DROP TABLE "{backend.prefix}processed_events"')
        driver_error = psycopg.Error
    with pytest.raises(DocumentStoreError, match="apply") as excinfo:
        doc.apply(StartRun())
    assert isinstance(excinfo.value.__cause__, driver_error)
    # The failed transaction was rolled back: the document did not move.
    assert doc.now.state is DocumentState.UPLOADED


def test_stores_opened_at_once_on_a_new_prefix_all_work(backend: StoreBackend) -> None:
    # The manager and the IntegrationsServer start together and both create the schema.
    start = threading.Barrier(8)

    def open_one(_: int) -> DocumentStore:
        start.wait()
        return backend.open()

    with ThreadPoolExecutor(max_workers=8) as pool:
        stores = list(pool.map(open_one, range(8)))
    created = [store.create(new_document()) for store in stores]
    assert len(stores[0].list(ORG_A)) == len(created)
