"""AccountingServer, the one HTTP server: /metrics, a tenant's counters at /tenants/<tenant>,
and the /healthz and /readyz probes of the runner it watches."""

from __future__ import annotations

import errno
import json
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final, Protocol
from urllib.parse import unquote, urlsplit

import structlog

from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.fairness.accounting import Accounting
from boost_tenancy.fairness.exposition import Exposition, TextExposition, exposition
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.fairness.accounting")

_TENANT_PREFIX: Final = "/tenants/"
_PROBES: Final = frozenset({"/healthz", "/readyz"})


MetricsSource = Callable[[bool], str]
"""More Prometheus text for /metrics, given whether tenant labels are on (HandlingMetrics,
ops.stats_metrics.QueueGauges)."""

DEFAULT_METRICS_HOST: Final = "127.0.0.1"
"""Where the server listens unless told otherwise: the endpoints have no authentication and
/tenants/<tenant> shows a tenant's usage, so reaching them from elsewhere is a deliberate choice
(BOOST_METRICS_HOST, e.g. 0.0.0.0 in a Kubernetes pod, where the kubelet probes the pod's IP)."""


class HealthSnapshot(Protocol):
    """One moment of what the probes report (processing.runner_health.RunnerHealth)."""

    def liveness(self) -> Mapping[str, bool]: ...

    def readiness(self) -> Mapping[str, bool]: ...

    def prometheus(self) -> str: ...


