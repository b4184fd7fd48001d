"""The noisy-neighbour benchmark (seed 004): a heavy tenant at 50x a modest tenant's volume.

The modest tenant's end-to-end latency (send to handler) alone and beside the heavy tenant, with
the heavy tenant's processor running and stopped; prints p50/p99, the p99 against the modest
tenant's p99 alone on the same topology, and how many of its messages never arrived (stuck).

Every runner is configured the way a deployment is by default: AppSettings.from_env with only the
broker's address, so routing is `routed` and the fairness gate is on with its default limits
(build_fairness). The comparison rows change only BOOST_ROUTING. Each tenant's runner is its own
process, as tenants' processors are in production.

Producers of the default (routed) and shared rows send the way a BOOST Java service does: plain
stomp.py SENDs to the shared queue with persistent:true, the tenantUUID header and a JSON body.
The per_tenant rows need the toolkit's TenantProducer (only it knows the per-tenant queues).

The routed and per_tenant rows run on AMQP 1.0 too, when BOOST_BROKER_URL is amqp:// (the local
RabbitMQ with rabbitmq_amqp1_0: amqp://guest:guest@127.0.0.1:5672): the runners and the
TenantProducer on the toolkit's AMQP transport, the routed rows' producer sending as a JMS service
over AMQP 1.0 does: plain python-qpid-proton (proton.utils' BlockingSender) to the shared queue, a
durable message with the tenantUUID application property and the same JSON body, each send
settled before the next (noisy_amqp.py). The other rows stay on STOMP and are refused there;
without --only an AMQP run is routed,per_tenant.

On a routed queue the heavy backlog is sent all at once either while the runners run (their
routers move it as it arrives) or before any runner starts (the routers move it first, the modest
tenant's messages behind it on the shared queue); a third case sends the heavy tenant's messages
alongside the modest tenant's instead, at 50x its rate, so the volume is the same but spread.

    .venv/bin/python benchmarks/bench_noisy_neighbour.py [--modest 100] [--ratio 50]
        [--rate 20] [--wait 30] [--producer-nodelay]
        [--only routed,shared,per_tenant,broker_routes,plugin,artemis_plugin,artemis_cluster,
               artemis_cluster_far]
        [--json out.json]

broker_routes runs the routed rows against a Classic broker of the benchmark's own, started with
scripts/broker and the element `boost-tenancy broker-routes` prints for its queues and both tenants
(routing at send time, docs/fairness.md); plugin does so with the project's tenant routing plugin
in its recommended configuration, every queue but the shared ones (BOOST_BROKER_ROUTED_QUEUES=*):
neither the queue nor a tenant listed.

artemis_plugin runs them against an Artemis 2.44 of the benchmark's own whose tenant plugin
(brokers/artemis) routes every queue (queues="*": the run's queue and the tenants listed
nowhere); artemis_cluster against a two-node cluster
of its own with the plugin on both nodes (docs/operations.md, "A two-node Artemis cluster"), the
producers sending to node 1, the modest tenant's runner on node 2 and the heavy tenant's on both
nodes; artemis_cluster_far the same with the heavy tenant's runner on node 2 only, so its whole
backlog crosses the cluster bridge, which every tenant's crossing messages share in order.

The broker is read from BOOST_BROKER_URL (default stomp://127.0.0.1:61613; stomp:// or amqp://),
its login from the URL or BOOST_BROKER_USER and BOOST_BROKER_PASSWORD when set (`eval
"$(scripts/artemis env)"` runs the default rows on the project's Artemis over STOMP).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queue_mod
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any, Literal, Protocol

import stomp
from noisy_amqp import STOMP_ONLY, AmqpClients

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantId,
    TenantProcessor,
    TenantProducer,
    open_error_store,
)
from boost_tenancy.application.config import DEFAULT_URL, AppSettings
from boost_tenancy.fairness.gate import FairnessGate
from boost_tenancy.fairness.settings import build_fairness
from boost_tenancy.observability import configure_logging
from boost_tenancy.ops.broker_routes import EVERY_QUEUE, classic_destination_interceptors
from boost_tenancy.ops.parking import ParkingSweeper
from boost_tenancy.routing import Routing, Topology, parked_queue
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.registry import parse_transport_url
from boost_tenancy.transports.stomp import StompSettings, StompTransport

sys.path.append(str(Path(__file__).resolve().parents[1]))  # devtools: the checkout's, last
from devtools.artemis_cluster import ArtemisCluster
from devtools.artemis_plugin import plugin_xml
from devtools.local_artemis import HOST as ARTEMIS_HOST
from devtools.local_artemis import PASSWORD as ARTEMIS_PASSWORD
from devtools.local_artemis import USER as ARTEMIS_USER
from devtools.local_artemis import ArtemisSettings, LocalArtemis

MODEST, HEAVY = "modest", "heavy"
HEAVY_WORK_S = 0.005
"""What the heavy tenant's handler does per message."""
P99_TARGET = 2.0
DEFAULT_ONLY = ("routed", "shared", "per_tenant")
TOPOLOGIES = (
    "routed",
    "shared",
    "per_tenant",
    "broker_routes",
    "plugin",
    "artemis_plugin",
    "artemis_cluster",
    "artemis_cluster_far",
)

