"""The AMQP 1.0 measurements of bench_core.py (--transport amqp): the runner and the producer on
AmqpTransport against raw python-qpid-proton clients on the same broker, in the same rounds.

1. consume rate: a ProcessorRunner (per-tenant routing, no-op handler) against a raw proton
   receiver with the same credit that accepts every message on its own and gives one credit back;
2. publish rate: TenantProducer.batch(atomic=False) against raw pipelined sends, and
   TenantProducer.send against raw sends one at a time (and, for information, against
   proton.utils' BlockingSender); every message's accepted outcome awaited.

Bodies are text of BODY_BYTES characters, persistent (durable), with the toolkit's properties.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal

import proton
from bench_common import (
    BATCH_TARGET,
    CONSUME_TARGET,
    SEND_TARGET,
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
    within,
)
from proton import Connection, Event, Link, Message, ProtonException, Terminus, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption
from proton.utils import BlockingConnection

from boost_tenancy import ProcessorRunner, RunnerSettings, TenantProducer
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.transports.amqp import AmqpFlavour, AmqpSettings, AmqpTransport
from boost_tenancy.transports.base import SubscribeRequest
from boost_tenancy.transports.registry import open_transport, parse_transport_url

DEFAULT_URL: Final = "amqp://guest:guest@127.0.0.1:5672"
"""The local RabbitMQ of scripts/rabbitmq (its default user); BOOST_BROKER_AMQP_URL overrides."""
BODY_BYTES: Final = 1024
PRELOAD_CHUNK: Final = 1000
"""Messages per preload batch."""
ROUTING: Final = Routing(default=Topology.PER_TENANT)
"""A broker without selectors (RabbitMQ) needs per-tenant queues; used on every broker here, and
the raw clients' queues are named the same way: tenant.<tenant>.<queue>."""
QUEUE_CAPABILITY: Final = symbol("queue")
"""The terminus capability the transport puts on its links; the raw clients put it too."""


