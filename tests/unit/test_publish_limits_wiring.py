"""Publishing limits where the toolkit sends, on the in-memory broker: TenantProducer (send, batch,
admit), a handler's ctx.publish inside a ProcessorRunner (deferred over the rate, dead-lettered
over the size), accounting through FairnessWiring, run_processor's wiring from the settings, and
the IntegrationsServer's 429 / 413 answers with nothing stored."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from flask.testing import FlaskClient
from structlog.testing import capture_logs
from werkzeug.test import TestResponse

import boost_tenancy.application.run as app_module
from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    MessageTooLargeError,
    ProcessorRunner,
    PublishGuard,
    PublishLimits,
    PublishRateExceededError,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.header_values import derived_id
from boost_tenancy.messages import MESSAGE_ID_PROPERTY, WireMessage
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.auth import TenantAuthenticator
from services.common.blobs import LocalBlobStore
from services.common.contract import CMD_DOCUMENT_PROCESS, CMD_THUMBNAIL_GENERATE
from services.common.documents import DocumentStore, open_document_store
from services.integrations import create_app
from tests.conftest import ManualClock as Clock
from tests.conftest import unique_queue, wait_until
from tests.unit.services.tokens import hs256_settings, hs_token

A = TenantId("org-A")
B = TenantId("org-B")
SHARED = Routing(Topology.SHARED)
"""One queue per name: these tests read the queues by the names they publish to."""
ONE_ATTEMPT = RetryPolicy(max_attempts=1, base_delay_ms=10, max_delay_ms=10, jitter=0.0)
"""A retry would dead-letter at once: a deferral counts no attempt and so does not."""


def clocked_guard(
    default: PublishLimits, *, advance_on_refusal_s: float = 0.0
) -> tuple[PublishGuard, Clock, list[tuple[TenantId, str, str]]]:
    """A guard on a frozen clock; each refusal is recorded and may move the clock on."""
    clock = Clock()
    told: list[tuple[TenantId, str, str]] = []

    def on_refused(tenant: TenantId, queue: str, reason: str) -> None:
        told.append((tenant, queue, reason))
        clock.advance(advance_on_refusal_s)

    guard = PublishGuard(default, clock=clock, on_refused=on_refused)
    return guard, clock, told


ONE_AT_A_TIME = PublishLimits(messages_per_s=1, burst_s=1)
"""Capacity 1: on a frozen clock the second publish of a tenant is refused."""


def bodies(broker: InMemoryBroker, queue: str) -> list[dict[str, Any]]:
    return [json.loads(str(m.body)) for m in broker.messages(queue)]


# -- TenantProducer -------------------------------------------------------------------------------
def test_a_refused_send_puts_nothing_on_the_queue(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    guard, clock, _ = clocked_guard(
        PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=200)
    )
    producer = TenantProducer(transport, routing=SHARED, guard=guard)
    producer.send(queue, A, {"n": 1})
    with pytest.raises(PublishRateExceededError) as refused:
        producer.send(queue, A, {"n": 2})
    assert refused.value.retry_after_s == pytest.approx(1.0)
    with pytest.raises(MessageTooLargeError):
        producer.send(queue, B, {"big": "x" * 300})
    producer.send(queue, B, {"n": 3})
    assert [(b["n"], b["tenantUUID"]) for b in bodies(broker, queue)] == [
        (1, "org-A"),
        (3, "org-B"),
    ]
    clock.advance(1.0)
    producer.send(queue, A, {"n": 4})
    assert [b["n"] for b in bodies(broker, queue)] == [1, 3, 4]
    assert guard.refused() == {(A, "rate"): 1, (B, "size"): 1}


def test_the_guard_sees_the_logical_queue_not_the_routed_one(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    guard, _, told = clocked_guard(PublishLimits())
    guard.set_limits(ONE_AT_A_TIME, queue=queue)
    producer = TenantProducer(transport, guard=guard)  # routed: tenant.<tenant>.<queue>
    producer.send(queue, A, {"n": 1})
    with pytest.raises(PublishRateExceededError):
        producer.send(queue, A, {"n": 2})
    assert told == [(A, queue, "rate")]
    assert broker.depth(f"tenant.org-A.{queue}") == 1


def test_a_batch_keeps_what_was_admitted_when_the_refusal_is_caught(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    guard, _, _ = clocked_guard(ONE_AT_A_TIME)
    producer = TenantProducer(transport, routing=SHARED, guard=guard)
    with producer.batch() as batch:
        batch.send(queue, A, {"n": 1})
        with pytest.raises(PublishRateExceededError):
            batch.send(queue, A, {"n": 2})
        batch.send(queue, B, {"n": 3})
        assert broker.depth(queue) == 0, "nothing is sent before the block ends"
    assert [b["n"] for b in bodies(broker, queue)] == [1, 3]


def test_a_batch_sends_nothing_when_the_refusal_propagates(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    guard, _, _ = clocked_guard(ONE_AT_A_TIME)
    producer = TenantProducer(transport, routing=SHARED, guard=guard)
    with pytest.raises(PublishRateExceededError), producer.batch() as batch:
        batch.send(queue, A, {"n": 1})
        batch.send(queue, A, {"n": 2})
    assert broker.depth(queue) == 0


def test_admit_refuses_before_anything_is_sent(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    guard, clock, _ = clocked_guard(ONE_AT_A_TIME)
    producer = TenantProducer(transport, routing=SHARED, guard=guard)
    admitted = producer.admit(queue, A, {"n": 1}, correlation_id="c-1")
    assert broker.depth(queue) == 0, "admit sends nothing"
    with pytest.raises(PublishRateExceededError):
        producer.admit(queue, A, {"n": 2})
    sent = producer.send_admitted(admitted)
    [wire] = broker.messages(queue)
    assert wire.properties[MESSAGE_ID_PROPERTY] == sent.message_id
    assert wire.correlation_id == "c-1"
    clock.advance(1.0)
    producer.send_admitted(producer.admit(queue, A, {"n": 3}))
    assert [b["n"] for b in bodies(broker, queue)] == [1, 3]


# -- HandlerContext.publish -----------------------------------------------------------------------
def test_a_refused_ctx_publish_queues_nothing_and_keeps_the_derived_index() -> None:
    guard, _, _ = clocked_guard(PublishLimits(max_message_bytes=300))
    ctx = HandlerContext(
        tenant=A,
        queue="cmd",
        message_id="m-1",
        correlation_id="c-1",
        attempt=1,
        log=structlog.get_logger("test"),
        guard=guard,
    )
    with pytest.raises(MessageTooLargeError):
        ctx.publish("out", {"big": "x" * 400})
    assert ctx.outputs == ()
    first = ctx.publish("out", {"n": 1})
    assert first == derived_id("m-1", "out", 0), "the refused publish took no index"
    assert len(ctx.outputs) == 1


# -- a handler's publish inside a runner ----------------------------------------------------------
class Publisher(TenantProcessor):
    """Publishes one output per input, of size bytes when asked; records each attempt."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.out = queue + ".out"
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.calls.append(ctx.attempt)
        ctx.publish(self.out, {"pad": "x" * int(message.data.get("size", 0))})