HeavyState = Literal["none", "running", "stopped"]
OwnBroker = Literal[
    "classic_routes", "classic_plugin", "artemis_plugin", "artemis_cluster", "artemis_cluster_far"
]
"""A broker the benchmark starts for the scenarios that need one: Classic with the routes
`boost-tenancy broker-routes` prints, Classic with the tenant routing plugin, Artemis with the
tenant plugin, two clustered Artemis nodes with the plugin (the heavy tenant's runners on both
nodes, or on node 2 only: "far")."""
Env = tuple[tuple[str, str], ...]
ARTEMIS_OFFSET = 1600
CLUSTER_OFFSETS = (1700, 2000)
Backlog = Literal["during", "before", "alongside"]
"""When the heavy tenant's messages are queued: all at once when the runners run ("during") or
before any starts, or "alongside" the modest tenant's, `ratio` of them before each of its."""


# -- configuration --------------------------------------------------------------------------------
def broker_env(**extra: str) -> dict[str, str]:
    """The variables a deployment sets for the broker's address and login, and nothing else
    (plus extra)."""
    login = {
        name: os.environ[name]
        for name in ("BOOST_BROKER_USER", "BOOST_BROKER_PASSWORD")
        if os.environ.get(name)
    }
    return {
        "BOOST_BROKER_URL": os.environ.get("BOOST_BROKER_URL", "").strip() or DEFAULT_URL,
        **login,
        **extra,
    }


def app_settings(env: Mapping[str, str]) -> AppSettings:
    """AppSettings.from_env(env), with a confirm timeout (STOMP receipt, AMQP outcome) that
    survives a busy 2-core machine."""
    settings = AppSettings.from_env(env)
    settings = replace(settings, broker=replace(settings.broker, confirm_timeout_s=60.0))
    if settings.stomp is None:
        return settings
    return replace(settings, stomp=replace(settings.stomp, confirm_timeout_s=60.0))


def build_gate(settings: AppSettings, events: Counter[str] | None = None) -> FairnessGate | None:
    """The gate the settings ask for (None with BOOST_FAIRNESS=off); counts its events."""
    if settings.fairness is None:
        return None
    counts = events

    def on_event(_tenant: TenantId, event: str) -> None:
        if counts is not None:
            counts[event] += 1  # only the admitter thread calls this

    return build_fairness(settings.fairness, workers=settings.runner.workers, on_event=on_event)


# -- producers ------------------------------------------------------------------------------------
class Sender(Protocol):
    def send(self, queue: str, tenant: str, body: dict[str, Any]) -> None: ...

    def send_many(self, queue: str, tenant: str, bodies: Sequence[dict[str, Any]]) -> None:
        """Send every body and return once the broker holds all of them."""

    def close(self) -> None: ...


class JavaStyleSender:
    """Sends the way the BOOST Java services do: a plain STOMP SEND to the shared queue, with
    persistent:true and the tenantUUID header; no toolkit code on the way."""

    def __init__(self, settings: StompSettings, *, nodelay: bool = False) -> None:
        """nodelay: TCP_NODELAY on the socket (stomp.py leaves Nagle's algorithm on, so a small
        SEND written just after others may wait for their acknowledgement)."""
        # No content-length: the broker stores a TextMessage, as a Java service's would be.
        self._settings = settings
        self._nodelay = nodelay
        self._conn = self._connect()

    def _connect(self) -> stomp.Connection12:
        conn = stomp.Connection12(
            [(self._settings.host, self._settings.port)], auto_content_length=False
        )
        conn.connect(self._settings.username, self._settings.password, wait=True)
        if self._nodelay:
            conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def send(self, queue: str, tenant: str, body: dict[str, Any]) -> None:
        self._conn.send(
            f"/queue/{queue}",
            json.dumps(body),
            headers={"tenantUUID": tenant, "persistent": "true"},
        )

    def send_many(self, queue: str, tenant: str, bodies: Sequence[dict[str, Any]]) -> None:
        for body in bodies:
            self.send(queue, tenant, body)
        # DISCONNECT waits for its receipt, which the broker sends once every earlier SEND of
        # the connection is stored; then carry on with a fresh connection.
        self._conn.disconnect()
        self._conn = self._connect()

    def close(self) -> None:
        self._conn.disconnect()


