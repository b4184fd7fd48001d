"""Run the whole document pipeline for three tenants on the local broker and print the outcome.

Starts every service as its own process, uploads the shipped sample documents for each tenant
with that tenant's token, shows progress, prints a per-tenant table, then shows that one tenant's
token cannot read another's documents. Exits 1 if anything ends in an unexpected state.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TENANTS = ("org-acme", "org-globex", "0b9d5c52-6f1e-4c1a-9a53-3c8f7e2b1d40")
SERVICES = ("manager", "extractor", "professor", "thumbnailer", "notifier")
AUDIENCE, ISSUER = "boost-demo", "boost-demo-idp"
TIMEOUT_S = 180.0

# sample -> (expected state, expected document type); no text can be extracted from an image,
# and a corrupt PDF fails extraction: both are failures the pipeline must report, not lose.
EXPECTED: dict[str, tuple[str, str | None]] = {
    "invoice.pdf": ("ready", "invoice"),
    "receipt.txt": ("ready", "receipt"),
    "letter.html": ("ready", "letter"),
    "contract.docx": ("ready", "contract"),
    "photo.png": ("failed", None),
    "corrupt.pdf": ("failed", None),
}
CONTENT_TYPES = {
    ".pdf": "application/pdf",
    ".txt": "text/plain",
    ".html": "text/html",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".png": "image/png",
}
FINAL = {"ready", "needs_review", "failed"}


@dataclass(frozen=True, slots=True)
class Upload:
    tenant: str
    sample: str
    document_id: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def token_for(tenant: str, secret: str) -> str:
    now = int(time.time())
    claims = {"tenantId": tenant, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 900}
    return jwt.encode(claims, secret, algorithm="HS256")


def call(
    base: str, method: str, path: str, token: str, body: bytes | None = None, **headers: str
) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, data=body, method=method)  # noqa: S310  # base is http://127.0.0.1
    request.add_header("Authorization", f"Bearer {token}")
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310  # http to loopback
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def start_services(env: dict[str, str], logs: Path, port: int) -> list[subprocess.Popen[bytes]]:
    processes = []
    for name in (*SERVICES, "integrations"):
        service_env = dict(env)
        if name == "integrations":
            service_env["BOOST_HTTP_PORT"] = str(port)
        log = (logs / f"{name}.log").open("wb")
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", f"services.{name}"],
                env=service_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    return processes


def stop_services(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_healthy(base: str, processes: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for process, name in zip(processes, (*SERVICES, "integrations"), strict=True):
            if process.poll() is not None:
                tail = (logs / f"{name}.log").read_text(errors="replace")[-2000:]
                raise SystemExit(f"service {name} exited with {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit("the IntegrationsServer did not answer /healthz within 60 s")


def key_fields(status: dict[str, Any]) -> str:
    fields = status.get("fields") or {}
    parts = []
    if fields.get("invoiceNumber"):
        parts.append(f"no. {fields['invoiceNumber']}")
    total = fields.get("total")
    if isinstance(total, dict):
        parts.append(f"total {total.get('value')} {total.get('currency')}")
    if fields.get("issueDate"):
        parts.append(f"date {fields['issueDate']}")
    ibans = fields.get("iban") or []
    if ibans:
        parts.append(f"IBAN {ibans[0]}")
    if status.get("state") == "failed":
        parts.append(f"{status.get('failedStage')}: {str(status.get('error'))[:60]}")
    return ", ".join(parts) or "-"


def main() -> int:  # noqa: PLR0915  # one linear script, easier to read in one piece
    root = Path("var") / "demo" / uuid.uuid4().hex[:8]
    logs = root / "logs"
    logs.mkdir(parents=True)
    secret = secrets.token_urlsafe(48)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "BOOST_TENANTS": ",".join(TENANTS),
        "BOOST_BLOB_DIR": str(root / "blobs"),
        "BOOST_DOCUMENT_STORE": f"sqlite:///{root / 'documents.sqlite3'}",
        "BOOST_ERROR_STORE": f"sqlite:///{root / 'errors.sqlite3'}",
        "BOOST_JWT_ALGORITHMS": "HS256",
        "BOOST_JWT_SECRET": secret,
        "BOOST_JWT_AUDIENCE": AUDIENCE,
        "BOOST_JWT_ISSUER": ISSUER,
        "BOOST_LOG_FORMAT": "json",
        "BOOST_RETRY_BASE_MS": "200",
    }
    print(f"Starting {len(SERVICES) + 1} services (logs in {logs})...")
    processes = start_services(env, logs, port)
    failed = False
    try:
        wait_healthy(base, processes, logs)
        tokens = {tenant: token_for(tenant, secret) for tenant in TENANTS}
        uploads = []
        for tenant in TENANTS:
            for sample in EXPECTED:
                data = (SAMPLES / sample).read_bytes()
                status, body = call(
                    base,
                    "POST",
                    "/documents",
                    tokens[tenant],
                    data,
                    Content_Type=CONTENT_TYPES[Path(sample).suffix],
                    X_File_Name=sample,
                )
                if status != 201:
                    raise SystemExit(f"upload of {sample} for {tenant} answered {status}: {body}")
                uploads.append(Upload(tenant, sample, body["documentUUID"]))
        print(f"Uploaded {len(uploads)} documents ({len(EXPECTED)} per tenant); processing...")
        statuses: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            for upload in uploads:
                _, statuses[upload.document_id] = call(
                    base, "GET", f"/documents/{upload.document_id}", tokens[upload.tenant]
                )
            states = [s.get("state") for s in statuses.values()]
            done = sum(1 for s in states if s in FINAL)
            line = f"  {done}/{len(uploads)} finished: " + ", ".join(
                f"{s} {states.count(s)}" for s in sorted({str(x) for x in states})
            )
            if line != last:
                print(line, flush=True)
                last = line
            if done == len(uploads):
                break
            time.sleep(0.5)

        print()
        print(f"{'tenant':<38} {'document':<14} {'state':<13} {'type':<9} key fields")
        for upload in uploads:
            status = statuses[upload.document_id]
            want_state, want_type = EXPECTED[upload.sample]
            ok = status.get("state") == want_state and (
                want_type is None or status.get("documentType") == want_type
            )
            failed |= not ok
            mark = "" if ok else f"  UNEXPECTED (wanted {want_state}/{want_type})"
            print(
                f"{upload.tenant:<38} {upload.sample:<14} {status.get('state')!s:<13} "
                f"{status.get('documentType') or '-':<9} {key_fields(status)}{mark}"
            )

        print()
        print("Tenant isolation over HTTP:")
        victim = next(u for u in uploads if u.tenant == TENANTS[0] and u.sample == "invoice.pdf")
        intruder = TENANTS[1]
        own, _ = call(base, "GET", f"/documents/{victim.document_id}", tokens[victim.tenant])
        other, other_body = call(base, "GET", f"/documents/{victim.document_id}", tokens[intruder])
        unknown, unknown_body = call(base, "GET", f"/documents/{uuid.uuid4()}", tokens[intruder])
        forged, _ = call(
            base, "GET", "/documents", jwt.encode({"tenantId": TENANTS[0]}, "x" * 40, "HS256")
        )
        print(f"  {TENANTS[0]} reads its invoice:                    HTTP {own}")
        print(f"  {intruder} reads {TENANTS[0]}'s invoice:        HTTP {other}")
        print(f"  {intruder} reads an unknown document id:       HTTP {unknown}")
        print(f"  a token signed with another key:                 HTTP {forged}")
        isolated = own == 200 and other == 404 and other_body == unknown_body and forged == 401
        failed |= not isolated
        print(
            "  "
            + (
                "another tenant's document is indistinguishable from an unknown one"
                if isolated
                else "ISOLATION CHECK FAILED"
            )
        )
    finally:
        stop_services(processes)
    print()
    print("Demo", "FAILED" if failed else "passed: every document ended as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