@pytest.fixture
def stop_runners() -> Iterator[list[ProcessorRunner]]:
    runners: list[ProcessorRunner] = []
    yield runners
    for runner in runners:
        assert runner.stop(grace_s=5)


def start_runner(
    runners: list[ProcessorRunner],
    broker: InMemoryBroker,
    store: ErrorStore,
    processor: TenantProcessor,
    *,
    guard: PublishGuard,
    observers: Any = (),
) -> None:
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [A],
        error_store=store,
        settings=RunnerSettings(
            workers=1, prefetch=5, dispatch=DispatchSettings(retry=ONE_ATTEMPT)
        ),
        routing=SHARED,
        observers=observers,
        publish_guard=guard,
    )
    runners.append(runner)
    runner.start()


def test_a_publish_over_the_rate_defers_the_input_and_sends_its_output_once(
    broker: InMemoryBroker,
    transport: InMemoryTransport,
    store: ErrorStore,
    stop_runners: list[ProcessorRunner],
) -> None:
    queue = unique_queue("cmd")
    processor = Publisher(queue)
    # Capacity 1, 10 ms per token; the clock moves only when a publish is refused.
    guard, _, told = clocked_guard(
        PublishLimits(messages_per_s=100, burst_s=0.01), advance_on_refusal_s=1.0
    )
    guard.check(A, processor.out, [WireMessage(body="x", properties={})])  # the bucket is empty
    wiring = FairnessWiring.build(None, workers=1)
    start_runner(stop_runners, broker, store, processor, guard=guard, observers=wiring.observers)
    sent = TenantProducer(transport, routing=SHARED).send(queue, A, {"n": 1})
    assert wait_until(lambda: broker.depth(processor.out) == 1, timeout=10)
    assert wait_until(lambda: wiring.accounting.snapshot(A)["processed"] == 1, timeout=5)
    assert told == [(A, processor.out, "rate")]
    assert processor.calls == [1, 1], "refused once, handled again with no attempt counted"
    [output] = broker.messages(processor.out)
    assert output.properties[MESSAGE_ID_PROPERTY] == derived_id(sent.message_id, processor.out, 0)
    assert broker.messages(dead_letter_queue(queue)) == []
    snapshot = wiring.accounting.snapshot(A)
    assert (snapshot["deferred"], snapshot["retried"], snapshot["dead_lettered"]) == (1, 0, 0)
    assert broker.depth(queue) == 0


