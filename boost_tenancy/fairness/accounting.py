"""Per-tenant accounting of every delivery's fate, so nothing a fairness limit does is silent.

Counters per tenant feed a tenant's own JSON view and Prometheus text, served by AccountingServer.
"""

from __future__ import annotations

import errno
import json
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final, Literal, Protocol, get_args
from urllib.parse import unquote, urlsplit

import structlog

from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.fairness.accounting")

UNKNOWN_TENANT: Final = "_unknown"
"""How a message with no valid tenant is reported; never a valid TenantId, so never a collision."""

OUTCOMES: Final = (
    "processed",
    "deferred",
    "retried",
    "dead_lettered",
    "quarantined",
    "stale",
    "unsettled",
)
"""Dispatcher outcomes (DispatchObserver.on_outcome), one per delivery handled."""

HOLD_REASONS: Final = ("rate", "concurrency")
"""Why the fairness gate held a tenant's next delivery."""

PUBLISH_REFUSALS: Final = ("rate", "size", "backlog")
"""Why a tenant's publish was refused (quotas.PublishGuard)."""

Event = Literal[
    "admitted",
    "held_rate",
    "held_concurrency",
    "expired",
    "publish_refused_rate",
    "publish_refused_size",
    "publish_refused_backlog",
]
"""What the fairness gate and the publishing limits (quotas/) record; the dispatcher does not
see these."""

EVENTS: Final[tuple[Event, ...]] = get_args(Event)

# One slot per counter, in this order, in each tenant's list.
_SLOTS: Final = (*OUTCOMES, *EVENTS)
_INDEX: Final = {name: index for index, name in enumerate(_SLOTS)}
_OUTCOME_INDEX: Final = {name: _INDEX[name] for name in OUTCOMES}

_HELP: Final = {
    "processed": "handled and acknowledged",
    "deferred": "held at the fairness gate past its hold time and re-sent, no attempt counted",
    "retried": "failed attempts scheduled for another attempt",
    "dead_lettered": "moved to the dead-letter queue",
    "quarantined": "tenancy violations moved to the quarantine queue",
    "stale": "skipped because their connection was gone (the broker redelivers them)",
    "unsettled": "left unacknowledged after the broker refused even their raw dead letter",
}


class Accounting:
    """Thread-safe per-tenant counters; a DispatchObserver, and record() for the middleware.

    Definitions (a tenant's snapshot; each counter counts deliveries, not distinct messages):

    - processed: handled and acknowledged (the dispatcher's processed outcome).
    - retried: failed attempts that were scheduled for another attempt.
    - dead_lettered: messages moved to DLQ.<queue> (permanent, undecodable or out of attempts).
    - failed: retried + dead_lettered, derived when read; failed handling attempts.
    - deferred: the dispatcher's deferred outcome, and only that: deliveries re-sent without an
      attempt counted. The fairness gate defers only a delivery held past its hold time
      (`expired` counts those decisions); a tenant over its limit is held, not re-sent.
    - admitted: deliveries the fairness gate let through to the workers.
    - held_rate, held_concurrency: times the gate held a tenant's next delivery back, by the
      limit that held it (once per delivery and reason, however long it waits).
    - quarantined: tenancy violations, under the tenant the message claimed when that is a valid
      id, else under None, reported as "_unknown".
    - publish_refused_rate, publish_refused_size: publishes refused by the tenant's publishing
      limits (quotas/): over its messages/s or bytes/s, or a message over its maximum size.
    - stale: deliveries skipped because their connection was gone; the broker redelivers them.
    - unsettled: deliveries left unacknowledged because the broker refused even their raw dead
      letter (docs/resilience.md); they come back when the connection ends.

    processed + dead_lettered + quarantined is the number of messages that reached an end.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[TenantId | None, list[int]] = {}

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        """DispatchObserver: count one outcome; never raises."""
        index = _OUTCOME_INDEX.get(outcome)
        if index is None:
            # The observer must not raise; an outcome added to the dispatcher later is logged
            # rather than dropped without a trace.
            log.warning("accounting_unknown_outcome", outcome=outcome, queue=queue)
            return
        self._add(tenant, index, 1)

    def record(self, tenant: TenantId | None, event: Event, n: int = 1) -> None:
        """Count n fairness gate events (EVENTS)."""
        if event not in EVENTS:
            raise ValueError(f"unknown accounting event {event!r}; expected one of {EVENTS}")
        if n < 0:
            raise ValueError(f"an event count cannot be negative, got {n}")
        self._add(tenant, _INDEX[event], n)

    def _add(self, tenant: TenantId | None, index: int, n: int) -> None:
        with self._lock:
            counts = self._counts.get(tenant)
            if counts is None:
                counts = self._counts[tenant] = [0] * len(_SLOTS)
            counts[index] += n

    # -- reading ---------------------------------------------------------------------------------
    def snapshot(self, tenant: TenantId | str | None) -> dict[str, int]:
        """One tenant's counters, JSON-ready; zeros for a tenant never seen."""
        key = None if tenant is None else TenantId.parse(tenant)
        with self._lock:
            counts = list(self._counts.get(key, ()))
        return _view(counts or [0] * len(_SLOTS))

    def snapshot_all(self) -> dict[str, dict[str, int]]:
        """Every tenant seen, keyed by tenant id ("_unknown" for None), sorted."""
        with self._lock:
            copied = [(_label(t), list(c)) for t, c in self._counts.items()]
        return {label: _view(counts) for label, counts in sorted(copied)}

    def prometheus(self, *, tenant_label: bool = False) -> str:
        """Prometheus text exposition (0.0.4) of the counters.

        Without tenant_label every series is summed across tenants: a tenant label multiplies
        the series by the number of tenants, so it is an opt-in for deployments that can afford it.
        """
        with self._lock:
            rows = sorted((_label(t), list(c)) for t, c in self._counts.items())
        if not tenant_label:
            totals = [sum(column) for column in zip(*(c for _, c in rows), strict=True)]
            rows = [("", totals or [0] * len(_SLOTS))]
        lines: list[str] = []
        _family(
            lines,
            "boost_tenancy_messages_total",
            "Deliveries by outcome: " + "; ".join(f"{k} = {v}" for k, v in _HELP.items()) + ".",
            (
                (_labels(tenant, outcome=outcome), counts[_INDEX[outcome]])
                for outcome in OUTCOMES
                for tenant, counts in rows
            ),
        )
        _family(
            lines,
            "boost_tenancy_admitted_total",
            "Deliveries the fairness gate let through to the workers.",
            ((_labels(tenant), counts[_INDEX["admitted"]]) for tenant, counts in rows),
        )
        _family(
            lines,
            "boost_tenancy_held_total",
            "Times the fairness gate held a tenant's next delivery back, by the limit that held it "
            "(held unacknowledged, not re-sent).",
            (
                (_labels(tenant, reason=reason), counts[_INDEX[f"held_{reason}"]])
                for reason in HOLD_REASONS
                for tenant, counts in rows
            ),
        )
        _family(
            lines,
            "boost_tenancy_publish_refused_total",
            "Publishes refused by a tenant's publishing limits, by the limit: rate (messages/s or "
            "bytes/s), size (maximum message size) or backlog (the tenant's queue at its quota); "
            "nothing of them was sent.",
            (
                (_labels(tenant, reason=reason), counts[_INDEX[f"publish_refused_{reason}"]])
                for reason in PUBLISH_REFUSALS
                for tenant, counts in rows
            ),
        )
        return "\n".join(lines) + "\n"