HealthSource = Callable[[], HealthSnapshot]
"""Takes a snapshot per request: ProcessorRunner.health."""


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class AccountingServer:
    """Serves /metrics (Prometheus text), /tenants/<tenant> (JSON) and, once it watches a
    runner, /healthz and /readyz (200 or 503, JSON naming each check).

    There is no authentication: by default it binds the loopback interface so only the host
    (an agent, a sidecar, an operator) can read it; host names another address. Port 0 picks a
    free port; see port after start(). sources add their families to /metrics after the
    accounting's, then the watched runner's gauges.
    """

    def __init__(
        self,
        accounting: Accounting,
        *,
        port: int = 0,
        host: str = DEFAULT_METRICS_HOST,
        tenant_label: bool = False,
        sources: Sequence[MetricsSource] = (),
        health: HealthSource | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be between 0 and 65535, got {port}")
        self._accounting = accounting
        self._sources = tuple(sources)
        self._port = port
        self._host = host
        self._tenant_label = tenant_label
        self._health = health
        self._served: frozenset[TenantId] = frozenset()
        self._exposition: Exposition | TextExposition | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add_source(self, source: MetricsSource) -> None:
        """Add source's families to /metrics, after the sources given before: for one that can
        be built only once the server is (the runner's queue gauges need its transport)."""
        self._sources = (*self._sources, source)

    def watch(self, health: HealthSource) -> None:
        """Answer /healthz and /readyz from health (ProcessorRunner.health), and add its
        gauges to /metrics."""
        self._health = health

    def serve_tenants(self, tenants: Iterable[TenantId]) -> None:
        """The tenants the process serves: /tenants/<one of them> answers its counters, zeros
        before its first message; any other tenant the accounting never counted is 404."""
        self._served = self._served | frozenset(tenants)

    @property
    def port(self) -> int:
        """The bound port (the chosen one once started with port 0)."""
        return self._port if self._server is None else int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return self._host

    @property
    def url(self) -> str:
        """Where a client on this host reaches it (the loopback address for a wildcard host)."""
        # A wildcard address is not one a client connects to; the loopback one reaches it.
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self._host, self._host)  # noqa: S104
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind and serve on a daemon thread; does nothing if already started. A port in use or
        an address this host does not have is a ConfigError naming them."""
        if self._server is not None:
            return
        server_class = _IPv6Server if ":" in self._host else ThreadingHTTPServer
        try:
            server = server_class((self._host, self._port), _handler(self))
        except OSError as exc:
            where = f"{self._host}:{self._port}"
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"cannot serve metrics: port {self._port} is already in use on {self._host} "
                    f"(BOOST_METRICS_PORT={self._port}); choose a free port or stop what "
                    "listens there"
                ) from None
            raise ConfigError(
                f"cannot serve metrics on {where} (BOOST_METRICS_HOST={self._host}, "
                f"BOOST_METRICS_PORT={self._port}): {exc.strerror or exc}"
            ) from None
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="boost-accounting-http", daemon=True
        )
        self._thread.start()
        log.info(
            "accounting_server_started",
            host=self._host,
            port=self.port,
            tenant_label=self._tenant_label,
        )

    def stop(self) -> None:
        """Stop serving and release the port."""
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._port = int(server.server_address[1])
        self._server = None
        self._thread = None

    def families(self) -> str:
        """The toolkit's own families, as Prometheus text: the accounting's, then each
        source's, then the watched runner's gauges."""
        label = self._tenant_label
        body = self._accounting.prometheus(tenant_label=label)
        body += "".join(source(label) for source in self._sources)
        if self._health is not None:
            body += self._health().prometheus()
        return body

    def _respond(self, path: str, accept: str = "") -> tuple[HTTPStatus, str, bytes]:
        route = urlsplit(path).path
        if route == "/metrics":
            if self._exposition is None:
                self._exposition = exposition(self.families)
            content_type, body = self._exposition.render(accept)
            return HTTPStatus.OK, content_type, body
        if route in _PROBES and self._health is not None:
            state = self._health()
            checks = dict(state.liveness() if route == "/healthz" else state.readiness())
            failed = sorted(name for name, ok in checks.items() if not ok)
            probe = {"status": "fail" if failed else "ok", "failed": failed, "checks": checks}
            status = HTTPStatus.SERVICE_UNAVAILABLE if failed else HTTPStatus.OK
            return status, "application/json", json.dumps(probe).encode()
        if route.startswith(_TENANT_PREFIX):
            try:
                tenant = TenantId.parse(unquote(route.removeprefix(_TENANT_PREFIX)))
            except InvalidTenantError:
                return _not_found()
            if tenant not in self._served and tenant.value not in self._accounting.snapshot_all():
                return _not_found()
            snapshot = self._accounting.snapshot(tenant)
            body_json = json.dumps({"tenant": tenant.value, **snapshot})
            return HTTPStatus.OK, "application/json", body_json.encode()
        return _not_found()


def _not_found() -> tuple[HTTPStatus, str, bytes]:
    # The path is not echoed back: the body stays the same whatever was asked.
    return HTTPStatus.NOT_FOUND, "application/json", b'{"error": "not found"}'


def _handler(owner: AccountingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "boost-tenancy-accounting"
        sys_version = ""

        def do_GET(self) -> None:
            self._answer(*owner._respond(self.path, self.headers.get("Accept", "")))

        def do_HEAD(self) -> None:
            accept = self.headers.get("Accept", "")
            self._answer(*owner._respond(self.path, accept), with_body=False)

        def _refuse_method(self) -> None:
            # Every resource here is read-only: 405 with what it allows, never an HTML page.
            self._answer(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "application/json",
                b'{"error": "method not allowed", "allow": ["GET", "HEAD"]}',
                extra={"Allow": "GET, HEAD"},
            )

        def do_POST(self) -> None:
            self._refuse_method()

        def do_PUT(self) -> None:
            self._refuse_method()

        def do_DELETE(self) -> None:
            self._refuse_method()

        def do_PATCH(self) -> None:
            self._refuse_method()

        def do_OPTIONS(self) -> None:
            self._refuse_method()

        def _answer(
            self,
            status: HTTPStatus,
            content_type: str,
            body: bytes,
            *,
            with_body: bool = True,
            extra: Mapping[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            # Request lines go to structlog at debug, not to stderr.
            log.debug("accounting_http_request", request=format % args)

    return Handler


__all__ = [
    "DEFAULT_METRICS_HOST",
    "AccountingServer",
    "HealthSnapshot",
    "HealthSource",
    "MetricsSource",
]