def test_a_publish_over_the_size_cap_dead_letters_the_input_and_sends_nothing(
    broker: InMemoryBroker,
    transport: InMemoryTransport,
    store: ErrorStore,
    stop_runners: list[ProcessorRunner],
) -> None:
    queue = unique_queue("cmd")
    processor = Publisher(queue)
    wiring = FairnessWiring.build(None, workers=1)
    guard = wiring.publish_guard(PublishLimits(max_message_bytes=200))
    start_runner(stop_runners, broker, store, processor, guard=guard, observers=wiring.observers)
    producer = TenantProducer(transport, routing=SHARED)
    producer.send(queue, A, {"n": 1, "size": 10})
    producer.send(queue, A, {"n": 2, "size": 500})
    dlq = dead_letter_queue(queue)
    assert wait_until(lambda: broker.depth(dlq) == 1 and broker.depth(processor.out) == 1)
    assert processor.calls == [1, 1], "dead-lettered at once, never retried"
    [dead] = broker.messages(dlq)
    assert json.loads(str(dead.body))["n"] == 2
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert [len(b["pad"]) for b in bodies(broker, processor.out)] == [10]
    assert wait_until(lambda: wiring.accounting.snapshot(A)["dead_lettered"] == 1, timeout=5)
    snapshot = wiring.accounting.snapshot(A)
    assert (snapshot["publish_refused_size"], snapshot["publish_refused_rate"]) == (1, 0)
    assert snapshot["processed"] == 1
    failures = store.failures(tenant=A)
    assert [f.error_type.rsplit(".", 1)[-1] for f in failures] == ["MessageTooLargeError"]


def test_wiring_accounts_every_refusal_by_tenant_and_reason() -> None:
    wiring = FairnessWiring.build(None, workers=1)
    guard = wiring.publish_guard(PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=8))
    small = [WireMessage(body="x", properties={})]
    guard.check(A, "out", small)
    for _ in range(2):
        with pytest.raises(PublishRateExceededError):  # a full token is a second away
            guard.check(A, "out", small)
    with pytest.raises(MessageTooLargeError):
        guard.check(B, "out", [WireMessage(body="x" * 9, properties={})])
    accounting = wiring.accounting
    assert accounting.snapshot(A)["publish_refused_rate"] == 2
    assert accounting.snapshot(A)["publish_refused_size"] == 0
    assert accounting.snapshot(B)["publish_refused_size"] == 1
    text = accounting.prometheus(tenant_label=True)
    assert 'boost_tenancy_publish_refused_total{tenant="org-A",reason="rate"} 2' in text
    assert 'boost_tenancy_publish_refused_total{tenant="org-B",reason="size"} 1' in text
    summed = accounting.prometheus()
    assert 'boost_tenancy_publish_refused_total{reason="rate"} 2' in summed
    assert "# TYPE boost_tenancy_publish_refused_total counter" in summed