class ToolkitSender:
    """TenantProducer: straight to the broker queue the routing names for the tenant."""

    def __init__(self, transport: Transport, routing: Routing) -> None:
        self._transport = transport
        self._transport.connect()
        self._producer = TenantProducer(self._transport, routing=routing)

    def send(self, queue: str, tenant: str, body: dict[str, Any]) -> None:
        self._producer.send(queue, tenant, body)

    def send_many(self, queue: str, tenant: str, bodies: Sequence[dict[str, Any]]) -> None:
        with self._producer.batch() as batch:
            for body in bodies:
                batch.send(queue, tenant, body)

    def close(self) -> None:
        self._transport.close()


def drain(settings: StompSettings, queues: Sequence[str], idle_s: float = 1.0) -> int:
    """Consume (auto-ack) whatever is left on queues until none arrives for idle_s, so the
    broker is not left holding thousands of messages per run; returns how many."""
    count = 0
    last = time.monotonic()
    lock = threading.Lock()

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            nonlocal count, last
            with lock:
                count += 1
                last = time.monotonic()

    conn = stomp.Connection12([(settings.host, settings.port)])
    conn.set_listener("drain", Listener())
    conn.connect(settings.username, settings.password, wait=True)
    for index, name in enumerate(queues):
        conn.subscribe(
            f"/queue/{name}",
            id=f"drain-{index}",
            ack="auto",
            headers={"activemq.prefetchSize": "1000"},
        )
    last = time.monotonic()
    while True:
        time.sleep(0.1)
        with lock:
            if time.monotonic() - last >= idle_s:
                break
    conn.disconnect()
    return count


# -- the protocol ---------------------------------------------------------------------------------
class BrokerClients(Protocol):
    """What a scenario needs of the broker, in the protocol of its URL."""

    @property
    def protocol(self) -> str: ...

    @property
    def topologies(self) -> tuple[str, ...]:
        """The --only names that run over this protocol."""

    def transport(self) -> Transport:
        """The toolkit's transport, not connected."""

    def java_style_sender(self, *, nodelay: bool = False) -> Sender:
        """The producer of the rows that send to the shared queue, as a Java service does;
        nodelay sets TCP_NODELAY on its socket (STOMP)."""

    def drain(self, queues: Sequence[str]) -> int: ...

    def describe(self) -> str | None:
        """A line for the header (None: none)."""


@dataclass(frozen=True, slots=True)
class StompClients:
    """The clients of a scenario on a STOMP broker: every topology runs."""

    settings: StompSettings

    @property
    def protocol(self) -> str:
        return "STOMP"

    @property
    def topologies(self) -> tuple[str, ...]:
        return TOPOLOGIES

    def transport(self) -> Transport:
        return StompTransport(self.settings)

    def java_style_sender(self, *, nodelay: bool = False) -> Sender:
        return JavaStyleSender(self.settings, nodelay=nodelay)

    def drain(self, queues: Sequence[str]) -> int:
        return drain(self.settings, queues)

    def describe(self) -> str | None:
        return None


def broker_clients(settings: AppSettings) -> BrokerClients:
    """The clients of the protocol BOOST_BROKER_URL's scheme names: the one place it is chosen."""
    url = parse_transport_url(settings.broker_url)
    if url.scheme == "amqp":
        return AmqpClients(settings.broker_url, settings.broker)
    if settings.stomp is None:
        raise SystemExit(
            "the benchmark runs over STOMP or AMQP 1.0: BOOST_BROKER_URL must be stomp:// or "
            f"amqp://, not {url.redacted}"
        )
    return StompClients(settings.stomp)


# -- the tenants' runner processes ----------------------------------------------------------------
def timed_processor(queue: str, out: Any, work_s: float) -> TenantProcessor:
    """Puts each message's send-to-handler latency on out (None: records nothing), then works
    for work_s (the heavy tenant's handler)."""

    class Timed(TenantProcessor):
        queues = (queue,)

        def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
            if out is not None:
                out.put(time.time() - float(message.data["sentAt"]))
            if work_s:
                time.sleep(work_s)

    return Timed()


def run_tenant(  # noqa: PLR0917  # a multiprocessing target takes its arguments positionally
    tenant: str,
    queue: str,
    env: dict[str, str],
    work_s: float,
    out: Any,
    ready: MpEvent,
    stop: MpEvent,
    stats: Any,
) -> None:
    """One tenant's runner, configured from env as `boost-tenancy run` would be; puts the gate's
    event counts on stats when stopped."""
    configure_logging("console", "WARNING")
    settings = app_settings(env)
    events: Counter[str] = Counter()
    gate = build_gate(settings, events)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_error_store(str(Path(tmp) / "errors.sqlite3"))
        runner = ProcessorRunner(
            timed_processor(queue, out, work_s),
            broker_clients(settings).transport(),
            [tenant],
            error_store=store,
            settings=settings.runner,
            routing=settings.routing,
            gate=gate,
        )
        runner.start()
        ready.set()
        stop.wait()
        runner.stop(grace_s=2)
        if gate is not None:
            gate.close()
        store.close()
    stats.put((tenant, dict(events)))


