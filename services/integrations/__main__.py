"""Run the IntegrationsServer (`python -m services.integrations`), configured by BOOST_* variables.

Serves on werkzeug's threaded server until SIGTERM/SIGINT, then lets in-flight requests finish.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from werkzeug.serving import WSGIRequestHandler, make_server

from boost_tenancy import BoostTenancyError, ConfigError, PublishGuard, TenantProducer
from boost_tenancy.application import AppSettings, open_broker, open_policies
from boost_tenancy.envvars import env_int
from boost_tenancy.lifecycle import run_until_stopped
from boost_tenancy.observability import configure_logging
from boost_tenancy.quotas import BrokerBacklog, RedisPublishBuckets, effective_ttl
from services.common.auth import JwtSettings, TenantAuthenticator
from services.common.blobs import LocalBlobStore
from services.common.documents import DocumentStore, open_document_store
from services.integrations.app import DEFAULT_MAX_UPLOAD_BYTES, create_app
from services.integrations.budget import RequestBudget, RequestBudgets

logger = structlog.get_logger("services.integrations")

MAX_PORT = 65535
_CONTROL_CHARACTERS = {code: f"\\x{code:02x}" for code in (*range(32), 127)}


@dataclass(frozen=True, slots=True, kw_only=True)
class IntegrationsSettings:
    """What the IntegrationsServer reads: the toolkit's settings, JWT, HTTP and storage."""

    app: AppSettings
    jwt: JwtSettings
    host: str
    port: int
    blob_dir: Path
    document_store_url: str
    max_upload_bytes: int
    budgets: RequestBudgets

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> IntegrationsSettings:
        """BOOST_JWT_* (see JwtSettings), BOOST_HTTP_HOST, BOOST_HTTP_PORT,
        BOOST_HTTP_MAX_UPLOAD_BYTES, BOOST_HTTP_TENANT_IN_FLIGHT,
        BOOST_HTTP_TENANT_REQUESTS_PER_MIN, BOOST_BLOB_DIR, BOOST_DOCUMENT_STORE and the
        toolkit's own."""
        port = env_int(env, "BOOST_HTTP_PORT", 8080, minimum=1)
        if port > MAX_PORT:
            raise ConfigError(f"BOOST_HTTP_PORT must be 1-{MAX_PORT}, got {port}")
        return cls(
            app=AppSettings.from_env(env),
            jwt=JwtSettings.from_env(env),
            host=env.get("BOOST_HTTP_HOST") or "127.0.0.1",
            port=port,
            blob_dir=Path(env.get("BOOST_BLOB_DIR") or "var/blobs"),
            document_store_url=env.get("BOOST_DOCUMENT_STORE") or "sqlite:///var/documents.sqlite3",
            max_upload_bytes=env_int(
                env, "BOOST_HTTP_MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES, minimum=1
            ),
            budgets=RequestBudgets.from_env(env),
        )


class InFlight:
    """Counts the connections being served, so a graceful stop can wait for them to finish."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = threading.Condition()

    @contextmanager
    def track(self) -> Iterator[None]:
        with self._idle:
            self._count += 1
        try:
            yield
        finally:
            with self._idle:
                self._count -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is in flight; False if something still is after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._count > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
            return True


def request_handler(in_flight: InFlight) -> type[WSGIRequestHandler]:
    """werkzeug's request handler, counting each connection and logging through structlog."""

    class RequestHandler(WSGIRequestHandler):
        def handle(self) -> None:
            # Counted around the whole connection (werkzeug serves one request per connection):
            # a WSGI middleware would miss the end of a request whose client reset the
            # connection, because werkzeug then never closes the response body.
            with in_flight.track():
                super().handle()

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            # The query string is left out: it is the caller's text, and nothing in it matters.
            path = urlsplit(getattr(self, "path", "")).path
            logger.info(
                "http_request",
                method=getattr(self, "command", "-"),
                path=path.translate(_CONTROL_CHARACTERS),
                status=str(code),
                size=str(size),
                remote_addr=self.address_string(),
            )

        def log(self, type: str, message: str, *args: Any) -> None:
            text = (message % args if args else message).translate(_CONTROL_CHARACTERS)
            emit = logger.error if type == "error" else logger.info
            emit("http_server", message=text)

    return RequestHandler