def test_run_processor_hands_the_settings_limits_to_the_runner(
    monkeypatch: pytest.MonkeyPatch, store: ErrorStore
) -> None:
    seen: dict[str, Any] = {}

    class FakeRunner:
        health = None  # what the metrics server would watch; these settings serve none

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.update(kwargs)

        def run(self) -> int:
            return 0

    monkeypatch.setattr(app_module, "ProcessorRunner", FakeRunner)
    settings = AppSettings.from_env(
        {"BOOST_PUBLISH_RATE_PER_S": "3", "BOOST_MAX_MESSAGE_BYTES": "64", "BOOST_FAIRNESS": "off"}
    )
    assert app_module.run_processor(Publisher("cmd"), [A], settings, store=store) == 0
    guard = seen["publish_guard"]
    assert isinstance(guard, PublishGuard)
    assert guard.limits_for(A) == PublishLimits(messages_per_s=3, max_message_bytes=64)
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "out", [WireMessage(body="x" * 65, properties={})])


# -- the IntegrationsServer -----------------------------------------------------------------------
@dataclass
class Server:
    client: FlaskClient
    broker: InMemoryBroker
    transport: InMemoryTransport
    blob_root: Path
    store: DocumentStore
    guard: PublishGuard
    clock: Clock

    def call(self, method: str, path: str, tenant: str = "org-a", **kw: Any) -> TestResponse:
        headers = {"Authorization": f"Bearer {hs_token(tenant)}", **kw.pop("headers", {})}
        return self.client.open(path, method=method, headers=headers, **kw)

    def upload_text(self, tenant: str = "org-a") -> TestResponse:
        return self.call(
            "POST", "/documents", tenant, data=b"some text", headers={"X-File-Name": "a.txt"}
        )

    def documents(self, tenant: str = "org-a") -> list[dict[str, Any]]:
        response = self.call("GET", "/documents", tenant)
        assert response.status_code == 200
        return list(response.get_json()["documents"])

    def blob_files(self) -> list[Path]:
        return [p for p in self.blob_root.rglob("*") if p.is_file()]


def build_server(tmp_path: Path, broker: InMemoryBroker, limits: PublishLimits) -> Server:
    transport = InMemoryTransport(broker)
    transport.connect()
    blob_root = tmp_path / "blobs"
    blob_root.mkdir(parents=True)
    store = open_document_store(f"sqlite:///{tmp_path / 'documents.sqlite3'}")
    guard, clock, _ = clocked_guard(limits)
    app = create_app(
        authenticator=TenantAuthenticator(hs256_settings()),
        documents=store,
        blobs=LocalBlobStore(blob_root),
        producer=TenantProducer(transport, routing=SHARED, guard=guard),
    )
    return Server(app.test_client(), broker, transport, blob_root, store, guard, clock)


@pytest.fixture
def servers(tmp_path: Path, broker: InMemoryBroker) -> Iterator[Any]:
    built: list[Server] = []

    def make(limits: PublishLimits) -> Server:
        server = build_server(tmp_path / f"s{len(built)}", broker, limits)
        built.append(server)
        return server

    yield make
    for server in built:
        server.store.close()
        server.transport.close()


def drain_tenant(guard: PublishGuard, tenant: str) -> None:
    """Take every token of tenant's bucket for the process command."""
    while True:
        try:
            guard.check(
                TenantId(tenant), CMD_DOCUMENT_PROCESS, [WireMessage(body="x", properties={})]
            )
        except PublishRateExceededError:
            return