class TenantRunners:
    """The tenants' runner processes of one scenario (spawned: each a fresh interpreter)."""

    def __init__(self, queue: str, env: dict[str, str]) -> None:
        self._ctx = mp.get_context("spawn")
        self._queue = queue
        self._env = env
        self._stop = self._ctx.Event()
        self._stats = self._ctx.Queue()
        self._procs: list[Any] = []

    def start(
        self, tenant: str, out: Any, work_s: float, env: dict[str, str] | None = None
    ) -> None:
        """Start tenant's runner (against the broker env names, else the scenario's); returns
        once it is subscribed (its router running)."""
        ready = self._ctx.Event()
        proc = self._ctx.Process(
            target=run_tenant,
            args=(
                tenant,
                self._queue,
                env or self._env,
                work_s,
                out,
                ready,
                self._stop,
                self._stats,
            ),
            daemon=True,
        )
        proc.start()
        if not ready.wait(60):
            raise RuntimeError(f"{tenant} runner did not start")
        self._procs.append(proc)

    def stop(self) -> dict[str, dict[str, int]]:
        """Stop every runner; returns each tenant's gate events."""
        self._stop.set()
        events: dict[str, dict[str, int]] = {}
        for _ in self._procs:
            try:
                tenant, counts = self._stats.get(timeout=30)
            except queue_mod.Empty:
                continue
            for event, count in counts.items():  # a tenant's runners on several nodes
                events.setdefault(tenant, {})
                events[tenant][event] = events[tenant].get(event, 0) + count
        for proc in self._procs:
            proc.join(15)
        return events


def collect_modest(
    sender: Sender,
    queue: str,
    out: Any,
    modest_n: int,
    *,
    rate: float,
    wait_s: float,
    heavy_each: int = 0,
) -> tuple[list[float], float]:
    """Send the modest tenant's messages at rate (heavy_each of the heavy tenant's before each);
    its latencies as they arrive, for up to wait_s after the last send, and how long the sending
    took (longer than modest_n / rate where the sends could not keep up)."""
    latencies: list[float] = []
    collector_done = threading.Event()

    def collect() -> None:
        while len(latencies) < modest_n and not collector_done.is_set():
            try:
                latencies.append(out.get(timeout=0.2))
            except queue_mod.Empty:
                continue

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    began = time.monotonic()
    for n in range(modest_n):
        for h in range(heavy_each):
            sender.send(queue, HEAVY, {"n": n * heavy_each + h, "sentAt": time.time()})
        sender.send(queue, MODEST, {"n": n, "sentAt": time.time()})
        time.sleep(max(0.0, began + (n + 1) / rate - time.monotonic()))
    sending_s = time.monotonic() - began
    collector.join(wait_s)
    collector_done.set()
    collector.join(1)
    return list(latencies), sending_s


# -- scenarios ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Scenario:
    label: str
    """The configuration: 'default (routed + fairness)', or the topology that differs."""
    name: str
    topology: Topology
    heavy: HeavyState
    backlog: Backlog = "during"
    parking: bool = False
    own_broker: OwnBroker | None = None
    """Run against a broker of the benchmark's own (queue, runner_broker and sender_broker are
    set once it runs); None: the broker BOOST_BROKER_URL names."""
    queue: str | None = None
    runner_broker: Env = ()
    """The variables that point the tenants' runners at the own broker."""
    sender_broker: Env = ()
    """The variables that point the producers at it (another node of a cluster)."""
    heavy_brokers: tuple[Env, ...] = ()
    """Where the heavy tenant's runners run, one each (a cluster's nodes); empty: runner_broker."""

    @property
    def env(self) -> dict[str, str]:
        """The runners' environment."""
        return self._env(dict(self.runner_broker))

    @property
    def heavy_envs(self) -> list[dict[str, str] | None]:
        """The environment of each of the heavy tenant's runners (None: the runners')."""
        return [self._env(dict(broker)) for broker in self.heavy_brokers] or [None]

    @property
    def sender_env(self) -> dict[str, str]:
        return self._env(dict(self.sender_broker or self.runner_broker))

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        if self.topology is Topology.ROUTED:
            return broker_env(**extra)  # the default: nothing about routing or fairness
        return broker_env(BOOST_ROUTING=self.topology.value, **extra)

    @property
    def java_style(self) -> bool:
        """Producers send to the shared queue (possible on routed and shared queues)."""
        return self.topology is not Topology.PER_TENANT