def _open_storage(settings: IntegrationsSettings) -> tuple[LocalBlobStore, DocumentStore]:
    """The blob and document stores; a bad location is a configuration error naming its variable."""
    try:
        settings.blob_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"BOOST_BLOB_DIR {str(settings.blob_dir)!r} is not usable: {exc}"
        ) from exc
    try:
        return LocalBlobStore(settings.blob_dir), open_document_store(settings.document_store_url)
    except ConfigError as exc:
        raise ConfigError(f"BOOST_DOCUMENT_STORE: {exc}") from exc


def _serve(settings: IntegrationsSettings) -> int:
    blobs, documents = _open_storage(settings)
    transport = open_broker(settings.app, os.environ)
    policies = open_policies(settings.app.policy_store_url)
    backlog = (
        BrokerBacklog(transport, settings.app.routing)
        if settings.app.publish.max_queued_messages or policies is not None
        else None
    )
    shared = (
        RedisPublishBuckets.from_url(settings.app.publish_redis_url)
        if settings.app.publish_redis_url
        else None
    )
    guard = PublishGuard(
        settings.app.publish,
        policy_of=None if policies is None else policies.policy_of,
        backlog=backlog,
        shared=shared,
    )
    try:
        transport.connect()
        if backlog is not None:
            backlog.start()
        app = create_app(
            authenticator=TenantAuthenticator(settings.jwt),
            documents=documents,
            blobs=blobs,
            producer=TenantProducer(
                transport,
                routing=settings.app.routing,
                guard=guard,
                ttl=effective_ttl(
                    settings.app.message_ttl,
                    None if policies is None else policies.policy_of,
                ),
            ),
            max_upload_bytes=settings.max_upload_bytes,
            guard=guard,
            budget=RequestBudget(settings.budgets),
        )
        in_flight = InFlight()
        server = make_server(
            settings.host,
            settings.port,
            app,
            threaded=True,
            request_handler=request_handler(in_flight),
        )
        # serve_forever runs on its own thread: shutdown() waits for it to return, which would
        # deadlock if called from the main thread's signal handling while it served.
        serving = threading.Thread(target=server.serve_forever, name="http", daemon=True)
        stop_requested = threading.Event()
        died: list[bool] = []

        def start() -> None:
            serving.start()
            logger.info("integrations_listening", host=settings.host, port=server.port)

        def check_serving() -> None:
            if not serving.is_alive():
                died.append(True)
                stop_requested.set()

        def stop() -> int:
            if died:
                logger.error("integrations_server_died")
                server.server_close()
                return 1
            logger.info("integrations_stopping")
            server.shutdown()
            if not in_flight.wait_idle(settings.app.runner.shutdown_grace_s):
                logger.warning("integrations_stopped_with_requests_in_flight")
            server.server_close()
            logger.info("integrations_stopped")
            return 0

        return run_until_stopped(
            start, stop, stop_requested, install_signal_handlers=True, tick=check_serving
        )
    finally:
        transport.close()
        documents.close()
        if policies is not None:
            policies.close()
        if backlog is not None:
            backlog.close()
        if shared is not None:
            shared.close()


def main() -> int:
    """Exit 0 after a graceful stop, 2 on a configuration error, 1 if the server cannot run."""
    try:
        settings = IntegrationsSettings.from_env(os.environ)
        configure_logging(settings.app.log_format, settings.app.log_level)
        return _serve(settings)
    except ConfigError as exc:
        print(f"{sys.argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    except (BoostTenancyError, OSError) as exc:
        # The broker or database is unreachable, or the port is taken.
        print(f"{sys.argv[0]}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
