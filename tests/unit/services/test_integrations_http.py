"""The IntegrationsServer over HTTP: the token alone names the tenant, and tenants cannot meet.

Runs the Flask app with the in-memory broker, a temporary blob store and the SQLite document store.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from structlog.testing import capture_logs
from werkzeug.test import TestResponse

from boost_tenancy import TenantId, TenantProducer, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.auth import JwtSettings, TenantAuthenticator
from services.common.blobs import LocalBlobStore, document_key
from services.common.contract import (
    CMD_DOCUMENT_PROCESS,
    CMD_DOCUMENT_RETRY,
    CMD_THUMBNAIL_GENERATE,
)
from services.common.documents import (
    DocumentStore,
    Failed,
    Interpreted,
    StartRun,
    TextExtracted,
    open_document_store,
)
from services.integrations import create_app
from tests.unit.services.tokens import (
    AUDIENCE,
    ISSUER,
    MISSING,
    KeyPair,
    hmac_token_with_key,
    hs256_settings,
    hs_token,
    rsa_pair,
    signed_token,
    token_parts,
    unsigned_token,
)

ORG_A = TenantId("org-a")
ORG_B = TenantId("org-b")
PDF = b"%PDF-1.4\n% a tiny test document\n%%EOF\n"
SOME_DOCUMENT = "0b9d5c52-6f1e-4c1a-9a53-3c8f7e2b1d40"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@dataclass
class Server:
    """The app under test and everything behind it."""

    app: Flask
    client: FlaskClient
    broker: InMemoryBroker
    transport: InMemoryTransport
    blobs: LocalBlobStore
    blob_root: Path
    store: DocumentStore

    def call(
        self,
        method: str,
        path: str,
        tenant: str | None = "org-a",
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        **kw: Any,
    ) -> TestResponse:
        sent = dict(headers or {})
        if token is None and tenant is not None:
            token = hs_token(tenant)
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return self.client.open(path, method=method, headers=sent, **kw)

    def upload_pdf(self, tenant: str = "org-a", name: str = "invoice.pdf") -> str:
        response = self.call(
            "POST",
            "/documents",
            tenant,
            data={"file": (io.BytesIO(PDF), name, "application/pdf")},
            content_type="multipart/form-data",
        )
        assert response.status_code == 201, response.get_json()
        return str(response.get_json()["documentUUID"])

    def sent(self, queue: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """The properties and JSON body of every message on queue."""
        return [(dict(m.properties), json.loads(m.body)) for m in self.broker.messages(queue)]


def build_server(
    tmp_path: Path,
    broker: InMemoryBroker,
    *,
    settings: JwtSettings | None = None,
    max_upload_bytes: int = 20 * 1024 * 1024,
    store: DocumentStore | None = None,
    transport: InMemoryTransport | None = None,
) -> Server:
    transport = transport or InMemoryTransport(broker)
    transport.connect()
    blob_root = tmp_path / "blobs"
    blob_root.mkdir(exist_ok=True)
    blobs = LocalBlobStore(blob_root)
    store = store or open_document_store(f"sqlite:///{tmp_path / 'documents.sqlite3'}")
    app = create_app(
        authenticator=TenantAuthenticator(settings or hs256_settings()),
        documents=store,
        blobs=blobs,
        producer=TenantProducer(transport, routing=Routing(Topology.SHARED)),
        max_upload_bytes=max_upload_bytes,
    )
    return Server(app, app.test_client(), broker, transport, blobs, blob_root, store)


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    memory = InMemoryBroker()
    yield memory
    memory.close()


@pytest.fixture
def server(tmp_path: Path, broker: InMemoryBroker) -> Iterator[Server]:
    built = build_server(tmp_path, broker)
    yield built
    built.store.close()


@pytest.fixture(scope="module")
def rsa_keys() -> KeyPair:
    return rsa_pair()


# -- authentication -------------------------------------------------------------------------------
def _attacks(rsa_keys: KeyPair) -> dict[str, tuple[str, str]]:
    return {
        "alg none": (unsigned_token("none"), "algorithm not allowed"),
        "wrong secret": (
            hs_token(secret="another-secret-of-sufficient-length-000"),
            "invalid signature",
        ),
        "algorithm outside the list": (
            hs_token(alg="HS512", secret="k" * 64),
            "algorithm not allowed",
        ),
        "expired": (hs_token(exp=1_000_000_000), "expired"),
        "missing exp": (hs_token(exp=MISSING), "missing claim"),
        "missing tenant claim": (hs_token(MISSING), "missing claim"),
        "injected tenant claim": (hs_token("x' OR '1'='1"), "invalid tenant claim"),
        "wrong audience": (hs_token(aud="another-api"), "wrong audience"),
        "wrong issuer": (hs_token(iss="https://evil.example.test"), "wrong issuer"),
        "malformed": ("not-a-jwt", "malformed token"),
        "rs256 instead of hs256": (signed_token(rsa_keys, "RS256"), "algorithm not allowed"),
    }


ATTACKS = [
    "alg none",
    "wrong secret",
    "algorithm outside the list",
    "expired",
    "missing exp",
    "missing tenant claim",
    "injected tenant claim",
    "wrong audience",
    "wrong issuer",
    "malformed",
    "rs256 instead of hs256",
]


def assert_refused(response: TestResponse, reason: str) -> None:
    assert response.status_code == 401
    assert response.get_json() == {"error": "unauthorized", "reason": reason}
    assert response.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def assert_not_logged(logs: list[dict[str, Any]], token: str) -> None:
    text = repr(logs)
    for part in token_parts(token):
        assert part not in text


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/documents"), ("POST", "/documents"), ("GET", f"/documents/{SOME_DOCUMENT}")],
)
def test_every_attack_is_refused_with_its_reason_and_the_token_never_logged(
    server: Server, rsa_keys: KeyPair, attack: str, method: str, path: str
) -> None:
    token, reason = _attacks(rsa_keys)[attack]
    with capture_logs() as logs:
        response = server.call(method, path, token=token, data=PDF)
    assert_refused(response, reason)
    failures = [e for e in logs if e["event"] == "authentication_failed"]
    assert len(failures) == 1
    assert failures[0]["reason"] == reason
    assert failures[0]["path"] == path
    assert failures[0]["remote_addr"] == "127.0.0.1"
    assert_not_logged(logs, token)
    assert server.broker.messages(CMD_DOCUMENT_PROCESS) == []


def test_key_confusion_against_an_rs256_server_is_refused(
    tmp_path: Path, broker: InMemoryBroker, rsa_keys: KeyPair
) -> None:
    settings = JwtSettings(
        algorithms=("RS256",), audience=AUDIENCE, issuer=ISSUER, public_key=rsa_keys.public_pem
    )
    rs = build_server(tmp_path, broker, settings=settings)
    forged = hmac_token_with_key(rsa_keys.public_pem.encode())
    with capture_logs() as logs:
        response = rs.call("GET", "/documents", token=forged)
    assert_refused(response, "algorithm not allowed")
    assert_not_logged(logs, forged)
    assert rs.call("GET", "/documents", token=signed_token(rsa_keys, "RS256")).status_code == 200


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing token"),
        ("", "missing token"),
        ("Basic b3JnLWE6c2VjcmV0", "missing token"),
        ("Bearer", "missing token"),
        ("Bearer ", "missing token"),
        ("Bearer two tokens", "malformed token"),
    ],
)
def test_a_missing_or_odd_authorization_header_is_refused(
    server: Server, header: str | None, reason: str
) -> None:
    headers = {} if header is None else {"Authorization": header}
    with capture_logs() as logs:
        response = server.call("GET", "/documents", None, headers=headers)
    assert_refused(response, reason)
    assert [e["reason"] for e in logs if e["event"] == "authentication_failed"] == [reason]


def test_the_bearer_scheme_is_case_insensitive(server: Server) -> None:
    response = server.call(
        "GET", "/documents", None, headers={"Authorization": f"bearer {hs_token()}"}
    )
    assert response.status_code == 200


def test_unknown_routes_need_a_token_too(server: Server) -> None:
    assert_refused(server.call("GET", "/admin", None), "missing token")
    response = server.call("GET", "/admin")
    assert response.status_code == 404
    assert response.get_json()["error"] == "not_found"


def test_healthz_needs_no_token(server: Server) -> None:
    response = server.call("GET", "/healthz", None)
    assert (response.status_code, response.get_json()) == (200, {"status": "ok"})


# -- tenant confusion -----------------------------------------------------------------------------
def test_a_tenant_named_in_body_query_or_headers_is_ignored(server: Server) -> None:
    response = server.call(
        "POST",
        "/documents?tenantUUID=org-b&organizationId=org-b&tenant=org-b",
        "org-a",
        headers={"X-Tenant-UUID": "org-b", "tenantUUID": "org-b", "organizationId": "org-b"},
        data={
            "file": (io.BytesIO(PDF), "invoice.pdf", "application/pdf"),
            "tenantUUID": "org-b",
            "organizationId": "org-b",
            "tenant": "org-b",
        },
        content_type="multipart/form-data",
    )
    assert response.status_code == 201
    document = response.get_json()["documentUUID"]
    key = document_key(document, "original")
    assert server.blobs.get(ORG_A, key) == PDF
    assert not server.blobs.exists(ORG_B, key)
    assert not (server.blob_root / "org-b").exists()
    assert server.store.get(ORG_A, document) is not None
    assert server.store.get(ORG_B, document) is None
    for queue in (CMD_DOCUMENT_PROCESS, CMD_THUMBNAIL_GENERATE):
        [(properties, body)] = server.sent(queue)
        assert properties["tenantUUID"] == "org-a"
        assert body["tenantUUID"] == "org-a"
        assert "organizationId" not in body
    assert server.call("GET", f"/documents/{document}", "org-b").status_code == 404


def test_a_raw_upload_naming_another_tenant_in_json_is_stored_as_bytes(server: Server) -> None:
    payload = json.dumps({"tenantUUID": "org-b", "organizationId": "org-b"}).encode()
    response = server.call(
        "POST",
        "/documents",
        "org-a",
        data=payload,
        headers={"Content-Type": "application/json", "X-File-Name": "claims.json"},
    )
    assert response.status_code == 201
    [(properties, body)] = server.sent(CMD_DOCUMENT_PROCESS)
    assert properties["tenantUUID"] == body["tenantUUID"] == "org-a"
    assert server.blobs.get(ORG_A, body["blobKey"]) == payload


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("GET", ""),
        ("GET", "/text"),
        ("GET", "/interpretation"),
        ("GET", "/thumbnail"),
        ("POST", "/retry"),
    ],
)
def test_another_tenants_document_is_indistinguishable_from_an_unknown_one(
    server: Server, method: str, suffix: str
) -> None:
    document = server.upload_pdf("org-a")
    _finish(server, ORG_A, document, failed=(suffix == "/retry"))
    assert server.call(method, f"/documents/{document}{suffix}", "org-a").status_code in (200, 202)
    foreign = server.call(method, f"/documents/{document}{suffix}", "org-b")
    unknown = server.call(method, f"/documents/{uuid.uuid4()}{suffix}", "org-b")
    malformed = server.call(method, f"/documents/not-a-uuid{suffix}", "org-b")
    upper = server.call(method, f"/documents/{document.upper()}{suffix}", "org-a")
    for response in (foreign, unknown, malformed, upper):
        assert response.status_code == 404
        assert response.get_data() == foreign.get_data()
        assert response.headers["Content-Type"] == foreign.headers["Content-Type"]
    assert foreign.get_json() == {"error": "not_found", "reason": "no such document"}
    # Only the owner's own retry was sent; refused requests send nothing.
    assert len(server.broker.messages(CMD_DOCUMENT_RETRY)) == (1 if suffix == "/retry" else 0)


def test_tenant_ids_are_case_sensitive(server: Server) -> None:
    document = server.upload_pdf("org-a")
    assert server.call("GET", f"/documents/{document}", "ORG-A").status_code == 404
    assert server.call("GET", "/documents", "ORG-A").get_json() == {"documents": []}


def test_the_list_shows_only_the_callers_documents(server: Server) -> None:
    own = {server.upload_pdf("org-a", "a1.pdf"), server.upload_pdf("org-a", "a2.pdf")}
    other = server.upload_pdf("org-b", "b1.pdf")
    listed = server.call("GET", "/documents?tenantUUID=org-b", "org-a").get_json()["documents"]
    assert {d["documentUUID"] for d in listed} == own
    listed_b = server.call("GET", "/documents", "org-b").get_json()["documents"]
    assert [d["documentUUID"] for d in listed_b] == [other]


def test_the_list_limit_is_validated(server: Server) -> None:
    for _ in range(3):
        server.upload_pdf()
    assert len(server.call("GET", "/documents?limit=2").get_json()["documents"]) == 2
    for bad in ("0", "-1", "x", "501"):
        response = server.call("GET", f"/documents?limit={bad}")
        assert response.status_code == 400
        assert response.get_json()["error"] == "bad_request"


# -- the happy path -------------------------------------------------------------------------------
def test_retrying_an_uploaded_document_sends_its_process_command_again(server: Server) -> None:
    """An upload whose process command never reached the broker can be re-queued."""
    document = server.upload_pdf()
    response = server.call("POST", f"/documents/{document}/retry")
    assert response.status_code == 202
    sent = server.sent(CMD_DOCUMENT_PROCESS)
    assert len(sent) == 2
    assert sent[0][1] == sent[1][1], "the same process command, sent again"
    assert server.broker.messages(CMD_DOCUMENT_RETRY) == []


def _finish(server: Server, tenant: TenantId, document: str, *, failed: bool = False) -> None:
    """Move a document through the pipeline as the other services would, blobs included."""
    store = server.store
    store.apply(tenant, document, StartRun(), event_id=f"{document}-start")
    if failed:
        store.apply(
            tenant,
            document,
            Failed(run=1, stage="extraction", reason="unreadable"),
            event_id=f"{document}-failed",
        )
        return
    text_key = document_key(document, "text.txt")
    server.blobs.put(tenant, text_key, b"Invoice 42\nTotal 10 EUR")
    store.apply(
        tenant, document, TextExtracted(run=1, text_key=text_key), event_id=f"{document}-text"
    )
    store.apply(
        tenant,
        document,
        Interpreted(
            run=1,
            document_type="invoice",
            confidence=0.9,
            fields={"invoiceNumber": "42"},
            needs_review=False,
            reasons=("matched invoice rules",),
        ),
        event_id=f"{document}-interpreted",
    )
    server.blobs.put(tenant, document_key(document, "thumbnail.png"), b"\x89PNG\r\n\x1a\nthumb")


def test_uploading_a_pdf_stores_it_and_sends_both_commands(server: Server) -> None:
    response = server.call(
        "POST",
        "/documents",
        data={"file": (io.BytesIO(PDF), "invoice.pdf", "application/pdf")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201
    created = response.get_json()
    document = created["documentUUID"]
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", document
    )
    assert created == {"documentUUID": document, "state": "uploaded"}
    assert response.headers["Location"] == f"/documents/{document}"
    key = f"documents/{document}/original"
    assert server.blobs.get(ORG_A, key) == PDF
    [(properties, process)] = server.sent(CMD_DOCUMENT_PROCESS)
    assert properties["tenantUUID"] == "org-a"
    assert process == {
        "documentUUID": document,
        "blobKey": key,
        "fileName": "invoice.pdf",
        "contentType": "application/pdf",
        "tenantUUID": "org-a",
    }
    [(properties, thumbnail)] = server.sent(CMD_THUMBNAIL_GENERATE)
    assert properties["tenantUUID"] == "org-a"
    assert thumbnail == {
        "documentUUID": document,
        "blobKey": key,
        "contentType": "application/pdf",
        "tenantUUID": "org-a",
    }


def test_the_status_of_a_new_document(server: Server) -> None:
    document = server.upload_pdf()
    status = server.call("GET", f"/documents/{document}").get_json()
    created_at = status.pop("createdAt")
    assert status.pop("updatedAt") == created_at
    assert created_at.endswith("+00:00")
    assert status == {
        "documentUUID": document,
        "fileName": "invoice.pdf",
        "contentType": "application/pdf",
        "state": "uploaded",
        "run": 0,
        "documentType": None,
        "confidence": None,
        "fields": None,
        "reasons": [],
        "error": None,
        "failedStage": None,
        "thumbnail": False,
    }


def test_results_are_404_until_produced_and_200_after(server: Server) -> None:
    document = server.upload_pdf()
    for suffix, reason in (
        ("/text", "no text extracted yet"),
        ("/interpretation", "not interpreted yet"),
        ("/thumbnail", "no thumbnail"),
    ):
        response = server.call("GET", f"/documents/{document}{suffix}")
        assert response.status_code == 404
        assert response.get_json() == {"error": "not_found", "reason": reason}
    _finish(server, ORG_A, document)

    text = server.call("GET", f"/documents/{document}/text")
    assert text.status_code == 200
    assert text.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert text.get_data() == b"Invoice 42\nTotal 10 EUR"

    interpretation = server.call("GET", f"/documents/{document}/interpretation")
    assert interpretation.get_json() == {
        "documentUUID": document,
        "documentType": "invoice",
        "confidence": 0.9,
        "fields": {"invoiceNumber": "42"},
        "reasons": ["matched invoice rules"],
    }

    thumbnail = server.call("GET", f"/documents/{document}/thumbnail")
    assert thumbnail.status_code == 200
    assert thumbnail.headers["Content-Type"] == "image/png"
    assert thumbnail.get_data().startswith(b"\x89PNG")

    status = server.call("GET", f"/documents/{document}").get_json()
    assert (status["state"], status["run"], status["thumbnail"]) == ("ready", 1, True)
    assert (status["documentType"], status["fields"]) == ("invoice", {"invoiceNumber": "42"})


def test_a_failed_document_can_be_retried_and_a_processing_one_cannot(server: Server) -> None:
    document = server.upload_pdf()
    server.store.apply(ORG_A, document, StartRun(), event_id=f"{document}-start")
    conflict = server.call("POST", f"/documents/{document}/retry")
    assert conflict.status_code == 409
    assert conflict.get_json()["error"] == "conflict"
    assert server.broker.messages(CMD_DOCUMENT_RETRY) == []

    server.store.apply(
        ORG_A,
        document,
        Failed(run=1, stage="extraction", reason="unreadable"),
        event_id=f"{document}-failed",
    )
    status = server.call("GET", f"/documents/{document}").get_json()
    assert (status["state"], status["failedStage"], status["error"]) == (
        "failed",
        "extraction",
        "unreadable",
    )
    response = server.call("POST", f"/documents/{document}/retry")
    assert response.status_code == 202
    assert response.get_json() == {"documentUUID": document, "state": "failed"}
    [(properties, body)] = server.sent(CMD_DOCUMENT_RETRY)
    assert properties["tenantUUID"] == "org-a"
    assert body == {"documentUUID": document, "tenantUUID": "org-a"}


@pytest.mark.parametrize(
    ("declared", "name", "expected", "thumbnail"),
    [
        ("text/plain; charset=utf-8", "notes.txt", "text/plain", False),
        ("application/octet-stream", "contract.docx", DOCX, False),
        ("", "letter.HTM", "text/html", False),
        ("application/x-www-form-urlencoded", "scan.JPEG", "image/jpeg", True),
        ("image/png", "no-extension", "image/png", True),
        ("", "mystery.bin", "application/octet-stream", False),
    ],
)
def test_raw_uploads_detect_their_content_type(
    server: Server, declared: str, name: str, expected: str, thumbnail: bool
) -> None:
    headers = {"X-File-Name": name}
    if declared:
        headers["Content-Type"] = declared
    response = server.call("POST", "/documents", data=b"content", headers=headers)
    assert response.status_code == 201
    [(_, body)] = server.sent(CMD_DOCUMENT_PROCESS)
    assert (body["fileName"], body["contentType"]) == (name, expected)
    assert len(server.sent(CMD_THUMBNAIL_GENERATE)) == int(thumbnail)


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\invoice.pdf", "invoice.pdf"),
        ("Rechnung%20%C3%BCber%20M%C3%A4rz.pdf", "Rechnung über März.pdf"),
        ("bell\x07.pdf", "bell.pdf"),
    ],
)
def test_file_names_are_reduced_to_a_plain_name(server: Server, raw: str, stored: str) -> None:
    response = server.call("POST", "/documents", data=PDF, headers={"X-File-Name": raw})
    assert response.status_code == 201
    document = response.get_json()["documentUUID"]
    assert server.call("GET", f"/documents/{document}").get_json()["fileName"] == stored


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        (
            {"data": {"other": (io.BytesIO(PDF), "a.pdf")}, "content_type": "multipart/form-data"},
            "missing multipart field 'file'",
        ),
        ({"data": PDF}, "missing file name"),
        ({"data": PDF, "headers": {"X-File-Name": "../"}}, "missing file name"),
        (
            {"data": PDF, "headers": {"X-File-Name": "x" * 256}},
            "file name longer than 255 characters",
        ),
        ({"data": b"", "headers": {"X-File-Name": "a.pdf"}}, "the upload is empty"),
        ({"data": PDF, "headers": {"X-File-Name": "%FF.pdf"}}, "X-File-Name is not UTF-8"),
    ],
)
def test_bad_uploads_are_400_and_send_nothing(
    server: Server, kwargs: dict[str, Any], reason: str
) -> None:
    response = server.call("POST", "/documents", **kwargs)
    assert response.status_code == 400
    assert response.get_json() == {"error": "bad_request", "reason": reason}
    assert server.broker.messages(CMD_DOCUMENT_PROCESS) == []


def test_uploads_over_the_limit_are_413(tmp_path: Path, broker: InMemoryBroker) -> None:
    small = build_server(tmp_path, broker, max_upload_bytes=1024)
    fits = small.call("POST", "/documents", data=b"x" * 1024, headers={"X-File-Name": "a.txt"})
    assert fits.status_code == 201
    for response in (
        small.call("POST", "/documents", data=b"x" * 1025, headers={"X-File-Name": "a.txt"}),
        small.call(
            "POST",
            "/documents",
            data={"file": (io.BytesIO(b"x" * 1025), "a.txt")},
            content_type="multipart/form-data",
        ),
        small.call(
            "POST",
            "/documents",
            data={"file": (io.BytesIO(b"x" * 200_000), "a.txt")},
            content_type="multipart/form-data",
        ),
    ):
        assert response.status_code == 413
        assert response.get_json() == {
            "error": "payload_too_large",
            "reason": "the upload exceeds the size limit",
        }
    assert len(small.broker.messages(CMD_DOCUMENT_PROCESS)) == 1
    small.store.close()


def test_a_wrong_method_is_a_json_405_with_allow(server: Server) -> None:
    response = server.call("DELETE", "/documents")
    assert response.status_code == 405
    assert response.get_json() == {"error": "method_not_allowed", "reason": "method not allowed"}
    assert {"GET", "POST"} <= set(response.headers["Allow"].split(", "))


def test_an_unexpected_failure_is_a_bare_500(tmp_path: Path, broker: InMemoryBroker) -> None:
    class BrokenStore:
        def list(self, tenant: TenantId, *, limit: int = 100) -> list[Any]:
            raise RuntimeError("secret internals at /srv/db")

        def close(self) -> None:
            pass

    broken = build_server(tmp_path, broker, store=BrokenStore())  # type: ignore[arg-type]
    with capture_logs() as logs:
        response = broken.call("GET", "/documents")
    assert response.status_code == 500
    assert response.get_json() == {"error": "internal_error"}
    assert b"secret internals" not in response.get_data()
    assert b"Traceback" not in response.get_data()
    assert [e["event"] for e in logs] == ["request_failed"]


def test_a_broker_outage_is_503_and_the_upload_can_be_repeated(server: Server) -> None:
    server.transport.close()
    with capture_logs() as logs:
        response = server.call("POST", "/documents", data=PDF, headers={"X-File-Name": "a.pdf"})
    assert response.status_code == 503
    assert response.get_json()["error"] == "unavailable"
    assert response.headers["Retry-After"] == "5"
    assert [e["event"] for e in logs] == ["document_not_queued", "dependency_unavailable"]
    server.transport.connect()
    assert (
        server.call("POST", "/documents", data=PDF, headers={"X-File-Name": "a.pdf"}).status_code
        == 201
    )


# -- OpenAPI --------------------------------------------------------------------------------------
def test_openapi_describes_every_route_with_its_methods(server: Server) -> None:
    response = server.call("GET", "/openapi.json")
    assert response.status_code == 200
    document = json.loads(response.get_data())
    assert document["openapi"] == "3.1.0"
    paths = document["paths"]
    rules = [r for r in server.app.url_map.iter_rules() if r.endpoint != "static"]
    assert rules
    described: dict[str, set[str]] = {}
    for rule in rules:
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        assert path in paths, path
        methods = {m.lower() for m in (rule.methods or set())} - {"head", "options"}
        described.setdefault(path, set()).update(methods)
    for path, methods in described.items():
        assert set(paths[path]) - {"parameters"} == methods, path
        for operation in paths[path].values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    assert f"{{{parameter['name']}}}" in path
    assert set(paths) == set(described)


def test_openapi_declares_bearer_security_and_resolvable_references(server: Server) -> None:
    document = server.call("GET", "/openapi.json").get_json()
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
    }
    assert document["security"] == [{"bearerAuth": []}]
    assert document["paths"]["/healthz"]["get"]["security"] == []
    text = json.dumps(document)
    for ref in set(re.findall(r'"\$ref": "#/components/(\w+)/(\w+)"', text)):
        assert ref[1] in document["components"][ref[0]], ref
    for path in document["paths"].values():
        for operation in path.values():
            assert (
                "200" in operation["responses"]
                or "201" in operation["responses"]
                or ("202" in operation["responses"])
            )


class ThumbnailQueueDown(InMemoryTransport):
    """Refuses sends to the thumbnail queue only, as a broker refusing one destination would."""

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        if queue == CMD_THUMBNAIL_GENERATE:
            raise TransportError("queue unavailable")
        super().send(queue, message, delay_ms=delay_ms)


def test_a_lost_thumbnail_command_does_not_fail_the_upload(
    tmp_path: Path, broker: InMemoryBroker
) -> None:
    flaky = build_server(tmp_path, broker, transport=ThumbnailQueueDown(broker))
    with capture_logs() as logs:
        document = flaky.upload_pdf()
    assert len(flaky.sent(CMD_DOCUMENT_PROCESS)) == 1
    assert flaky.sent(CMD_THUMBNAIL_GENERATE) == []
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["thumbnail_not_queued"]
    assert flaky.call("GET", f"/documents/{document}").get_json()["thumbnail"] is False
    flaky.store.close()