@dataclass(slots=True)
class Result:
    scenario: Scenario
    latencies: list[float]
    sent: int
    held: dict[str, int] = field(default_factory=dict)
    """Held events (held_concurrency + held_rate) of each tenant's gate."""
    expired: dict[str, int] = field(default_factory=dict)
    heavy_queued_s: float = 0.0
    """How long queueing the heavy backlog took (sent alongside: sending both tenants' messages,
    modest_n / rate where the sends kept up)."""

    def percentile(self, p: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    @property
    def stuck(self) -> int:
        return self.sent - len(self.latencies)


def leftover_queues(s: Scenario, queue: str) -> list[str]:
    """Where a scenario can leave messages behind (the heavy backlog, mostly)."""
    routing = Routing(default=s.topology)
    names = {routing.physical(queue, MODEST)}
    if s.heavy != "none":
        names.add(routing.physical(queue, HEAVY))
    if s.topology is Topology.ROUTED:
        names.add(queue)
    if s.parking:
        names.add(parked_queue(queue, HEAVY))
    return sorted(names)


def queue_heavy(sender: Sender, queue: str, count: int) -> float:
    """Put the heavy tenant's backlog on the broker; returns how long that took."""
    began = time.perf_counter()
    now = time.time()
    sender.send_many(queue, HEAVY, [{"n": n, "sentAt": now} for n in range(count)])
    return time.perf_counter() - began


def run_scenario(
    s: Scenario,
    modest_n: int,
    ratio: int,
    rate: float,
    wait_s: float,
    *,
    producer_nodelay: bool = False,
) -> Result:
    queue = s.queue or f"nn.{uuid.uuid4().hex[:8]}"
    settings = app_settings(s.sender_env)
    clients = broker_clients(settings)
    sender: Sender = (
        clients.java_style_sender(nodelay=producer_nodelay)
        if s.java_style
        else ToolkitSender(clients.transport(), settings.routing)
    )
    heavy_count = modest_n * ratio if s.heavy != "none" else 0
    heavy_queued_s = 0.0
    if heavy_count and s.backlog == "before":
        heavy_queued_s = queue_heavy(sender, queue, heavy_count)  # before any runner starts
    runners = TenantRunners(queue, s.env)
    modest_out = mp.get_context("spawn").Queue()
    runners.start(MODEST, modest_out, 0.0)
    if s.heavy == "running":
        for heavy_env in s.heavy_envs:
            runners.start(HEAVY, None, HEAVY_WORK_S, heavy_env)
    with tempfile.TemporaryDirectory() as tmp:
        sweeper = None
        if s.parking:
            active = [MODEST] + ([HEAVY] if s.heavy == "running" else [])
            sweeper = ParkingSweeper(
                clients.transport(),
                [queue],
                active,
                error_store=open_error_store(str(Path(tmp) / "parking.sqlite3")),
            )
            sweeper.start()
        if heavy_count and s.backlog == "during":
            heavy_queued_s = queue_heavy(sender, queue, heavy_count)  # the runners already run
        alongside = ratio if heavy_count and s.backlog == "alongside" else 0
        latencies, sending_s = collect_modest(
            sender, queue, modest_out, modest_n, rate=rate, wait_s=wait_s, heavy_each=alongside
        )
        if alongside:
            heavy_queued_s = sending_s  # the heavy tenant's messages went out with the modest's
        events = runners.stop()
        if sweeper is not None:
            sweeper.stop()
    sender.close()
    clients.drain(leftover_queues(s, queue))
    return Result(
        s,
        latencies,
        modest_n,
        held={t: e.get("held_concurrency", 0) + e.get("held_rate", 0) for t, e in events.items()},
        expired={t: e.get("expired", 0) for t, e in events.items()},
        heavy_queued_s=heavy_queued_s,
    )


# -- output ---------------------------------------------------------------------------------------
def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}"


CONFIG_WIDTH = 28
SCENARIO_WIDTH = 40


def row_text(result: Result) -> str:
    s = result.scenario
    heavy = s.heavy if s.heavy != "none" else "-"
    held = "/".join(str(result.held[t]) if t in result.held else "-" for t in (MODEST, HEAVY))
    return (
        f"{s.label:<{CONFIG_WIDTH}} {s.name:<{SCENARIO_WIDTH}} {heavy:<8} "
        f"{ms(result.percentile(50)):>7} {ms(result.percentile(99)):>7} "
        f"{ms(max(result.latencies) if result.latencies else None):>7} "
        f"{len(result.latencies):>5}/{result.sent:<4} {result.stuck:>5}  {held:>9}"
    )


