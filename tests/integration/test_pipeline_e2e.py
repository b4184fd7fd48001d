"""The document pipeline end to end on the real broker: every service as its own process.

Two tenants through every service, each tenant's events carrying only its own tenant, and a
service killed mid-pipeline that finishes the documents once restarted.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from boost_tenancy import ProcessorRunner, TenantId, open_error_store
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from services.demo.stack import AUDIENCE, FINAL_STATES, ISSUER, Stack, environment
from services.notifier.processor import Notifier
from tests.broker_target import stomp_env
from tests.conftest import wait_until

pytestmark = [pytest.mark.broker, pytest.mark.slow]

SAMPLES = Path(__file__).resolve().parents[2] / "services" / "samples"
PDF, TEXT = "application/pdf", "text/plain"
PIPELINE = ("manager", "extractor", "professor", "thumbnailer")


@pytest.fixture
def tenants() -> tuple[str, str]:
    run = uuid.uuid4().hex[:8]
    return (f"e2e-a-{run}", f"e2e-b-{run}")


@pytest.fixture
def stack(
    tmp_path: Path, stomp_settings: StompSettings, tenants: tuple[str, str]
) -> Iterator[Stack]:
    env = environment()
    env.update(stomp_env(stomp_settings))
    running = Stack(tmp_path / "stack", tenants, env)
    try:
        yield running
    finally:
        running.stop()


class RecordingNotifier:
    """A Notifier run in this process whose sink records (tenant, queue, body)."""

    def __init__(self, settings: StompSettings, tenants: tuple[str, str], tmp: Path) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.runner = ProcessorRunner(
            Notifier(self._record),
            StompTransport(settings),
            tenants,
            error_store=open_error_store(str(tmp / "notifier-errors.sqlite3")),
        )

    def _record(self, tenant: TenantId, queue: str, body: dict[str, Any]) -> None:
        with self._lock:
            self.events.append((tenant.value, queue, body))

    def of(self, document: str) -> list[tuple[str, str, dict[str, Any]]]:
        with self._lock:
            return [e for e in self.events if e[2].get("documentUUID") == document]


def wait_final(stack: Stack, owned: dict[str, str], timeout: float = 120.0) -> dict[str, Any]:
    statuses: dict[str, Any] = {}

    def all_final() -> bool:
        for document, tenant in owned.items():
            statuses[document] = stack.status(tenant, document)
        return all(s.get("state") in FINAL_STATES for s in statuses.values())

    assert wait_until(all_final, timeout=timeout, interval=0.5), statuses
    return statuses


def test_two_tenants_through_every_service_each_hearing_only_of_its_own_documents(
    stack: Stack, stomp_settings: StompSettings, tenants: tuple[str, str], tmp_path: Path
) -> None:
    notifier = RecordingNotifier(stomp_settings, tenants, tmp_path)
    notifier.runner.start()
    try:
        stack.start(*PIPELINE, "integrations")
        owned: dict[str, str] = {}
        names: dict[str, str] = {}
        for tenant in tenants:
            for sample, kind in (("invoice.pdf", PDF), ("receipt.txt", TEXT), ("corrupt.pdf", PDF)):
                document = stack.upload(tenant, SAMPLES / sample, kind)
                owned[document], names[document] = tenant, sample
        statuses = wait_final(stack, owned)
        expected = {"invoice.pdf": "invoice", "receipt.txt": "receipt"}
        for document, status in statuses.items():
            if names[document] == "corrupt.pdf":
                assert (status["state"], status["failedStage"]) == ("failed", "extraction")
            else:
                assert status["state"] == "ready", status
                assert status["documentType"] == expected[names[document]]
        invoices = [d for d in owned if names[d] == "invoice.pdf"]
        for document in invoices:
            token = stack.token(owned[document])
            assert statuses[document]["fields"]["invoiceNumber"] == "INV-2026-0042"
            status, text = stack.call("GET", f"/documents/{document}/text", token)
            assert status == 200 and b"INV-2026-0042" in text
            assert wait_until(
                lambda d=document, t=token: (
                    stack.call("GET", f"/documents/{d}/thumbnail", t)[0] == 200
                ),
                timeout=30,
            )
        assert wait_until(lambda: all(len(notifier.of(d)) >= 2 for d in owned), timeout=30)
    finally:
        notifier.runner.stop(grace_s=5)
    for document, owner in owned.items():
        events = notifier.of(document)
        assert {tenant for tenant, _, _ in events} == {owner}, "an event reached another tenant"
        assert {body["tenantUUID"] for _, _, body in events} == {owner}
        queues = {queue for _, queue, _ in events}
        final = "evt.document.failed" if names[document] == "corrupt.pdf" else "evt.document.ready"
        assert {"evt.document.processing.started", final} <= queues


def test_a_service_killed_mid_pipeline_finishes_its_documents_after_a_restart(
    stack: Stack, tenants: tuple[str, str]
) -> None:
    """The manager dies (SIGKILL) while documents are mid-pipeline; events wait on the broker."""
    tenant = tenants[0]
    stack.start("manager", "professor", "integrations")
    documents = [stack.upload(tenant, SAMPLES / "invoice.pdf", PDF) for _ in range(3)]
    assert wait_until(
        lambda: all(stack.status(tenant, d).get("state") == "processing" for d in documents),
        timeout=60,
    ), "the manager should have started every document (the extractor is not running yet)"
    stack.kill("manager")
    stack.start("extractor")  # extracts now; its events wait for the dead manager
    time.sleep(3)
    assert {stack.status(tenant, d).get("state") for d in documents} == {"processing"}
    stack.start("manager")
    statuses = wait_final(stack, dict.fromkeys(documents, tenant))
    assert {s["state"] for s in statuses.values()} == {"ready"}
    assert {s["run"] for s in statuses.values()} == {1}, "finished in the first run, no retry"


def test_http_attacks_on_the_running_server_are_refused(
    stack: Stack, tenants: tuple[str, str]
) -> None:
    """The real IntegrationsServer process, against a real broker: forged tokens and tenant
    confusion get nowhere, and a tenant named in the request is ignored."""
    owner, intruder = tenants
    stack.start("integrations")
    document = stack.upload(owner, SAMPLES / "receipt.txt", TEXT)
    now = int(time.time())
    claims = {"tenantId": owner, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 60}
    header = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    forged = {
        "alg none": f"{header}.{payload}.",
        "wrong key": jwt.encode(claims, "k" * 48, algorithm="HS256"),
        "expired": jwt.encode({**claims, "exp": now - 3600}, stack.secret, algorithm="HS256"),
        "wrong audience": jwt.encode({**claims, "aud": "other"}, stack.secret, algorithm="HS256"),
        "no tenant": jwt.encode(
            {k: v for k, v in claims.items() if k != "tenantId"}, stack.secret, algorithm="HS256"
        ),
    }
    for name, token in forged.items():
        status, body = stack.call("GET", f"/documents/{document}", token)
        assert status == 401, (name, body)
        assert token not in stack.log_tail("integrations", 200_000)
    status, _ = stack.call("GET", f"/documents/{document}", stack.token(intruder))
    assert status == 404
    # A tenant named in the query, a header and the file name is ignored: the token decides.
    status, body = stack.call(
        "POST",
        f"/documents?tenantUUID={owner}",
        stack.token(intruder),
        b"TOTAL 1.00 EUR",
        {"Content-Type": "text/plain", "X-File-Name": "r.txt", "tenantUUID": owner},
    )
    assert status == 201
    assert stack.status(intruder, body["documentUUID"]).get("fileName") == "r.txt"
    assert stack.call("GET", f"/documents/{body['documentUUID']}", stack.token(owner))[0] == 404
