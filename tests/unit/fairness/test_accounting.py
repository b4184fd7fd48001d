"""Accounting: a scripted run's counts, tenantless quarantines, Prometheus text, the HTTP views."""

from __future__ import annotations

import json
import re
import sys
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
    TransientError,
)
from boost_tenancy.fairness.accounting import UNKNOWN_TENANT, Accounting, escape_label_value
from boost_tenancy.fairness.accounting_server import AccountingServer
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import Inbox, unique_queue, wait_until

A = TenantId("org-A")
B = TenantId("org-B")
FAST = RetryPolicy(max_attempts=3, base_delay_ms=10, max_delay_ms=10, jitter=0.0)

_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(
    rf"(?P<name>{_NAME})(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*)\}})? (?P<value>[0-9]+)"
)
HELP = re.compile(r"# HELP (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*) \S.*")
TYPE = re.compile(r"# TYPE (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*) counter")
ZERO = {
    "admitted": 0,
    "deferred": 0,
    "held_rate": 0,
    "held_concurrency": 0,
    "expired": 0,
    "processed": 0,
    "failed": 0,
    "retried": 0,
    "dead_lettered": 0,
    "quarantined": 0,
    "stale": 0,
    "unsettled": 0,
    "publish_refused_rate": 0,
    "publish_refused_size": 0,
    "publish_refused_backlog": 0,
}


