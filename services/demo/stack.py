"""The pipeline's services as separate processes, with an HTTP client for the IntegrationsServer.

Used by the demo and by the end-to-end tests: start, kill and restart services one by one, and
talk to the HTTP API with per-tenant tokens.
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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jwt

PROCESSORS = ("manager", "extractor", "professor", "thumbnailer", "notifier")
AUDIENCE, ISSUER = "boost-demo", "boost-demo-idp"
FINAL_STATES = frozenset({"ready", "needs_review", "failed"})
# The services are not installed: each process imports them from this checkout.
CHECKOUT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Stack:
    """The services of one run: their own blob folder, stores, logs, port and JWT secret."""

    def __init__(self, root: Path, tenants: Iterable[str], env: Mapping[str, str]) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_urlsafe(48)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **env,
            "BOOST_TENANTS": ",".join(tenants),
            "BOOST_BLOB_DIR": str(root / "blobs"),
            "BOOST_DOCUMENT_STORE": f"sqlite:///{root / 'documents.sqlite3'}",
            "BOOST_ERROR_STORE": f"sqlite:///{root / 'errors.sqlite3'}",
            "BOOST_JWT_ALGORITHMS": "HS256",
            "BOOST_JWT_SECRET": self.secret,
            "BOOST_JWT_AUDIENCE": AUDIENCE,
            "BOOST_JWT_ISSUER": ISSUER,
            "BOOST_HTTP_PORT": str(self.port),
            "BOOST_LOG_FORMAT": "json",
            "BOOST_RETRY_BASE_MS": "200",
            "BOOST_SHUTDOWN_GRACE_S": "10",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p
            ),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *names: str) -> None:
        for name in names:
            log = (self.logs / f"{name}.log").open("ab")
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", f"services.{name}"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if "integrations" in names:
            self.wait_healthy()

    def kill(self, name: str) -> None:
        """SIGKILL: no shutdown, unacknowledged messages go back to the broker."""
        process = self.processes.pop(name)
        process.kill()
        process.wait(10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()

    def log_tail(self, name: str, chars: int = 2000) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-chars:]

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"service {name} exited with {process.returncode}:\n{self.log_tail(name)}"
                    )
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the IntegrationsServer did not answer within {timeout_s} s")

    def token(self, tenant: str, *, secret: str | None = None) -> str:
        now = int(time.time())
        claims = {"tenantId": tenant, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 900}
        return jwt.encode(claims, secret or self.secret, algorithm="HS256")

    def call(
        self,
        method: str,
        path: str,
        token: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        request = urllib.request.Request(self.base + path, data=body, method=method)  # noqa: S310
        request.add_header("Authorization", f"Bearer {token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def upload(self, tenant: str, path: Path, content_type: str) -> str:
        status, body = self.call(
            "POST",
            "/documents",
            self.token(tenant),
            path.read_bytes(),
            {"Content-Type": content_type, "X-File-Name": path.name},
        )
        if status != 201:
            raise RuntimeError(f"upload of {path.name} for {tenant} answered {status}: {body}")
        return str(body["documentUUID"])

    def status(self, tenant: str, document: str) -> dict[str, Any]:
        _, body = self.call("GET", f"/documents/{document}", self.token(tenant))
        return body if isinstance(body, dict) else {}


def environment() -> dict[str, str]:
    """The environment services inherit (broker location and the like)."""
    return dict(os.environ)