def test_an_upload_over_the_rate_is_429_with_retry_after_and_stores_nothing(
    servers: Any,
) -> None:
    server: Server = servers(PublishLimits(messages_per_s=0.4, burst_s=5))  # capacity 2
    drain_tenant(server.guard, "org-a")
    with capture_logs() as logs:
        response = server.upload_text()
    assert response.status_code == 429, response.get_json()
    assert response.get_json()["error"] == "rate_limited"
    retry_after = response.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    assert int(retry_after) == math.ceil(1 / 0.4)  # one token at 0.4/s: 2.5 s, rounded up
    assert "publish_refused" in [e["event"] for e in logs]
    assert server.documents() == []
    assert server.blob_files() == []
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 0
    # Another tenant is not held back; the same upload passes once the tenant's bucket refills.
    assert server.upload_text("org-b").status_code == 201
    server.clock.advance(int(retry_after))
    assert server.upload_text().status_code == 201
    assert len(server.documents()) == 1
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 2


def test_retry_after_is_at_least_one_second(servers: Any) -> None:
    server: Server = servers(PublishLimits(messages_per_s=100, burst_s=0.01))  # 10 ms a token
    drain_tenant(server.guard, "org-a")
    response = server.upload_text()
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"


def test_an_image_upload_is_refused_whole_when_its_thumbnail_command_is_over_the_limit(
    servers: Any,
) -> None:
    # Every command of an upload is admitted before anything is stored: a thumbnail command
    # over its queue's limit refuses the upload instead of losing the thumbnail after a 201.
    server: Server = servers(PublishLimits())
    server.guard.set_limits(
        PublishLimits(messages_per_s=1, burst_s=1), queue=CMD_THUMBNAIL_GENERATE
    )
    server.guard.check(
        TenantId("org-a"), CMD_THUMBNAIL_GENERATE, [WireMessage(body="x", properties={})]
    )
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    response = server.call("POST", "/documents", data=png, headers={"X-File-Name": "p.png"})
    assert response.status_code == 429, response.get_json()
    assert server.documents() == []
    assert server.blob_files() == []
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 0
    server.clock.advance(1)
    response = server.call("POST", "/documents", data=png, headers={"X-File-Name": "p.png"})
    assert response.status_code == 201, response.get_json()
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 1
    assert server.broker.depth(CMD_THUMBNAIL_GENERATE) == 1


def test_an_upload_whose_command_is_too_large_is_413_and_stores_nothing(servers: Any) -> None:
    server: Server = servers(PublishLimits(max_message_bytes=16))
    response = server.upload_text()
    assert response.status_code == 413
    body = response.get_json()
    assert body["error"] == "message_too_large"
    assert "Retry-After" not in response.headers
    assert server.documents() == []
    assert server.blob_files() == []
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 0
    assert server.guard.refused() == {(TenantId("org-a"), "size"): 1}


def test_a_retry_over_the_rate_is_429_and_passes_later(servers: Any) -> None:
    server: Server = servers(PublishLimits(messages_per_s=1, burst_s=2))  # capacity 2
    server.transport.close()
    failed = server.upload_text()
    assert failed.status_code == 503  # admitted, stored, not sent: the document waits
    document = server.documents()[0]["documentUUID"]
    server.transport.connect()
    drain_tenant(server.guard, "org-a")
    response = server.call("POST", f"/documents/{document}/retry")
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 0
    server.clock.advance(float(response.headers["Retry-After"]))
    assert server.call("POST", f"/documents/{document}/retry").status_code == 202
    assert server.broker.depth(CMD_DOCUMENT_PROCESS) == 1


def test_openapi_lists_429_for_upload_and_retry(servers: Any) -> None:
    server: Server = servers(PublishLimits())
    document = server.call("GET", "/openapi.json").get_json()
    paths = document["paths"]
    upload = paths["/documents"]["post"]["responses"]
    assert upload["429"] == {"$ref": "#/components/responses/RateLimited"}
    assert "413" in upload
    retry = paths["/documents/{document_id}/retry"]["post"]["responses"]
    assert retry["429"] == {"$ref": "#/components/responses/RateLimited"}
    limited = document["components"]["responses"]["RateLimited"]
    assert limited["headers"]["Retry-After"]["schema"] == {"type": "integer", "minimum": 1}