class Scripted(TenantProcessor):
    """ok succeeds, permanent fails for good, flaky fails its first attempt and then succeeds."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        kind = message.data["kind"]
        if kind == "permanent":
            raise PermanentError("cannot be handled")
        if kind == "flaky" and message.attempt == 1:
            raise TransientError("try again")


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], int]]:
    """Check every line against the text format; return the samples."""
    assert text.endswith("\n")
    samples: list[tuple[str, dict[str, str], int]] = []
    helped: set[str] = set()
    typed: set[str] = set()
    for line in text.splitlines():
        if match := HELP.fullmatch(line):
            helped.add(match["name"])
        elif match := TYPE.fullmatch(line):
            typed.add(match["name"])
        else:
            match = SAMPLE.fullmatch(line)
            assert match is not None, line
            assert match["name"] in helped and match["name"] in typed, line
            labels = dict(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', match["labels"] or ""))
            samples.append((match["name"], labels, int(match["value"])))
    return samples


def test_counts_match_a_scripted_run(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    producer = TenantProducer(transport)
    script = {"ok": 7, "permanent": 3, "flaky": 4}
    for kind, count in script.items():
        for _ in range(count):
            producer.send(queue, A, {"kind": kind})
    producer.send(queue, B, {"kind": "ok"})
    producer.send(queue, B, {"kind": "permanent"})
    accounting = Accounting()
    runner = ProcessorRunner(
        Scripted(queue),
        InMemoryTransport(broker),
        [A, B],
        error_store=store,
        settings=RunnerSettings(workers=3, prefetch=20, dispatch=DispatchSettings(retry=FAST)),
        observers=[accounting],
    )
    runner.start()
    try:
        assert wait_until(
            lambda: (
                accounting.snapshot(A)["processed"] == 11
                and accounting.snapshot(A)["dead_lettered"] == 3
                and accounting.snapshot(B)["dead_lettered"] == 1
            )
        )
    finally:
        assert runner.stop(grace_s=5)
    assert accounting.snapshot(A) == {
        **ZERO,
        "processed": 11,
        "retried": 4,
        "dead_lettered": 3,
        "failed": 7,
    }
    assert accounting.snapshot("org-B") == {
        **ZERO,
        "processed": 1,
        "dead_lettered": 1,
        "failed": 1,
    }
    assert accounting.snapshot(TenantId("org-never-seen")) == ZERO
    assert set(accounting.snapshot_all()) == {"org-A", "org-B"}


def test_quarantine_without_a_valid_tenant_is_counted_under_unknown(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    accounting = Accounting()
    dispatcher = Dispatcher(Scripted(queue), transport, store, observers=[accounting])
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    for properties in ({}, {"tenantUUID": "not a tenant!"}, {"tenantUUID": "org-B"}):
        transport.send(queue, WireMessage(body="{}", properties=properties))
    assert wait_until(lambda: len(inbox) == 3)
    outcomes = [dispatcher.dispatch(A, delivery) for delivery in list(inbox.items)]
    assert outcomes == ["quarantined"] * 3
    assert accounting.snapshot(None)["quarantined"] == 2
    assert accounting.snapshot(B)["quarantined"] == 1  # under the tenant the message claimed
    assert accounting.snapshot(A)["quarantined"] == 0
    everything = accounting.snapshot_all()
    assert everything[UNKNOWN_TENANT]["quarantined"] == 2
    samples = parse_exposition(accounting.prometheus(tenant_label=True))
    assert (
        "boost_tenancy_messages_total",
        {"tenant": "_unknown", "outcome": "quarantined"},
        2,
    ) in (samples)


def scripted_accounting() -> Accounting:
    accounting = Accounting()
    for _ in range(5):
        accounting.on_outcome(A, "cmd", "processed")
    accounting.on_outcome(B, "cmd", "processed")
    accounting.on_outcome(A, "cmd", "retried")
    accounting.on_outcome(A, "cmd", "deferred")
    accounting.on_outcome(A, "cmd", "deferred")
    accounting.on_outcome(None, "cmd", "quarantined")
    accounting.record(A, "admitted", 6)
    accounting.record(A, "held_rate")
    accounting.record(B, "held_concurrency")
    accounting.record(A, "expired", 2)
    return accounting


def test_holds_are_counted_apart_from_the_deferred_outcome() -> None:
    snapshot = scripted_accounting().snapshot(A)
    assert (snapshot["deferred"], snapshot["held_rate"], snapshot["admitted"]) == (2, 1, 6)
    assert (snapshot["held_concurrency"], snapshot["expired"]) == (0, 2)


def test_prometheus_sums_across_tenants_by_default() -> None:
    text = scripted_accounting().prometheus()
    samples = parse_exposition(text)
    assert all("tenant" not in labels for _, labels, _ in samples)
    by_outcome = {
        labels["outcome"]: value
        for name, labels, value in samples
        if name == "boost_tenancy_messages_total"
    }
    assert by_outcome == {
        "processed": 6,
        "deferred": 2,
        "retried": 1,
        "dead_lettered": 0,
        "quarantined": 1,
        "stale": 0,
        "unsettled": 0,
    }
    assert ("boost_tenancy_admitted_total", {}, 6) in samples
    reasons = {
        labels["reason"]: value
        for name, labels, value in samples
        if name == "boost_tenancy_held_total"
    }
    assert reasons == {"rate": 1, "concurrency": 1}
    for name in ("boost_tenancy_messages_total", "boost_tenancy_admitted_total"):
        assert f"# HELP {name} " in text
        assert f"# TYPE {name} counter" in text


def test_prometheus_tenant_label_is_opt_in() -> None:
    samples = parse_exposition(scripted_accounting().prometheus(tenant_label=True))
    processed = {
        labels["tenant"]: value
        for name, labels, value in samples
        if name == "boost_tenancy_messages_total" and labels["outcome"] == "processed"
    }
    assert processed == {"org-A": 5, "org-B": 1, "_unknown": 0}


def test_an_empty_accounting_still_exposes_every_series() -> None:
    samples = parse_exposition(Accounting().prometheus())
    assert len(samples) == 7 + 1 + 2 + 3  # outcomes, admitted, held, publish refusals
    assert all(value == 0 for _, _, value in samples)
    assert parse_exposition(Accounting().prometheus(tenant_label=True)) == []


def test_label_values_are_escaped() -> None:
    raw = 'a"b\\c\nd'
    escaped = escape_label_value(raw)
    assert escaped == 'a\\"b\\\\c\\nd'
    line = f'boost_tenancy_messages_total{{tenant="{escaped}",outcome="processed"}} 1'
    assert SAMPLE.fullmatch(line) is not None
    assert SAMPLE.fullmatch(f'boost_tenancy_messages_total{{tenant="{raw}"}} 1') is None


def test_record_refuses_unknown_events_and_negative_counts() -> None:
    accounting = Accounting()
    with pytest.raises(ValueError, match="unknown accounting event"):
        accounting.record(A, "processed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        accounting.record(A, "admitted", -1)
    accounting.on_outcome(A, "cmd", "something-new")  # an observer never raises
    assert accounting.snapshot_all() == {}


def test_counting_from_many_threads_loses_nothing() -> None:
    accounting = Accounting()

    def count() -> None:
        for _ in range(5000):
            accounting.on_outcome(A, "cmd", "processed")
            accounting.record(A, "admitted")

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    snapshot = accounting.snapshot(A)
    assert (snapshot["processed"], snapshot["admitted"]) == (40_000, 40_000)


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.mark.parametrize("tenant_label", [False, True])
def test_http_server_serves_metrics_and_tenant_views(tenant_label: bool) -> None:
    server = AccountingServer(scripted_accounting(), port=0, tenant_label=tenant_label)
    server.serve_tenants([TenantId("org-new")])
    server.start()
    try:
        assert server.port > 0
        status, content_type, text = fetch(f"{server.url}/metrics")
        assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
        # Exactly the accounting's own families and samples, parsed as a scraper parses them,
        # beside the process's and the runtime's.
        served = {f.name: f for f in text_string_to_metric_families(text)}
        own = {f.name: f for f in text_string_to_metric_families(server.families())}
        for name, family in own.items():
            assert (served[name].documentation, served[name].type) == (
                family.documentation,
                family.type,
            )
            assert served[name].samples == family.samples
        assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info"} <= set(
            served
        )
        samples = parse_exposition(server.families())
        assert any("tenant" in labels for _, labels, _ in samples) is tenant_label

        status, content_type, body = fetch(f"{server.url}/tenants/org-A")
        assert (status, content_type) == (200, "application/json")
        view = json.loads(body)
        assert view["tenant"] == "org-A"
        assert (view["processed"], view["failed"], view["deferred"]) == (5, 1, 2)

        # A tenant the process serves, before its first message: zeros.
        status, _, body = fetch(f"{server.url}/tenants/org-new")
        assert status == 200
        assert json.loads(body) == {"tenant": "org-new", **ZERO}

        # A valid id this process neither serves nor ever counted is not found, like a bad one.
        paths = ("/tenants/org-elsewhere", "/tenants/bad%20id", "/tenants/_unknown", "/tenants/")
        for path in (*paths, "/nothing-here"):
            status, _, body = fetch(f"{server.url}{path}")
            assert status == 404, path
            assert json.loads(body) == {"error": "not found"}
    finally:
        server.stop()


def test_http_server_refuses_writes_with_405_and_answers_head() -> None:
    server = AccountingServer(scripted_accounting(), port=0)
    server.start()
    try:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            request = urllib.request.Request(f"{server.url}/metrics", data=b"x", method=method)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code == 405, method
            assert refused.value.headers["Allow"] == "GET, HEAD"
            assert refused.value.headers["Content-Type"] == "application/json"
            assert json.loads(refused.value.read()) == {
                "error": "method not allowed",
                "allow": ["GET", "HEAD"],
            }
        head = urllib.request.Request(f"{server.url}/metrics", method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as response:
            assert response.status == 200
            assert int(response.headers["Content-Length"]) > 0
            assert response.read() == b""
    finally:
        server.stop()


def test_http_server_speaks_openmetrics_when_the_scraper_asks_for_it() -> None:
    server = AccountingServer(scripted_accounting(), port=0)
    server.start()
    try:
        request = urllib.request.Request(
            f"{server.url}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            content_type = response.headers["Content-Type"]
            text = response.read().decode()
        assert content_type.startswith("application/openmetrics-text; version=1.0.0")
        assert text.endswith("# EOF\n")
        assert 'boost_tenancy_messages_total{outcome="processed"} 6.0' in text
    finally:
        server.stop()


def test_without_prometheus_client_metrics_serves_the_toolkits_families_as_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `metrics` extra is optional: without it /metrics is the toolkit's own text."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    server = AccountingServer(scripted_accounting(), port=0)
    server.start()
    try:
        status, content_type, text = fetch(f"{server.url}/metrics")
        assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert text == server.families()
        assert "process_cpu_seconds_total" not in text
    finally:
        server.stop()