def _label(tenant: TenantId | None) -> str:
    return UNKNOWN_TENANT if tenant is None else tenant.value


def _view(counts: list[int]) -> dict[str, int]:
    def get(name: str) -> int:
        return counts[_INDEX[name]]

    return {
        "admitted": get("admitted"),
        "deferred": get("deferred"),
        "held_rate": get("held_rate"),
        "held_concurrency": get("held_concurrency"),
        "expired": get("expired"),
        "processed": get("processed"),
        "failed": get("retried") + get("dead_lettered"),
        "retried": get("retried"),
        "dead_lettered": get("dead_lettered"),
        "quarantined": get("quarantined"),
        "stale": get("stale"),
        "unsettled": get("unsettled"),
        "publish_refused_rate": get("publish_refused_rate"),
        "publish_refused_size": get("publish_refused_size"),
        "publish_refused_backlog": get("publish_refused_backlog"),
    }


def escape_label_value(value: str) -> str:
    """Escape a label value for the text exposition format: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(tenant: str, **labels: str) -> str:
    """The {...} part; tenant "" means no tenant label."""
    pairs = ([("tenant", tenant)] if tenant else []) + list(labels.items())
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


def _family(
    lines: list[str], name: str, help_text: str, samples: Iterable[tuple[str, int]]
) -> None:
    # HELP text escapes only backslash and newline (the exposition format's rule for HELP).
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    lines.append(f"# HELP {name} {escaped}")
    lines.append(f"# TYPE {name} counter")
    lines.extend(f"{name}{labels} {value}" for labels, value in samples)


# -- HTTP -----------------------------------------------------------------------------------------
_METRICS_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
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
    """One moment of what the probes report (processing.runner.RunnerHealth)."""

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

    def _respond(self, path: str) -> tuple[HTTPStatus, str, bytes]:
        route = urlsplit(path).path
        if route == "/metrics":
            label = self._tenant_label
            body = self._accounting.prometheus(tenant_label=label)
            body += "".join(source(label) for source in self._sources)
            if self._health is not None:
                body += self._health().prometheus()
            return HTTPStatus.OK, _METRICS_TYPE, body.encode()
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
            status, content_type, body = owner._respond(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            # Request lines go to structlog at debug, not to stderr.
            log.debug("accounting_http_request", request=format % args)

    return Handler


__all__ = [
    "DEFAULT_METRICS_HOST",
    "EVENTS",
    "HOLD_REASONS",
    "OUTCOMES",
    "UNKNOWN_TENANT",
    "Accounting",
    "AccountingServer",
    "Event",
    "HealthSnapshot",
    "HealthSource",
    "MetricsSource",
    "escape_label_value",
]
