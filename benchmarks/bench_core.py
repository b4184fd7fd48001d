"""Core throughput benchmark of boost_tenancy against a real ActiveMQ broker over STOMP, or an
AMQP 1.0 broker with --transport amqp (measurements 1 and 2 against raw python-qpid-proton, in
bench_amqp.py).

Three measurements, each compared with a raw stomp.py baseline run in the same rounds:

1. consume rate: a ProcessorRunner with a no-op handler against a raw client-individual subscriber;
2. publish rate: TenantProducer.batch() against raw sends confirmed by one receipt on the last;
3. 1,000 tenants: subscribe time, RSS and consume rate of one runner serving many tenants,
   against a runner serving one tenant.

Every measurement uses fresh queue names; message preloading is never timed. Figures are medians
over the rounds, and every ratio is taken within one round before its median is taken, so the
noise of a shared machine affects baseline and candidate alike.

    .venv/bin/python benchmarks/bench_core.py [--messages N] [--rounds R] [--tenants T]
                                              [--json out.json]
    .venv/bin/python benchmarks/bench_core.py --transport amqp [--url amqp://user:pass@host:5672]

The broker is read from BOOST_BROKER_URL (default stomp://127.0.0.1:61613),
with BOOST_BROKER_USER and BOOST_BROKER_PASSWORD when it requires a login (Artemis), as the test
suite reads them. Its flavour (ActiveMQ Classic or Artemis) is read from the transport once
connected and printed with its capabilities; both the raw baselines and the runner subscribe with
the prefetch headers the transport sends to that flavour (Artemis counts prefetch in bytes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import queue as queue_mod
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

import bench_amqp
import stomp
from bench_common import (
    BATCH_TARGET,
    CONSUME_TARGET,
    BenchmarkError,
    Completion,
    CompletionObserver,
    Sample,
    Series,
    interleaved,
    noop_processor,
    ratio,
    run_sections,
    unique_queue,
    verdict,
    vm_rss_kib,
    within,
)

from boost_tenancy import (
    BoostTenancyError,
    ProcessorRunner,
    RunnerSettings,
    TenantProducer,
)
from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.observability import configure_logging
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.base import SubscribeRequest
from boost_tenancy.transports.stomp import (
    BrokerFlavour,
    StompSettings,
    StompSubscription,
    StompTransport,
)

PRELOAD_CHUNK = 1000
"""Messages per preload transaction."""
HEARTBEAT_MS = StompSettings().heartbeat_ms
"""The raw baselines use the toolkit's connection options, so only the client code differs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    host: str
    port: int
    messages: int
    rounds: int
    tenants: int
    per_tenant: int
    prefetch: int
    workers: int
    tenant_prefetch: int
    confirmed_messages: int
    timeout_s: float
    warmup: bool
    sections: tuple[str, ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    flavour: BrokerFlavour = BrokerFlavour.OTHER
    """Set once the broker answered (main): decides the raw baselines' prefetch headers."""

    @property
    def stomp_settings(self) -> StompSettings:
        return StompSettings(
            host=self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            confirm_timeout_s=self.timeout_s,
        )

    def prefetch_headers(self, prefetch: int) -> dict[str, str]:
        """The SUBSCRIBE headers the transport sends for prefetch on this broker, so the raw
        baselines ask the broker for the same window as the runner."""
        return self.flavour.prefetch_headers(prefetch, self.stomp_settings.artemis_window_bytes)

    def report(self) -> dict[str, Any]:
        """The configuration for the JSON report: no password, the flavour by name."""
        fields = asdict(self)
        del fields["password"]
        fields["flavour"] = self.flavour.value
        return fields


# -- small helpers --------------------------------------------------------------------------------
def json_body(index: int, tenant: str) -> str:
    """The body the toolkit sends for {"n": index} (encode_json_body: tenantUUID appended)."""
    return json.dumps({"n": index, "tenantUUID": tenant}, ensure_ascii=False)


def connected_transport(cfg: Config, transport: StompTransport | None = None) -> StompTransport:
    """A StompTransport connected within the timeout."""
    transport = transport or StompTransport(cfg.stomp_settings)
    within(cfg.timeout_s, f"connect to {cfg.host}:{cfg.port}", transport.connect)
    return transport


# -- raw stomp.py -------------------------------------------------------------------------------
class RawListener(stomp.ConnectionListener):  # type: ignore[misc]
    """Routes MESSAGE frames to a callback; ERROR frames and receipts are reported."""

    def __init__(self, on_message: Callable[[dict[str, str], bytes], None] | None = None) -> None:
        self._on_message = on_message
        self.receipts: dict[str, threading.Event] = {}
        self.errors: list[str] = []
        self.completion: Completion | None = None

    def expect(self, receipt: str) -> threading.Event:
        event = threading.Event()
        self.receipts[receipt] = event
        return event

    def on_message(self, frame: Any) -> None:
        if self._on_message is not None:
            self._on_message(frame.headers, frame.body)

    def on_receipt(self, frame: Any) -> None:
        event = self.receipts.get(frame.headers.get("receipt-id", ""))
        if event is not None:
            event.set()

    def on_error(self, frame: Any) -> None:
        body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else ""
        text = f"ERROR frame: {frame.headers.get('message', '')} {body.strip()}".strip()
        self.errors.append(text)
        if self.completion is not None:
            self.completion.problem(text)
        for event in self.receipts.values():
            event.set()


@contextmanager
def raw_connection(cfg: Config, listener: RawListener) -> Iterator[Any]:
    """A connected stomp.Connection12 with the toolkit's options; disconnected on exit."""
    conn = stomp.Connection12(
        [(cfg.host, cfg.port)],
        heartbeats=(HEARTBEAT_MS, HEARTBEAT_MS),
        auto_content_length=False,
        auto_decode=False,
        reconnect_attempts_max=1,
    )
    conn.set_listener("bench", listener)
    conn.connect(cfg.username, cfg.password, wait=False)
    deadline = time.monotonic() + cfg.timeout_s
    while not conn.is_connected():
        if time.monotonic() > deadline or listener.errors:
            conn.disconnect()
            raise BenchmarkError(
                f"raw connect to {cfg.host}:{cfg.port}: no CONNECTED frame within "
                f"{cfg.timeout_s:.0f}s {'; '.join(listener.errors)}"
            )
        time.sleep(0.01)
    try:
        yield conn
    finally:
        try:
            conn.disconnect()
        except Exception as exc:  # a failed measurement may leave a dead socket behind
            print(f"warning: raw disconnect failed: {exc}", file=sys.stderr)


def await_receipt(event: threading.Event, listener: RawListener, cfg: Config, what: str) -> None:
    if not event.wait(cfg.timeout_s):
        raise BenchmarkError(f"{what}: no receipt within {cfg.timeout_s:.0f}s")
    if listener.errors:
        raise BenchmarkError(f"{what}: {'; '.join(listener.errors[:5])}")


def drain(cfg: Config, queue: str, expected: int) -> None:
    """Consume (auto-ack) what a publish measurement left behind, so the broker stays empty."""
    completion = Completion(expected, f"drain of {queue}")
    listener = RawListener(lambda _h, _b: completion.add())
    listener.completion = completion
    with raw_connection(cfg, listener) as conn:
        conn.subscribe("/queue/" + queue, "drain", ack="auto", headers=cfg.prefetch_headers(1000))
        completion.wait(cfg.timeout_s)
        conn.unsubscribe("drain")


# -- toolkit pieces -------------------------------------------------------------------------------
def preload(cfg: Config, queue: str, tenants: Sequence[str], per_tenant: int) -> None:
    """Put per_tenant messages of every tenant on queue, tenants interleaved (not timed)."""
    transport = connected_transport(cfg)
    try:
        producer = TenantProducer(transport)
        order = [(i, t) for i in range(per_tenant) for t in tenants]
        for start in range(0, len(order), PRELOAD_CHUNK):
            with producer.batch() as batch:
                for index, tenant in order[start : start + PRELOAD_CHUNK]:
                    batch.send(queue, tenant, {"n": index})
    finally:
        transport.close()


class TimedStompTransport(StompTransport):
    """StompTransport that stamps its first subscribe call (the start of consumption)."""

    def __init__(self, settings: StompSettings) -> None:
        super().__init__(settings)
        self.first_subscribe_at = 0.0
        self.first_subscribe_cpu = 0.0

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[StompSubscription]:
        if not self.first_subscribe_at:
            self.first_subscribe_at = time.perf_counter()
            self.first_subscribe_cpu = time.process_time()
        return super().subscribe_many(requests)


@dataclass(slots=True)
class RunnerResult:
    messages: int
    start_s: float
    """Duration of runner.start() (connect, workers, every subscription confirmed)."""
    consume_s: float
    """First subscribe call to the last message acknowledged."""
    consume_cpu_s: float
    """Process CPU time (all threads) over consume_s."""
    handled_during_start: int
    rss_before_kib: int
    rss_after_start_kib: int
    rss_after_consume_kib: int


def run_runner(
    cfg: Config, queue: str, tenants: Sequence[str], *, expected: int, workers: int, prefetch: int
) -> RunnerResult:
    """Consume expected preloaded messages of tenants from queue with a ProcessorRunner.

    With expected=0 only start() and memory are measured.
    """
    completion = Completion(expected, f"ProcessorRunner on {queue}")
    transport = TimedStompTransport(cfg.stomp_settings)
    with tempfile.TemporaryDirectory(prefix="bench-core-") as tmp:
        store = SQLiteErrorStore(Path(tmp) / "errors.sqlite3")
        runner = ProcessorRunner(
            noop_processor(queue),
            transport,
            list(tenants),
            error_store=store,
            settings=RunnerSettings(workers=workers, prefetch=prefetch),
            observers=[CompletionObserver(completion)],
        )
        rss_before = vm_rss_kib()
        started = time.perf_counter()
        try:
            within(cfg.timeout_s, f"start() of a runner of {len(tenants)} tenant(s)", runner.start)
        except BaseException:
            # The run ends here; stop() would wait on the transport a hung connect still holds.
            store.close()
            raise
        try:
            start_s = time.perf_counter() - started
            handled_during_start = completion.count
            rss_after_start = vm_rss_kib()
            if expected:
                finished, finished_cpu = completion.wait(cfg.timeout_s), completion.finished_cpu
            else:
                finished, finished_cpu = time.perf_counter(), time.process_time()
            rss_after_consume = vm_rss_kib()
        finally:
            if not runner.stop(grace_s=10.0):
                print("warning: a handler was still running at stop", file=sys.stderr)
            store.close()
    return RunnerResult(
        messages=expected,
        start_s=start_s,
        consume_s=finished - transport.first_subscribe_at,
        consume_cpu_s=finished_cpu - transport.first_subscribe_cpu,
        handled_during_start=handled_during_start,
        rss_before_kib=rss_before,
        rss_after_start_kib=rss_after_start,
        rss_after_consume_kib=rss_after_consume,
    )


# -- 1. consume rate ------------------------------------------------------------------------------
def consume_raw(cfg: Config, messages: int, *, hand_off: bool) -> Sample:
    """Raw stomp.py subscriber, no-op handler, individual acks.

    hand_off: frames go through a queue.Queue to one worker thread that handles and acks them
    (the toolkit's architecture); otherwise the receiving thread handles and acks each frame.
    """
    tenant = "tenant-consume"
    queue = unique_queue("consume-raw")
    preload(cfg, queue, [tenant], messages)
    completion = Completion(messages, f"raw subscriber on {queue}")
    work: queue_mod.Queue[tuple[dict[str, str], bytes] | None] = queue_mod.Queue()
    conn_box: list[Any] = []

    def handle(_headers: dict[str, str], _body: bytes) -> None:
        return None

    def worker() -> None:
        while (item := work.get()) is not None:
            headers, body = item
            handle(headers, body)
            conn_box[0].ack(headers["ack"])
            completion.add()

    def on_receiver_thread(headers: dict[str, str], body: bytes) -> None:
        handle(headers, body)
        conn_box[0].ack(headers["ack"])
        completion.add()

    listener = RawListener(lambda h, b: work.put((h, b)) if hand_off else on_receiver_thread(h, b))
    listener.completion = completion
    thread = threading.Thread(target=worker, name="raw-worker", daemon=True)
    thread.start()
    try:
        with raw_connection(cfg, listener) as conn:
            conn_box.append(conn)
            started, started_cpu = time.perf_counter(), time.process_time()
            # Where the producer put them and the runner reads them under the default (routed)
            # topology: the tenant's own queue, which needs no selector.
            conn.subscribe(
                "/queue/" + DEFAULT_ROUTING.physical(queue, tenant),
                "raw-1",
                ack="client-individual",
                headers=cfg.prefetch_headers(cfg.prefetch),
            )
            finished = completion.wait(cfg.timeout_s)
            conn.unsubscribe("raw-1")
    finally:
        work.put(None)
        thread.join(5.0)
    return Sample.of(messages, finished - started, completion.finished_cpu - started_cpu)


def consume_toolkit(cfg: Config, messages: int, workers: int) -> Sample:
    tenant = "tenant-consume"
    queue = unique_queue("consume-runner")
    preload(cfg, queue, [tenant], messages)
    result = run_runner(
        cfg, queue, [tenant], expected=messages, workers=workers, prefetch=cfg.prefetch
    )
    return Sample.of(messages, result.consume_s, result.consume_cpu_s)


# -- 2. publish rate ------------------------------------------------------------------------------
Confirm = Literal["last", "each", "transaction"]


def publish_raw(
    cfg: Config, messages: int, *, confirm: Confirm, trace_and_type: bool = False
) -> Sample:
    """Raw sends with the toolkit's properties and body.

    confirm: "last" puts a receipt on the last send only, "each" on every send (each awaited),
    "transaction" sends inside one transaction whose COMMIT carries the receipt.
    trace_and_type: also the two headers every SEND of the toolkit carries besides them, a new
    traceparent and the text content-type, so the broker stores the same message.
    """
    tenant = "tenant-publish"
    # Where TenantProducer sends under the default (routed) topology: the tenant's own queue.
    queue = DEFAULT_ROUTING.physical(unique_queue("publish-raw"), tenant)
    destination = "/queue/" + queue
    listener = RawListener()
    with raw_connection(cfg, listener) as conn:
        started, started_cpu = time.perf_counter(), time.process_time()
        tx = f"tx-{uuid.uuid4().hex}" if confirm == "transaction" else None
        if tx is not None:
            conn.begin(tx)
        for index in range(messages):
            message_id = str(uuid.uuid4())
            headers = {
                "tenantUUID": tenant,
                "boostMessageId": message_id,
                "boostAttempt": "1",
                "persistent": "true",
                "correlation-id": message_id,
            }
            if tx is not None:
                headers["transaction"] = tx
            if trace_and_type:
                headers["traceparent"] = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
                headers["content-type"] = "text/plain;charset=utf-8"
            event: threading.Event | None = None
            if confirm == "each" or (confirm == "last" and index == messages - 1):
                receipt = f"r-{uuid.uuid4().hex}"
                headers["receipt"] = receipt
                event = listener.expect(receipt)
            conn.send(destination, json_body(index, tenant).encode("utf-8"), headers=headers)
            if event is not None:
                await_receipt(event, listener, cfg, f"raw send {index + 1} to {queue}")
        if tx is not None:
            receipt = f"r-{uuid.uuid4().hex}"
            event = listener.expect(receipt)
            conn.commit(tx, headers={"receipt": receipt})
            await_receipt(event, listener, cfg, f"raw commit of {messages} to {queue}")
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - started_cpu
    drain(cfg, queue, messages)
    return Sample.of(messages, elapsed, cpu)


def publish_toolkit(cfg: Config, messages: int, *, batch: bool, atomic: bool = True) -> Sample:
    """TenantProducer: one batch (a transaction, or a receipt on the last) or confirmed sends."""
    tenant = "tenant-publish"
    queue = unique_queue("publish-producer")
    transport = connected_transport(cfg)
    try:
        producer = TenantProducer(transport)
        started, started_cpu = time.perf_counter(), time.process_time()
        if batch:
            with producer.batch(atomic=atomic) as outgoing:
                for index in range(messages):
                    outgoing.send(queue, tenant, {"n": index})
        else:
            for index in range(messages):
                producer.send(queue, tenant, {"n": index})
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - started_cpu
    finally:
        transport.close()
    drain(cfg, DEFAULT_ROUTING.physical(queue, tenant), messages)
    return Sample.of(messages, elapsed, cpu)


# -- 3. many tenants (each run in a fresh process, so RSS figures are its own) --------------------
def tenant_names(count: int) -> list[str]:
    return [f"tenant-{index:05d}" for index in range(count)]


@dataclass(frozen=True, slots=True)
class TenantsJob:
    """What a runner process of measurement 3 consumes."""

    queue: str
    tenants: int
    per_tenant: int
    prefetch: int


def tenants_child(cfg: Config, job: TenantsJob, results: Connection) -> None:
    """In a fresh process: consume the preloaded messages of job with one runner.

    Sends ("ok", RunnerResult fields) or ("error", text) through results.
    """
    configure_logging("console", "INFO")
    try:
        result = run_runner(
            cfg,
            job.queue,
            tenant_names(job.tenants),
            expected=job.tenants * job.per_tenant,
            workers=cfg.workers,
            prefetch=job.prefetch,
        )
    except Exception as exc:
        results.send(("error", f"{type(exc).__name__}: {exc}"))
    else:
        results.send(("ok", asdict(result)))
    finally:
        results.close()


def run_tenants(
    cfg: Config, queue: str, tenants: int, per_tenant: int, prefetch: int
) -> RunnerResult:
    """Preload here (not timed), then run the runner in a fresh process of its own."""
    if per_tenant:
        preload(cfg, queue, tenant_names(tenants), per_tenant)
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(
        target=tenants_child,
        args=(cfg, TenantsJob(queue, tenants, per_tenant, prefetch), sender),
        name=f"bench-tenants-{tenants}",
        daemon=True,
    )
    child.start()
    sender.close()
    # start() and the consumption each have cfg.timeout_s; the interpreter start comes on top.
    limit = 2 * cfg.timeout_s + 30
    try:
        if not receiver.poll(limit):
            raise BenchmarkError(f"{tenants}-tenant runner process: no result within {limit:.0f}s")
        status, payload = receiver.recv()
    except EOFError as exc:
        child.join(5.0)
        raise BenchmarkError(
            f"{tenants}-tenant runner process exited without a result (exit code {child.exitcode})"
        ) from exc
    finally:
        receiver.close()
        child.join(10.0)
        if child.is_alive():
            child.kill()
            child.join(5.0)
    if status != "ok":
        raise BenchmarkError(f"{tenants}-tenant runner process failed: {payload}")
    return RunnerResult(**payload)


# -- rounds, medians, table -----------------------------------------------------------------------
def bench_consume(cfg: Config) -> tuple[list[Series], list[str]]:
    print("1. consume rate", file=sys.stderr)
    n = cfg.messages
    if cfg.warmup:
        warm = min(n, 1000)
        consume_raw(cfg, warm, hand_off=True)
        consume_toolkit(cfg, warm, cfg.workers)
    failures: list[str] = []
    rates, cpu = interleaved(
        cfg.rounds,
        [
            (
                "hand_off",
                "raw stomp.py, ack on 1 worker thread",
                lambda: consume_raw(cfg, n, hand_off=True),
            ),
            (
                "runner",
                f"ProcessorRunner, workers={cfg.workers}",
                lambda: consume_toolkit(cfg, n, cfg.workers),
            ),
            (
                "receiver",
                "raw stomp.py, ack on receiver thread",
                lambda: consume_raw(cfg, n, hand_off=False),
            ),
            ("runner1", "ProcessorRunner, workers=1 (info)", lambda: consume_toolkit(cfg, n, 1)),
        ],
        failures,
    )
    target = ratio("runner / worker-thread baseline", rates["runner"], rates["hand_off"])
    rows = [
        *rates.values(),
        target,
        ratio("runner / receiver-thread baseline", rates["runner"], rates["receiver"]),
        ratio("runner workers=1 / worker-thread baseline", rates["runner1"], rates["hand_off"]),
        *cpu.values(),
        ratio("CPU per message: runner / worker-thread", cpu["runner"], cpu["hand_off"]),
    ]
    notes = [
        f"target: runner >= {CONSUME_TARGET} x worker-thread baseline: "
        + verdict(target.median, CONSUME_TARGET),
        "rate: messages / (subscribe call -> last ack written); CPU: this process, all threads",
    ]
    return rows, [*notes, *failures]


def bench_publish(cfg: Config) -> tuple[list[Series], list[str]]:
    print("2. publish rate", file=sys.stderr)
    n, m = cfg.messages, cfg.confirmed_messages
    if cfg.warmup:
        publish_raw(cfg, min(n, 1000), confirm="last")
        publish_toolkit(cfg, min(n, 1000), batch=True)
    failures: list[str] = []
    rates, cpu = interleaved(
        cfg.rounds,
        [
            (
                "raw",
                "raw stomp.py, receipt on last send",
                lambda: publish_raw(cfg, n, confirm="last"),
            ),
            (
                "raw_tx",
                "raw stomp.py, one transaction (info)",
                lambda: publish_raw(cfg, n, confirm="transaction"),
            ),
            (
                "raw_tx_same",
                "raw stomp.py, one transaction, + traceparent, content-type (info)",
                lambda: publish_raw(cfg, n, confirm="transaction", trace_and_type=True),
            ),
            (
                "batch",
                "TenantProducer.batch(atomic=False), receipt on last (info)",
                lambda: publish_toolkit(cfg, n, batch=True, atomic=False),
            ),
            (
                "batch_tx",
                "TenantProducer.batch(), streamed transaction",
                lambda: publish_toolkit(cfg, n, batch=True, atomic=True),
            ),
            (
                "raw_each",
                f"raw stomp.py, receipt on each (n={m})",
                lambda: publish_raw(cfg, m, confirm="each"),
            ),
            (
                "send",
                f"TenantProducer.send, each confirmed (n={m})",
                lambda: publish_toolkit(cfg, m, batch=False),
            ),
        ],
        failures,
    )
    target = ratio("batch() / raw receipt-on-last", rates["batch_tx"], rates["raw"])
    rows = [
        *rates.values(),
        target,
        ratio("batch(atomic=False) / raw receipt-on-last", rates["batch"], rates["raw"]),
        ratio("batch() / raw transaction (info)", rates["batch_tx"], rates["raw_tx"]),
        ratio(
            "batch() / raw transaction, same headers (info)",
            rates["batch_tx"],
            rates["raw_tx_same"],
        ),
        ratio("send / raw receipt-on-each (info)", rates["send"], rates["raw_each"]),
        *cpu.values(),
        ratio("CPU per message: batch() / raw receipt-on-last", cpu["batch_tx"], cpu["raw"]),
    ]
    notes = [
        f"target: batch() >= {BATCH_TARGET} x raw receipt-on-last: "
        + verdict(target.median, BATCH_TARGET),
        "rate: messages / (first send -> receipt of the last send or of the commit)",
    ]
    return rows, [*notes, *failures]


def bench_tenants(cfg: Config) -> tuple[list[Series], list[str]]:
    print("3. many tenants", file=sys.stderr)
    t, p = cfg.tenants, cfg.tenant_prefetch
    total = t * cfg.per_tenant
    results: dict[str, list[RunnerResult]] = {"many": [], "idle": [], "one": [], "one_p": []}
    # Each variant's queue is named once per run and read again by every round (each round
    # consumes all it preloaded): new names each round left thousands of tenant queues behind
    # per run, and later rounds ran against a broker that slowed under them (Artemis) or ran
    # out of heap (Classic, 2026-11-29).
    queues = {key: unique_queue(f"tenants{t}-{key.replace('_', '-')}") for key in results}
    variants: list[tuple[str, Callable[[], RunnerResult]]] = [
        ("many", lambda: run_tenants(cfg, queues["many"], t, cfg.per_tenant, p)),
        ("idle", lambda: run_tenants(cfg, queues["idle"], t, 0, p)),
        ("one", lambda: run_tenants(cfg, queues["one"], 1, total, p)),
        ("one_p", lambda: run_tenants(cfg, queues["one_p"], 1, total, cfg.prefetch)),
    ]
    for round_index in range(cfg.rounds):
        shift = round_index % len(variants)
        for key, measure in [*variants[shift:], *variants[:shift]]:
            print(f"  round {round_index + 1}/{cfg.rounds}: {key} ...", file=sys.stderr)
            results[key].append(measure())

    def series(key: str, label: str, unit: str, value: Callable[[RunnerResult], float]) -> Series:
        return Series(label, unit, [value(r) for r in results[key]])

    def mib(kib: int) -> float:
        return kib / 1024

    many_rate = series("many", f"{t} tenants x {cfg.per_tenant}, prefetch={p}", "msg/s", rate_of)
    one_rate = series("one", f"1 tenant x {total}, prefetch={p}", "msg/s", rate_of)
    one_p_rate = series("one_p", f"1 tenant x {total}, prefetch={cfg.prefetch}", "msg/s", rate_of)
    rows = [
        series("many", f"{t} tenants: start() (subscribe all)", "s", lambda r: r.start_s),
        series(
            "many", f"{t} tenants: handled during start()", "msgs", lambda r: r.handled_during_start
        ),
        series("many", f"{t} tenants: RSS before start()", "MiB", lambda r: mib(r.rss_before_kib)),
        series(
            "many", f"{t} tenants: RSS after start()", "MiB", lambda r: mib(r.rss_after_start_kib)
        ),
        series(
            "many",
            f"{t} tenants: RSS growth in start()",
            "MiB",
            lambda r: mib(r.rss_after_start_kib - r.rss_before_kib),
        ),
        series(
            "many",
            f"{t} tenants: RSS after consuming",
            "MiB",
            lambda r: mib(r.rss_after_consume_kib),
        ),
        series("idle", f"{t} tenants, empty queue: start()", "s", lambda r: r.start_s),
        series(
            "idle",
            f"{t} tenants, empty queue: RSS growth in start()",
            "MiB",
            lambda r: mib(r.rss_after_start_kib - r.rss_before_kib),
        ),
        series("one", "1 tenant: start()", "s", lambda r: r.start_s),
        series(
            "one",
            "1 tenant: RSS growth in start()",
            "MiB",
            lambda r: mib(r.rss_after_start_kib - r.rss_before_kib),
        ),
        many_rate,
        one_rate,
        one_p_rate,
        ratio(f"{t} tenants / 1 tenant (prefetch={p})", many_rate, one_rate),
        ratio(f"{t} tenants / 1 tenant (prefetch={cfg.prefetch})", many_rate, one_p_rate),
        series("many", f"CPU per message: {t} tenants", "us/msg", cpu_of),
        series("one", f"CPU per message: 1 tenant, prefetch={p}", "us/msg", cpu_of),
        series("one_p", f"CPU per message: 1 tenant, prefetch={cfg.prefetch}", "us/msg", cpu_of),
    ]
    notes = [
        "rate: messages / (first subscribe call -> last message acknowledged); subscribing is "
        "included, since messages flow while it goes on",
        f"each run is a fresh process; workers={cfg.workers}",
    ]
    return rows, notes


def rate_of(result: RunnerResult) -> float:
    return result.messages / result.consume_s


def cpu_of(result: RunnerResult) -> float:
    return result.consume_cpu_s / result.messages * 1e6


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What the transport learned from the broker's CONNECTED frame."""

    server: str
    flavour: BrokerFlavour
    capabilities: dict[str, bool]

    def describe(self) -> str:
        declared = ", ".join(f"{name}={value}" for name, value in self.capabilities.items())
        return f"{self.server!r}, flavour {self.flavour.value}; capabilities: {declared}"


def broker_info(cfg: Config) -> BrokerInfo:
    try:
        transport = connected_transport(cfg)
    except Exception as exc:
        raise BenchmarkError(f"no STOMP broker at {cfg.host}:{cfg.port}: {exc}") from exc
    try:
        return BrokerInfo(transport.server, transport.flavour, asdict(transport.capabilities))
    finally:
        transport.close()


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--transport",
        choices=["stomp", "amqp"],
        default="stomp",
        help="stomp: the broker of BOOST_BROKER_URL; amqp: --url",
    )
    parser.add_argument(
        "--url",
        help="AMQP 1.0 broker of --transport amqp (default: BOOST_BROKER_AMQP_URL, else "
        f"{bench_amqp.DEFAULT_URL}, the local RabbitMQ)",
    )
    parser.add_argument("--messages", type=int, default=5000, help="messages per run (1, 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenants", type=int, default=1000, help="tenants of measurement 3")
    parser.add_argument("--per-tenant", type=int, default=10, help="messages per tenant (3)")
    parser.add_argument("--prefetch", type=int, default=100, help="prefetch of 1 (both sides)")
    parser.add_argument("--workers", type=int, default=4, help="ProcessorRunner workers")
    parser.add_argument("--tenant-prefetch", type=int, default=1, help="prefetch of 3")
    parser.add_argument(
        "--confirmed-messages",
        type=int,
        default=1000,
        help="messages of the runs confirming each send before the next",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per wait")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    parser.add_argument(
        "--only", choices=["consume", "publish", "tenants"], action="append", help="repeatable"
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    for name in (
        "messages",
        "rounds",
        "tenants",
        "per_tenant",
        "prefetch",
        "workers",
        "confirmed_messages",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return parser, args


def stomp_config(args: argparse.Namespace) -> Config:
    broker = stomp_settings_from_env(os.environ)
    return Config(
        host=broker.host,
        port=broker.port,
        messages=args.messages,
        rounds=args.rounds,
        tenants=args.tenants,
        per_tenant=args.per_tenant,
        prefetch=args.prefetch,
        workers=args.workers,
        tenant_prefetch=args.tenant_prefetch,
        confirmed_messages=args.confirmed_messages,
        timeout_s=args.timeout,
        warmup=not args.no_warmup,
        sections=tuple(args.only or ("consume", "publish", "tenants")),
        username=broker.username,
        password=broker.password,
    )


def amqp_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bench_amqp.AmqpConfig:
    if args.only and "tenants" in args.only:
        parser.error("--only tenants: measurement 3 runs over STOMP only")
    url = args.url or os.environ.get("BOOST_BROKER_AMQP_URL", "").strip() or bench_amqp.DEFAULT_URL
    return bench_amqp.AmqpConfig(
        url=url,
        messages=args.messages,
        rounds=args.rounds,
        prefetch=args.prefetch,
        workers=args.workers,
        confirmed_messages=args.confirmed_messages,
        timeout_s=args.timeout,
        warmup=not args.no_warmup,
        sections=tuple(args.only or ("consume", "publish")),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser, args = parse_args(argv)
    if args.transport == "amqp":
        amqp_cfg = amqp_config(parser, args)
        configure_logging("console", "INFO")
        return bench_amqp.run(amqp_cfg, args.json)
    if args.url is not None:
        parser.error("--url names an AMQP broker: add --transport amqp")
    cfg = stomp_config(args)
    configure_logging("console", "INFO")
    broker = broker_info(cfg)
    cfg = replace(cfg, flavour=broker.flavour)
    header = (
        f"boost_tenancy core benchmark  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n"
        f"broker at {cfg.host}:{cfg.port}: {broker.describe()}\n"
        f"subscribe headers for prefetch={cfg.prefetch} (raw baselines and runner): "
        f"{cfg.prefetch_headers(cfg.prefetch)}\n"
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs; "
        f"stomp.py {stomp.__version__}\n"
        f"messages={cfg.messages} rounds={cfg.rounds} prefetch={cfg.prefetch} "
        f"workers={cfg.workers} tenants={cfg.tenants}x{cfg.per_tenant} "
        f"tenant_prefetch={cfg.tenant_prefetch} confirmed_messages={cfg.confirmed_messages}\n"
        "figures per round (r1..), median over rounds; ratios are taken per round"
    )
    titles = {
        "consume": f"1. Consume rate ({cfg.messages} preloaded messages, prefetch={cfg.prefetch})",
        "publish": f"2. Publish rate ({cfg.messages} persistent messages)",
        "tenants": f"3. {cfg.tenants} tenants on one queue ({cfg.per_tenant} messages each)",
    }
    measurements = {"consume": bench_consume, "publish": bench_publish, "tenants": bench_tenants}
    report: dict[str, Any] = {
        "config": cfg.report(),
        "broker": {
            "server": broker.server,
            "flavour": broker.flavour.value,
            "capabilities": broker.capabilities,
        },
    }
    run_sections(
        header,
        [
            (name, titles[name], partial(measure, cfg))
            for name, measure in measurements.items()
            if name in cfg.sections
        ],
        report,
        args.json,
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchmarkError, BoostTenancyError, TimeoutError) as exc:
        print(f"benchmark failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