def scenarios(only: Sequence[str], ratio: int) -> list[Scenario]:
    default = "default (routed + fairness)"
    routed = [
        Scenario(default, "alone", Topology.ROUTED, "none"),
        Scenario(default, "beside heavy, queued while running", Topology.ROUTED, "running"),
        Scenario(default, "beside heavy, queued while running", Topology.ROUTED, "stopped"),
        Scenario(
            default, "beside heavy, queued before start", Topology.ROUTED, "running", "before"
        ),
        Scenario(
            default, "beside heavy, queued before start", Topology.ROUTED, "stopped", "before"
        ),
        Scenario(
            default,
            f"beside heavy, sent alongside ({ratio}x rate)",
            Topology.ROUTED,
            "running",
            "alongside",
        ),
        Scenario(
            default,
            f"beside heavy, sent alongside ({ratio}x rate)",
            Topology.ROUTED,
            "stopped",
            "alongside",
        ),
    ]
    shared = [
        Scenario("shared + fairness", "alone", Topology.SHARED, "none"),
        Scenario("shared + fairness", "beside heavy", Topology.SHARED, "running"),
        Scenario("shared + fairness", "beside heavy", Topology.SHARED, "stopped"),
        Scenario(
            "shared + fairness", "beside heavy + parking", Topology.SHARED, "stopped", parking=True
        ),
    ]
    per_tenant = [
        Scenario("per_tenant + fairness", "alone", Topology.PER_TENANT, "none"),
        Scenario("per_tenant + fairness", "beside heavy", Topology.PER_TENANT, "running"),
        Scenario("per_tenant + fairness", "beside heavy", Topology.PER_TENANT, "stopped"),
    ]

    def routed_on_own_broker(label: str, own_broker: OwnBroker) -> list[Scenario]:
        """The routed rows against a broker of the benchmark's own."""
        return [
            Scenario(label, "alone", Topology.ROUTED, "none", own_broker=own_broker),
            *(
                Scenario(label, name, Topology.ROUTED, heavy, backlog, own_broker=own_broker)
                for name, backlog in (
                    ("beside heavy, queued while running", "during"),
                    ("beside heavy, queued before start", "before"),
                    (f"beside heavy, sent alongside ({ratio}x rate)", "alongside"),
                )
                for heavy in ("running", "stopped")
            ),
        ]

    chosen = {
        "routed": routed,
        "shared": shared,
        "per_tenant": per_tenant,
        "broker_routes": routed_on_own_broker("routed + broker routes", "classic_routes"),
        "plugin": routed_on_own_broker("routed + routing plugin (every queue)", "classic_plugin"),
        "artemis_plugin": routed_on_own_broker(
            "Artemis + tenant plugin (every queue)", "artemis_plugin"
        ),
        "artemis_cluster": routed_on_own_broker("Artemis cluster, heavy both", "artemis_cluster"),
        "artemis_cluster_far": routed_on_own_broker(
            "Artemis cluster, heavy far", "artemis_cluster_far"
        ),
    }
    return [s for name in only for s in chosen[name]]


@contextmanager
def own_brokers(chosen: list[Scenario], home: Path) -> Iterator[list[Scenario]]:
    """Start the brokers the chosen scenarios name (each once, a queue of its own per scenario)
    and yield the scenarios set to use them; stops them afterwards."""
    queues = {
        i: f"nn.{s.own_broker.replace('_', '-')}.{uuid.uuid4().hex[:8]}"
        for i, s in enumerate(chosen)
        if s.own_broker is not None
    }

    def listed(kind: OwnBroker) -> list[str]:
        return [queues[i] for i, s in enumerate(chosen) if s.own_broker == kind]

    with ExitStack() as stack:
        placed: dict[OwnBroker, Placement] = {}
        if listed("classic_routes") or listed("classic_plugin"):
            env = stack.enter_context(
                classic_broker(home / "classic", listed("classic_routes"), listed("classic_plugin"))
            )
            placed["classic_routes"] = placed["classic_plugin"] = Placement(env, env)
        if listed("artemis_plugin"):
            env = stack.enter_context(artemis_broker(home / "artemis", listed("artemis_plugin")))
            placed["artemis_plugin"] = Placement(env, env)
        if listed("artemis_cluster") or listed("artemis_cluster_far"):
            node1, node2 = stack.enter_context(
                artemis_cluster(
                    home / "cluster", listed("artemis_cluster") + listed("artemis_cluster_far")
                )
            )
            placed["artemis_cluster"] = Placement(node2, node1, (node1, node2))
            placed["artemis_cluster_far"] = Placement(node2, node1)
        yield [
            s if s.own_broker is None else placed[s.own_broker].apply(replace(s, queue=queues[i]))
            for i, s in enumerate(chosen)
        ]