def text_body(size: int) -> str:
    """ASCII text of exactly size characters (so size bytes as UTF-8)."""
    return ("boost-tenancy AMQP benchmark body. " * (size // 35 + 1))[:size]


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpConfig:
    url: str = field(repr=False)
    """With credentials: printed and reported only as redacted_url."""
    messages: int
    rounds: int
    prefetch: int
    workers: int
    confirmed_messages: int
    timeout_s: float
    warmup: bool
    sections: tuple[str, ...]
    body_bytes: int = BODY_BYTES
    flavour: AmqpFlavour = AmqpFlavour.OTHER
    """Set once the broker answered (run): decides the raw clients' addresses (/queue/NAME)."""

    @property
    def redacted_url(self) -> str:
        return parse_transport_url(self.url).redacted

    @property
    def settings(self) -> AmqpSettings:
        """What the transport makes of the URL; the raw clients connect with the same options."""
        return AmqpSettings.from_url(parse_transport_url(self.url))

    def address(self, queue: str) -> str:
        return self.flavour.address(queue)

    def report(self) -> dict[str, Any]:
        fields = asdict(self)
        fields["url"] = self.redacted_url
        fields["flavour"] = self.flavour.value
        return fields


def physical_queue(kind: str, tenant: str) -> tuple[str, str]:
    """A fresh logical queue and the broker queue that holds tenant's messages of it."""
    logical = unique_queue(kind)
    return logical, ROUTING.physical(logical, tenant)


# -- raw python-qpid-proton ---------------------------------------------------------------------
class QueueCapability(LinkOption):
    """Marks the link's node a queue, and its terminus durable where the broker makes the
    queue durable only then (RabbitMQ), as the transport does: the raw clients attach exactly
    like the toolkit, to the same durable queue (an attach that differs is refused)."""

    def __init__(self, durable: bool = False) -> None:
        self._durable = durable

    def apply(self, link: Link) -> None:
        terminus = link.source if link.is_receiver else link.target
        terminus.capabilities.put_object(QUEUE_CAPABILITY)
        if self._durable:
            terminus.durability = Terminus.CONFIGURATION


class RawClient(MessagingHandler):  # type: ignore[misc]
    """One raw proton connection run to completion on the calling thread.

    Subclasses start their link in started(); finish() stamps the end and closes. A timer ends a
    run that does not complete within the timeout; any error or refused outcome fails it.
    """

    def __init__(self, cfg: AmqpConfig, what: str, expected: int, **options: Any) -> None:
        super().__init__(**options)
        self.cfg = cfg
        self.what = what
        self.expected = expected
        self.count = 0
        self.started_at = self.started_cpu = 0.0
        self.finished_at = self.finished_cpu = 0.0
        self.problems: list[str] = []
        self._timer: Any = None
        self._conn: Connection | None = None

    def on_start(self, event: Event) -> None:
        s = self.cfg.settings
        self._timer = event.container.schedule(self.cfg.timeout_s, self)
        self._conn = event.container.connect(url=s.url, reconnect=False, **s.login_options())

    def on_connection_opened(self, event: Event) -> None:
        self.started_at, self.started_cpu = time.perf_counter(), time.process_time()
        self.started(event.container, event.connection)

    def started(self, container: Container, conn: Connection) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.finished_at, self.finished_cpu = time.perf_counter(), time.process_time()
        self._end()

    def fail(self, text: str) -> None:
        self.problems.append(text)
        self._end()

    def _end(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def on_timer_task(self, event: Event) -> None:
        self._timer = None
        self.fail(f"timed out after {self.cfg.timeout_s:.0f}s")
        event.container.stop()

    def on_transport_error(self, event: Event) -> None:
        condition = event.transport.condition
        self.fail(f"transport error: {condition.description if condition else 'unknown'}")

    def on_connection_error(self, event: Event) -> None:
        self.fail(f"connection error: {event.connection.remote_condition}")

    def on_link_error(self, event: Event) -> None:
        self.fail(f"link error: {event.link.remote_condition}")

    def on_rejected(self, event: Event) -> None:
        self.fail(f"the broker rejected a message: {event.delivery.remote.condition}")

    def on_released(self, event: Event) -> None:
        self.fail("the broker released a message (did not take it)")

    def run(self) -> Sample:
        Container(self).run()
        if self.problems or self.count < self.expected:
            raise BenchmarkError(
                f"{self.what}: {self.count} of {self.expected} messages"
                + (f", then: {'; '.join(self.problems[:5])}" if self.problems else "")
            )
        return Sample.of(
            self.expected,
            self.finished_at - self.started_at,
            self.finished_cpu - self.started_cpu,
        )


def raw_message(tenant: str, body: str) -> Message:
    """What the transport sends for a text message of tenant: the same properties and flags."""
    message_id = str(uuid.uuid4())
    return Message(
        body=body,
        durable=True,
        correlation_id=message_id,
        properties={
            "tenantUUID": tenant,
            "boostMessageId": message_id,
            "boostAttempt": "1",
            "boostBodyType": "text",
        },
    )


PublishMode = Literal["pipelined", "each"]


class RawPublisher(RawClient):
    """Sends expected messages to queue; done when the broker has accepted every one.

    pipelined: as many in flight as the link has credit (proton's own simple_send pattern);
    each: the next message only once the previous one was accepted.
    """

    def __init__(
        self, cfg: AmqpConfig, queue: str, tenant: str, expected: int, mode: PublishMode
    ) -> None:
        super().__init__(cfg, f"raw {mode} publisher to {queue}", expected, prefetch=0)
        self.queue = queue
        self.tenant = tenant
        self.mode = mode
        self.body = text_body(cfg.body_bytes)
        self.sent = 0

    def started(self, container: Container, conn: Connection) -> None:
        container.create_sender(
            conn,
            target=self.cfg.address(self.queue),
            options=QueueCapability(self.cfg.flavour.durable_terminus),
        )

    def on_sendable(self, event: Event) -> None:
        sender = event.sender
        if self.mode == "each":
            if self.sent == self.count and self.sent < self.expected and sender.credit:
                sender.send(raw_message(self.tenant, self.body))
                self.sent += 1
            return
        while sender.credit and self.sent < self.expected:
            sender.send(raw_message(self.tenant, self.body))
            self.sent += 1

    def on_accepted(self, event: Event) -> None:
        self.count += 1
        if self.count == self.expected:
            self.finish()
        elif self.mode == "each":
            self.on_sendable(event)


class RawConsumer(RawClient):
    """Receives expected messages with credit messages outstanding, accepting each one on its
    own and giving one credit back for it, as the transport does.

    drain: accept on arrival with proton's own flow control (cleanup, not measured).
    """

    def __init__(
        self, cfg: AmqpConfig, queue: str, expected: int, credit: int, *, drain: bool = False
    ) -> None:
        super().__init__(
            cfg,
            f"raw receiver on {queue}",
            expected,
            prefetch=credit if drain else 0,
            auto_accept=drain,
        )
        self.queue = queue
        self.credit = credit
        self.drain = drain

    def started(self, container: Container, conn: Connection) -> None:
        receiver = container.create_receiver(
            conn,
            source=self.cfg.address(self.queue),
            options=QueueCapability(self.cfg.flavour.durable_terminus),
        )
        if not self.drain:
            receiver.flow(self.credit)

    def on_message(self, event: Event) -> None:
        if not self.drain:
            self.accept(event.delivery)
            event.receiver.flow(1)
        self.count += 1
        if self.count == self.expected:
            self.finish()


def publish_blocking(cfg: AmqpConfig, queue: str, tenant: str, messages: int) -> Sample:
    """proton.utils: BlockingSender.send returns once the broker settled the message (rejected
    or released raises), driving the connection on the calling thread: a blocking API without
    TenantProducer.send's hop to an event-loop thread and back."""
    s = cfg.settings
    try:
        conn = BlockingConnection(s.url, timeout=cfg.timeout_s, **s.login_options())
    except ProtonException as exc:
        raise BenchmarkError(f"raw blocking publisher to {queue}: {exc}") from exc
    body = text_body(cfg.body_bytes)
    try:
        # The clock includes the attach, as on the other publish rows (their first send attaches).
        started, started_cpu = time.perf_counter(), time.process_time()
        sender = conn.create_sender(
            cfg.address(queue), options=QueueCapability(cfg.flavour.durable_terminus)
        )
        for _ in range(messages):
            sender.send(raw_message(tenant, body), timeout=cfg.timeout_s)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - started_cpu
    except ProtonException as exc:
        raise BenchmarkError(f"raw blocking publisher to {queue}: {exc}") from exc
    finally:
        conn.close()
    return Sample.of(messages, elapsed, cpu)


def drain(cfg: AmqpConfig, queue: str, expected: int) -> None:
    """Consume what a publish measurement left behind, so the broker stays empty (not timed)."""
    RawConsumer(cfg, queue, expected, 1000, drain=True).run()


# -- toolkit pieces -----------------------------------------------------------------------------
def connected_transport(cfg: AmqpConfig) -> AmqpTransport:
    """The transport the registry opens for the URL, connected within the timeout."""
    transport = open_transport(cfg.url)
    if not isinstance(transport, AmqpTransport):
        raise BenchmarkError(f"{cfg.redacted_url} did not open an AmqpTransport")
    within(cfg.timeout_s, f"connect to {cfg.redacted_url}", transport.connect)
    return transport


def preload(cfg: AmqpConfig, queue: str, tenant: str, messages: int) -> None:
    """Put messages of tenant on its queue of the logical queue, in confirmed batches."""
    transport = connected_transport(cfg)
    body = text_body(cfg.body_bytes)
    try:
        producer = TenantProducer(transport, routing=ROUTING)
        for start in range(0, messages, PRELOAD_CHUNK):
            with producer.batch(atomic=False) as batch:
                for _ in range(start, min(messages, start + PRELOAD_CHUNK)):
                    batch.send(queue, tenant, body)
    finally:
        transport.close()


class TimedAmqpTransport(AmqpTransport):
    """AmqpTransport that stamps its first subscribe call (the start of consumption)."""

    def __init__(self, settings: AmqpSettings) -> None:
        super().__init__(settings)
        self.first_subscribe_at = 0.0
        self.first_subscribe_cpu = 0.0

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[Any]:
        if not self.first_subscribe_at:
            self.first_subscribe_at = time.perf_counter()
            self.first_subscribe_cpu = time.process_time()
        return super().subscribe_many(requests)


# -- 1. consume rate ----------------------------------------------------------------------------
CONSUME_TENANT: Final = "tenant-consume"
PUBLISH_TENANT: Final = "tenant-publish"


def consume_raw(cfg: AmqpConfig, messages: int) -> Sample:
    logical, physical = physical_queue("consume-raw", CONSUME_TENANT)
    preload(cfg, logical, CONSUME_TENANT, messages)
    return RawConsumer(cfg, physical, messages, cfg.prefetch).run()


def consume_toolkit(cfg: AmqpConfig, messages: int, workers: int) -> Sample:
    """A ProcessorRunner for the tenant, per-tenant routing, no-op handler; the clock runs from
    the transport's first subscribe call to the N-th 'processed' outcome (after the accept)."""
    logical, _ = physical_queue("consume-runner", CONSUME_TENANT)
    preload(cfg, logical, CONSUME_TENANT, messages)
    completion = Completion(messages, f"ProcessorRunner on {logical}")
    transport = TimedAmqpTransport(cfg.settings)
    with tempfile.TemporaryDirectory(prefix="bench-amqp-") as tmp:
        store = SQLiteErrorStore(Path(tmp) / "errors.sqlite3")
        runner = ProcessorRunner(
            noop_processor(logical, json_body=False),
            transport,
            [CONSUME_TENANT],
            error_store=store,
            settings=RunnerSettings(workers=workers, prefetch=cfg.prefetch),
            observers=[CompletionObserver(completion)],
            routing=ROUTING,
        )
        try:
            within(cfg.timeout_s, "start() of the runner", runner.start)
        except BaseException:
            store.close()
            raise
        try:
            finished = completion.wait(cfg.timeout_s)
        finally:
            if not runner.stop(grace_s=10.0):
                print("warning: a handler was still running at stop", file=sys.stderr)
            store.close()
    return Sample.of(
        messages,
        finished - transport.first_subscribe_at,
        completion.finished_cpu - transport.first_subscribe_cpu,
    )


def bench_consume(cfg: AmqpConfig) -> tuple[list[Series], list[str]]:
    print("1. consume rate (AMQP)", file=sys.stderr)
    n = cfg.messages
    if cfg.warmup:
        consume_raw(cfg, min(n, 1000))
        consume_toolkit(cfg, min(n, 1000), cfg.workers)
    failures: list[str] = []
    rates, cpu = interleaved(
        cfg.rounds,
        [
            (
                "raw",
                f"raw proton receiver, credit={cfg.prefetch}, accept each",
                lambda: consume_raw(cfg, n),
            ),
            (
                "runner",
                f"ProcessorRunner, workers={cfg.workers}",
                lambda: consume_toolkit(cfg, n, cfg.workers),
            ),
            ("runner1", "ProcessorRunner, workers=1 (info)", lambda: consume_toolkit(cfg, n, 1)),
        ],
        failures,
    )
    target = ratio("runner / raw receiver", rates["runner"], rates["raw"])
    rows = [
        *rates.values(),
        target,
        ratio("runner workers=1 / raw receiver", rates["runner1"], rates["raw"]),
        *cpu.values(),
        ratio("CPU per message: runner / raw receiver", cpu["runner"], cpu["raw"]),
    ]
    notes = [
        f"target: runner >= {CONSUME_TARGET} x raw receiver: "
        + verdict(target.median, CONSUME_TARGET),
        "rate: messages / (receiver attach or first subscribe call -> last message accepted); "
        "CPU: this process, all threads",
    ]
    return rows, [*notes, *failures]


# -- 2. publish rate ----------------------------------------------------------------------------
def publish_raw(cfg: AmqpConfig, messages: int, mode: PublishMode | Literal["blocking"]) -> Sample:
    _, physical = physical_queue("publish-raw", PUBLISH_TENANT)
    if mode == "blocking":
        sample = publish_blocking(cfg, physical, PUBLISH_TENANT, messages)
    else:
        sample = RawPublisher(cfg, physical, PUBLISH_TENANT, messages, mode).run()
    drain(cfg, physical, messages)
    return sample


def publish_toolkit(cfg: AmqpConfig, messages: int, *, batch: bool) -> Sample:
    """TenantProducer with per-tenant routing: one batch(atomic=False), or send() one by one
    (each returns once the broker accepted the message)."""
    logical, physical = physical_queue("publish-producer", PUBLISH_TENANT)
    body = text_body(cfg.body_bytes)
    transport = connected_transport(cfg)
    try:
        producer = TenantProducer(transport, routing=ROUTING)
        started, started_cpu = time.perf_counter(), time.process_time()
        if batch:
            with producer.batch(atomic=False) as outgoing:
                for _ in range(messages):
                    outgoing.send(logical, PUBLISH_TENANT, body)
        else:
            for _ in range(messages):
                producer.send(logical, PUBLISH_TENANT, body)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - started_cpu
    finally:
        transport.close()
    drain(cfg, physical, messages)
    return Sample.of(messages, elapsed, cpu)


def bench_publish(cfg: AmqpConfig) -> tuple[list[Series], list[str]]:
    print("2. publish rate (AMQP)", file=sys.stderr)
    n, m = cfg.messages, cfg.confirmed_messages
    if cfg.warmup:
        publish_raw(cfg, min(n, 1000), "pipelined")
        publish_toolkit(cfg, min(n, 1000), batch=True)
    failures: list[str] = []
    rates, cpu = interleaved(
        cfg.rounds,
        [
            (
                "raw",
                "raw proton, pipelined, all accepted",
                lambda: publish_raw(cfg, n, "pipelined"),
            ),
            (
                "batch",
                "TenantProducer.batch(atomic=False)",
                lambda: publish_toolkit(cfg, n, batch=True),
            ),
            (
                "raw_each",
                f"raw proton, one at a time (n={m})",
                lambda: publish_raw(cfg, m, "each"),
            ),
            (
                "send",
                f"TenantProducer.send, each confirmed (n={m})",
                lambda: publish_toolkit(cfg, m, batch=False),
            ),
            (
                "raw_blocking",
                f"raw proton.utils BlockingSender, one at a time (n={m}, info)",
                lambda: publish_raw(cfg, m, "blocking"),
            ),
        ],
        failures,
    )
    target = ratio("batch(atomic=False) / raw pipelined", rates["batch"], rates["raw"])
    each = ratio("send / raw one at a time", rates["send"], rates["raw_each"])
    rows = [
        *rates.values(),
        target,
        each,
        ratio("send / raw BlockingSender (info)", rates["send"], rates["raw_blocking"]),
        *cpu.values(),
        ratio("CPU per message: batch / raw pipelined", cpu["batch"], cpu["raw"]),
        ratio("CPU per message: send / raw one at a time", cpu["send"], cpu["raw_each"]),
    ]
    notes = [
        f"target: batch(atomic=False) >= {BATCH_TARGET} x raw pipelined: "
        + verdict(target.median, BATCH_TARGET),
        f"target: send >= {SEND_TARGET} x raw one at a time: " + verdict(each.median, SEND_TARGET),
        "rate: messages / (first send -> the broker's accepted outcome of the last message)",
    ]
    return rows, [*notes, *failures]


# -- the run ------------------------------------------------------------------------------------
def run(cfg: AmqpConfig, json_path: Path | None) -> int:
    if cfg.settings.tls:
        raise BenchmarkError("the raw baselines connect without TLS: use an amqp:// URL")
    try:
        transport = connected_transport(cfg)
    except Exception as exc:
        raise BenchmarkError(f"no AMQP 1.0 broker at {cfg.redacted_url}: {exc}") from exc
    try:
        server, flavour = transport.server, transport.flavour
        capabilities = asdict(transport.capabilities)
    finally:
        transport.close()
    cfg = replace(cfg, flavour=flavour)
    declared = ", ".join(f"{name}={value}" for name, value in capabilities.items())
    header = (
        f"boost_tenancy core benchmark (AMQP 1.0)  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n"
        f"broker at {cfg.redacted_url}: {server!r}, flavour {flavour.value}; "
        f"capabilities: {declared}\n"
        f"queues: per-tenant routing; toolkit and raw clients address {cfg.address('NAME')!r}\n"
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs; "
        f"python-qpid-proton {'.'.join(map(str, proton.VERSION))}\n"
        f"messages={cfg.messages} rounds={cfg.rounds} prefetch={cfg.prefetch} "
        f"workers={cfg.workers} confirmed_messages={cfg.confirmed_messages} "
        f"body={cfg.body_bytes} B text, durable\n"
        "figures per round (r1..), median over rounds; ratios are taken per round"
    )
    titles = {
        "consume": f"1. Consume rate ({cfg.messages} preloaded messages, prefetch={cfg.prefetch})",
        "publish": f"2. Publish rate ({cfg.messages} persistent messages, confirmed)",
    }
    measurements = {"consume": bench_consume, "publish": bench_publish}
    sections = [
        (name, titles[name], partial(measure, cfg))
        for name, measure in measurements.items()
        if name in cfg.sections
    ]
    report: dict[str, Any] = {
        "config": cfg.report(),
        "broker": {"server": server, "flavour": flavour.value, "capabilities": capabilities},
    }
    run_sections(header, sections, report, json_path)
    return 0