@dataclass(frozen=True)
class Placement:
    """Where a scenario's runners and producers connect on the benchmark's own brokers."""

    runners: dict[str, str]
    sender: dict[str, str]
    heavy: tuple[dict[str, str], ...] = ()
    """The heavy tenant's runners, one per entry; empty: one on runners."""

    def apply(self, scenario: Scenario) -> Scenario:
        return replace(
            scenario,
            runner_broker=tuple(self.runners.items()),
            sender_broker=tuple(self.sender.items()),
            heavy_brokers=tuple(tuple(env.items()) for env in self.heavy),
        )


@contextmanager
def classic_broker(
    home: Path, routes_queues: Sequence[str], plugin_queues: Sequence[str]
) -> Iterator[dict[str, str]]:
    """A Classic broker of its own (scripts/broker, free ports) routing at send time both tenants
    of routes_queues (the element `boost-tenancy broker-routes` prints) and, when plugin_queues
    has one, every tenant of every queue (the project's tenant routing plugin as
    `broker-routes --queue '*'` configures it: no queue listed, no tenant listed)."""
    stomp_port, openwire_port = free_ports(2)
    url = {"BOOST_BROKER_URL": f"stomp://127.0.0.1:{stomp_port}"}
    env = {
        **os.environ,
        **url,
        "BOOST_BROKER_HOME": str(home),
        "BOOST_BROKER_OPENWIRE_PORT": str(openwire_port),
        "BOOST_BROKER_ROUTED_QUEUES": EVERY_QUEUE if plugin_queues else "none",
    }
    if routes_queues:
        home.mkdir(parents=True, exist_ok=True)
        routes = home / "routes.xml"
        routes.write_text(classic_destination_interceptors(routes_queues, [MODEST, HEAVY]))
        env["BOOST_BROKER_ROUTES"] = str(routes)
    script = str(Path(__file__).resolve().parents[1] / "scripts" / "broker")
    subprocess.run([script, "start"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        yield url
    finally:
        subprocess.run([script, "stop"], env=env, check=False, stdout=subprocess.DEVNULL)


def artemis_login(port: int) -> dict[str, str]:
    return {
        "BOOST_BROKER_URL": f"stomp://{ARTEMIS_HOST}:{port}",
        "BOOST_BROKER_USER": ARTEMIS_USER,
        "BOOST_BROKER_PASSWORD": ARTEMIS_PASSWORD,
    }


@contextmanager
def artemis_broker(home: Path, queues: Sequence[str]) -> Iterator[dict[str, str]]:
    """An Artemis 2.44 of its own whose tenant plugin routes every queue, the run's queues
    among them though listed nowhere (`broker-routes --broker artemis --queue '*'`: no queue and
    no tenant listed)."""
    del queues  # routed as every other queue is
    broker = LocalArtemis(
        ArtemisSettings(
            home=home,
            port_offset=ARTEMIS_OFFSET,
            plugins_xml=plugin_xml([EVERY_QUEUE]),
        )
    )
    broker.start()
    try:
        yield artemis_login(broker.settings.stomp_port)
    finally:
        broker.stop()


@contextmanager
def artemis_cluster(
    home: Path, queues: Sequence[str]
) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Two clustered Artemis nodes of their own, the plugin routing queues on both; yields the
    variables that point a client at node 1 and at node 2."""
    cluster = ArtemisCluster(home, queues, offsets=CLUSTER_OFFSETS)
    cluster.start()
    try:
        node1, node2 = (node.settings.stomp_port for node in cluster.nodes)
        yield artemis_login(node1), artemis_login(node2)
    finally:
        cluster.stop()


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def chosen_topologies(
    parser: argparse.ArgumentParser, only: str | None, clients: BrokerClients
) -> list[str]:
    """The topologies --only names (without it, those of DEFAULT_ONLY the protocol runs); exits
    with a usage error for an unknown one or one the protocol does not run."""
    if only is None:
        return [name for name in DEFAULT_ONLY if name in clients.topologies]
    names = [name.strip() for name in only.split(",") if name.strip()]
    if unknown := set(names) - set(TOPOLOGIES):
        parser.error(f"--only: unknown topology {', '.join(sorted(unknown))}")
    if refused := [name for name in names if name not in clients.topologies]:
        parser.error(
            f"--only {', '.join(refused)}: {'run' if len(refused) > 1 else 'runs'} over STOMP "
            f"only ({STOMP_ONLY}); over {clients.protocol} the benchmark runs "
            f"{', '.join(clients.topologies)}"
        )
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modest", type=int, default=100, help="modest tenant's messages")
    parser.add_argument("--ratio", type=int, default=50, help="heavy volume / modest volume")
    parser.add_argument("--rate", type=float, default=20.0, help="modest messages per second")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait after sending")
    parser.add_argument(
        "--only",
        help="topologies to run, comma-separated (default routed,shared,per_tenant; over AMQP "
        "1.0 routed,per_tenant, the only ones it runs; routed is the default configuration); "
        "broker_routes starts a Classic broker of its own routing the two tenants at send time, "
        "plugin one whose tenant routing plugin routes every tenant of the queue; "
        "artemis_plugin an Artemis of its own with the tenant plugin, artemis_cluster two "
        "clustered Artemis nodes with it (producers on node 1, the modest runner on node 2, "
        "the heavy on both), artemis_cluster_far the heavy runner on node 2 only",
    )
    parser.add_argument(
        "--producer-nodelay",
        action="store_true",
        help="set TCP_NODELAY on the plain STOMP producer's socket (stomp.py leaves Nagle's "
        "algorithm on); the AMQP producer's connection is proton's",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging("console", "WARNING")  # the parking sweeper's info lines stay out
    defaults = app_settings(broker_env())
    clients = broker_clients(defaults)
    only = chosen_topologies(parser, args.only, clients)
    fairness = defaults.fairness
    print(
        f"noisy neighbour: modest {args.modest} messages at {args.rate:g}/s, heavy "
        f"{args.modest * args.ratio} ({args.ratio}x) queued ahead; heavy handler "
        f"{HEAVY_WORK_S * 1000:g} ms; every runner AppSettings.from_env(broker address only): "
        f"routing {defaults.routing.default.value}, workers {defaults.runner.workers}, "
        f"prefetch {defaults.runner.prefetch}, fairness "
        + (
            "off"
            if fairness is None
            else f"on (concurrency {fairness.concurrency or 'workers-1'}, "
            f"{fairness.rate.rate_per_s:g} msg/s per tenant)"
        )
        + f"; latency send->handler in ms; waited {args.wait:g} s after the last send"
    )
    if (described := clients.describe()) is not None:
        print(described)
    print(
        f"{'configuration':<{CONFIG_WIDTH}} {'scenario':<{SCENARIO_WIDTH}} {'heavy':<8} "
        f"{'p50':>7} {'p99':>7} {'max':>7} {'delivered':>10} {'stuck':>5}  {'held m/h':>9}"
    )
    results: list[Result] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-nn-") as home,
        own_brokers(scenarios(only, args.ratio), Path(home)) as chosen,
    ):
        for scenario in chosen:
            result = run_scenario(
                scenario,
                args.modest,
                args.ratio,
                args.rate,
                args.wait,
                producer_nodelay=args.producer_nodelay,
            )
            results.append(result)
            print(row_text(result), flush=True)
    print()
    for result in results:
        s = result.scenario
        if s.heavy == "none":
            continue
        alone = next(
            r for r in results if r.scenario.label == s.label and r.scenario.heavy == "none"
        )
        p99, base = result.percentile(99), alone.percentile(99)
        what = f"{s.label:<{CONFIG_WIDTH}} {s.name:<{SCENARIO_WIDTH}} heavy {s.heavy:<8}"
        if p99 is not None and base:
            factor = p99 / base
            met = factor <= P99_TARGET and result.stuck == 0
            verdict = f"within {P99_TARGET:g}x, 0 stuck" if met else "NOT MET"
            print(f"{what} p99 / alone = {factor:,.2f}  stuck {result.stuck}  ({verdict})")
        else:
            print(
                f"{what} p99 / alone = n/a  stuck {result.stuck}  "
                f"({len(result.latencies)}/{result.sent} delivered; NOT MET)"
            )
    for result in results:
        if any(result.expired.values()):
            print(
                f"held past hold_s and deferred ({result.scenario.label}, {result.scenario.name}): "
                + ", ".join(f"{t} {n}" for t, n in result.expired.items())
            )
    timed = [r for r in results if r.heavy_queued_s]
    if timed:
        print()
        for result in timed:
            s = result.scenario
            what = (
                "sending both tenants' messages"
                if s.backlog == "alongside"
                else "queueing the heavy backlog"
            )
            print(
                f"{what} took {result.heavy_queued_s:.1f} s ({s.label}, {s.name}, heavy {s.heavy})"
            )
    if args.json:
        rows = [
            {
                "protocol": clients.protocol,
                "configuration": r.scenario.label,
                "topology": r.scenario.topology.value,
                "scenario": r.scenario.name,
                "heavy": r.scenario.heavy,
                "backlog": r.scenario.backlog,
                "p50_ms": None if not r.latencies else (r.percentile(50) or 0.0) * 1000,
                "p99_ms": None if not r.latencies else (r.percentile(99) or 0.0) * 1000,
                "delivered": len(r.latencies),
                "sent": r.sent,
                "stuck": r.stuck,
                "held": r.held,
                "expired": r.expired,
                "heavy_queued_s": r.heavy_queued_s,
            }
            for r in results
        ]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
