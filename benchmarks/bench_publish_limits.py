"""What the publish-side limiter (quotas.PublishGuard) costs TenantProducer with 1,000 tenants.

Target: the guard costs at most 10 % of publish throughput (guard / no guard >= 0.90).

Three configurations, one message per tenant in turn (org-00001, org-00002, ... passed as
strings, as an application passes them):

* baseline: TenantProducer without a guard;
* guard: a PublishGuard whose limits never refuse but make every check do the full work (size cap,
  a messages/s and a bytes/s bucket per tenant): a default for every tenant plus limits of their
  own for --overrides tenants spread over the range;
* guard + queue limit (info): also a limit on the queue, so four buckets per check.

1. guard.check alone over the 1,000 tenants, in microseconds per check, against building the
   message (build_message(...).to_wire()), the work every send does anyway.
2. In-memory transport (boost_tenancy.testing): TenantProducer.send, --messages per configuration
   and round, a fresh InMemoryBroker per configuration and round. The strict case: little else
   costs much, so the guard shows most.
3. ActiveMQ over STOMP (open_transport(--url)): producer.batch() of --batch messages (one broker
   transaction each on Classic), --stomp-messages per configuration and round, one connection per
   configuration and round. After each round the queue is drained (untimed) by a raw
   auto-acknowledging stomp.py consumer; a last sweep at the end takes anything a failed round
   left. The queue is bench.publish.<random>, one per invocation, SHARED (the default ROUTED
   topology would make 1,000 per-tenant broker queues); it is left on the broker, empty (ActiveMQ
   keeps an empty destination until it is deleted or the broker restarts).
4. Buckets shared through Redis (quotas/shared.py, --redis-url): TenantProducer.send on the
   in-memory transport as in 2, --redis-messages per configuration and round: no guard, the
   in-memory guard, and the guard whose buckets are in Redis (one Lua script call per publish);
   the keys (one prefix per invocation) are deleted at the end. --no-redis skips it.

Interleaving: the machine is a noisy 2-core VM, so within each round every configuration's run is
cut into --blocks blocks and the configurations take turns block by block (A1 B1 C1 A2 B2 C2 ...,
the order rotating every block and every round); a configuration's rate in a round is its
messages over the sum of its blocks' times. --blocks 1 gives plain A, B, C runs per round. A
round is also the unit of the ratios: guard / baseline is taken within each round, then the
median over rounds is the figure the verdict reads (target >= 0.90). Figures are medians over the
rounds; an untimed warm-up round comes first; nothing is asserted on timing.

    .venv/bin/python benchmarks/bench_publish_limits.py [--rounds 7] [--messages 10000]
        [--stomp-messages 5000] [--batch 100] [--blocks 10] [--tenants 1000] [--overrides 100]
        [--checks 20000] [--transport memory|stomp|both] [--url stomp://127.0.0.1:61613]
        [--redis-url redis://127.0.0.1:6379/0] [--redis-messages 5000] [--no-redis]
        [--json out.json]

The broker URL defaults to BOOST_BROKER_URL (stomp://127.0.0.1:61613);
settings the URL does not name (BOOST_BROKER_USER, BOOST_BROKER_PASSWORD, ...) come from the
environment, as the toolkit reads them.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import stomp
from bench_common import BenchmarkError, Series, ratio, table, unique_queue, within

from boost_tenancy import BoostTenancyError, TenantId, TenantProducer
from boost_tenancy.application.brokers import open_transport
from boost_tenancy.application.config import DEFAULT_URL
from boost_tenancy.application.environment import connect_options_from_env
from boost_tenancy.messages import WireMessage, build_message
from boost_tenancy.quotas.guard import PublishGuard
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.shared import RedisPublishBuckets
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.storage import redact_url
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.registry import parse_transport_url
from boost_tenancy.transports.stomp import StompTransport
from boost_tenancy.transports.stomp.settings import StompSettings

GUARD_TARGET = 0.90
SHARED = Routing(default=Topology.SHARED)
MEMORY_QUEUE = "bench.publish.memory"
DRAIN_PREFETCH = 1000

# Limits no benchmark reaches (10 s bursts at these rates), so nothing is ever refused, while every
# check still sizes the message and takes from each bucket.
DEFAULT_LIMITS = PublishLimits(messages_per_s=1e9, bytes_per_s=1e12, max_message_bytes=1_048_576)
OVERRIDE_LIMITS = PublishLimits(messages_per_s=2e9, bytes_per_s=2e12, max_message_bytes=2_097_152)
# The queue's limits carry a size cap too: the most specific limits set give the cap, so a queue
# limit without one would switch the size check off on that queue.
QUEUE_LIMITS = PublishLimits(messages_per_s=5e9, bytes_per_s=5e12, max_message_bytes=1_048_576)

KEYS = ("base", "guard", "guard_q")
LABELS = {
    "base": "baseline: no guard",
    "guard": "guard: tenant limits (2 buckets/check)",
    "guard_q": "guard + queue limit (4 buckets/check, info)",
}


@dataclass(frozen=True, slots=True)
class Config:
    rounds: int
    messages: int
    stomp_messages: int
    batch: int
    blocks: int
    tenants: int
    overrides: int
    checks: int
    url: str
    timeout_s: float
    warmup: bool
    transports: tuple[str, ...]
    redis_url: str = ""
    redis_messages: int = 5_000
    names: tuple[str, ...] = field(default=(), repr=False)

    def report(self) -> dict[str, Any]:
        fields = asdict(self)
        del fields["names"]
        return {
            **fields,
            "url": parse_transport_url(self.url).redacted,
            "redis_url": redact_url(self.redis_url),
        }


def body(index: int) -> dict[str, Any]:
    """A small JSON body, as a service's event would be."""
    return {"n": index, "kind": "bench.publish", "ok": True}


# -- the guards -----------------------------------------------------------------------------------
@dataclass(slots=True)
class Guarded:
    """A guard whose bucket count shows that the checks did the full work."""

    guard: PublishGuard
    buckets_per_tenant: int

    def verify(self, tenants: int) -> str:
        """Nothing refused, and every tenant's buckets exist (each check took from them)."""
        refused = self.guard.refused()
        if refused:
            raise BenchmarkError(f"the guard refused publishes: {dict(list(refused.items())[:5])}")
        expected = tenants * self.buckets_per_tenant
        held = self.guard.bucket_count()
        if held != expected:
            raise BenchmarkError(f"the guard holds {held} buckets, expected {expected}")
        return f"{held} buckets, 0 refusals"


def make_guard(
    cfg: Config, queue: str, *, queue_limit: bool, shared: RedisPublishBuckets | None = None
) -> Guarded:
    guard = PublishGuard(DEFAULT_LIMITS, shared=shared)
    step = max(1, len(cfg.names) // max(1, cfg.overrides))
    for name in cfg.names[::step][: cfg.overrides]:
        guard.set_limits(OVERRIDE_LIMITS, tenant=name)
    if queue_limit:
        guard.set_limits(QUEUE_LIMITS, queue=queue)
    return Guarded(guard, 4 if queue_limit else 2)


def make_guards(cfg: Config, queue: str) -> dict[str, Guarded | None]:
    return {
        "base": None,
        "guard": make_guard(cfg, queue, queue_limit=False),
        "guard_q": make_guard(cfg, queue, queue_limit=True),
    }


# -- interleaved rounds of blocks ----------------------------------------------------------------
class Session(Protocol):
    """One configuration's run in one round: set up, blocks of work (each timed), torn down."""

    def start(self) -> None: ...

    def block(self, first: int, count: int) -> None: ...

    def finish(self) -> None: ...


class SessionFactory(Protocol):
    def __call__(self, key: str) -> Session: ...


@dataclass(slots=True)
class Figures:
    """Per configuration and round: rate (units/s) and process CPU per unit (us)."""

    rates: dict[str, Series]
    cpu: dict[str, Series]
    failures: list[str]


def block_bounds(total: int, blocks: int, unit: int) -> list[tuple[int, int]]:
    """(first, count) of blocks cutting range(total) in about equal parts, cut at multiples of
    unit (a batch stays whole)."""
    units = math.ceil(total / unit)
    cuts = sorted({min(total, round(units * i / blocks) * unit) for i in range(blocks + 1)})
    return [(a, b - a) for a, b in itertools.pairwise(cuts) if b > a]


def run_round(
    make: SessionFactory, keys: Sequence[str], bounds: Sequence[tuple[int, int]], shift: int
) -> tuple[dict[str, float], dict[str, float]]:
    """One round: every configuration's blocks, taking turns; returns wall and CPU seconds."""
    sessions = {key: make(key) for key in keys}
    wall = dict.fromkeys(keys, 0.0)
    cpu = dict.fromkeys(keys, 0.0)
    started: list[Session] = []
    try:
        for session in sessions.values():
            session.start()
            started.append(session)
        gc.collect()
        for index, (first, count) in enumerate(bounds):
            turn = (shift + index) % len(keys)
            for key in [*keys[turn:], *keys[:turn]]:
                session = sessions[key]
                begin, begin_cpu = time.perf_counter(), time.process_time()
                session.block(first, count)
                wall[key] += time.perf_counter() - begin
                cpu[key] += time.process_time() - begin_cpu
    finally:
        problems = []
        for session in started:
            try:
                session.finish()
            except (BenchmarkError, BoostTenancyError) as exc:
                problems.append(str(exc))
        if problems:
            raise BenchmarkError("; ".join(problems))
    return wall, cpu


def rounds_of(
    cfg: Config,
    what: str,
    make: SessionFactory,
    total: int,
    *,
    unit: int = 1,
    labels: dict[str, str] = LABELS,
    after_round: Callable[[bool], None] | None = None,
) -> Figures:
    """cfg.rounds rounds (after an untimed warm-up round); a failed round is NaN everywhere."""
    keys = list(labels)
    bounds = block_bounds(total, cfg.blocks, unit)
    rates = {key: Series(labels[key], "msg/s") for key in keys}
    cpu = {key: Series(f"CPU per message: {labels[key]}", "us/msg") for key in keys}
    failures: list[str] = []
    first = 0 if cfg.warmup else 1
    for number in range(first, cfg.rounds + 1):
        name = "warm-up" if number == 0 else f"round {number}/{cfg.rounds}"
        print(f"  {what}: {name} ...", file=sys.stderr)
        completed = False
        try:
            try:
                wall, used = run_round(make, keys, bounds, number)
                completed = True
            finally:
                if after_round is not None:
                    after_round(completed)
        except (BenchmarkError, BoostTenancyError) as exc:
            if number == 0:
                raise
            failures.append(f"round {number}: failed: {exc}")
            print(f"  {failures[-1]}", file=sys.stderr)
            wall = used = dict.fromkeys(keys, math.nan)
        if number == 0:
            continue
        for key in keys:
            rates[key].values.append(total / wall[key])
            cpu[key].values.append(used[key] / total * 1e6)
    return Figures(rates, cpu, failures)


def per_unit_us(series: Series, label: str) -> Series:
    return Series(label, "us/msg", [1e6 / rate for rate in series.values])


def difference_us(label: str, slower: Series, faster: Series) -> Series:
    return Series(
        label,
        "us/msg",
        [1e6 / s - 1e6 / f for s, f in zip(slower.values, faster.values, strict=True)],
    )


def at_or_above(series: Series, target: float) -> str:
    done = [v for v in series.values if not math.isnan(v)]
    return f"{sum(v >= target for v in done)} of {len(done)}"


# -- 1. guard.check alone -------------------------------------------------------------------------
CHECK_LABELS = {
    "build": "build_message().to_wire() (reference)",
    "guard": "guard.check, tenant limits (2 buckets)",
    "guard_q": "guard.check, + queue limit (4 buckets, info)",
    "inactive": "guard.check, no limits set (info)",
}


@dataclass(slots=True)
class BuildSession:
    names: Sequence[str]

    def start(self) -> None:
        return None

    def block(self, first: int, count: int) -> None:
        names, tenants = self.names, len(self.names)
        for index in range(first, first + count):
            build_message(names[index % tenants], body(index)).to_wire()

    def finish(self) -> None:
        return None


@dataclass(slots=True)
class CheckSession:
    guard: PublishGuard
    queue: str
    items: Sequence[tuple[TenantId, WireMessage]]

    def start(self) -> None:
        return None

    def block(self, first: int, count: int) -> None:
        check, queue = self.guard.check, self.queue
        for tenant, wire in self.items[first : first + count]:
            check(tenant, queue, (wire,))

    def finish(self) -> None:
        return None


def check_items(cfg: Config) -> list[tuple[TenantId, WireMessage]]:
    """What the producer hands the guard: each message's own TenantId (parsed from the string
    the caller gave, so a new object per message) and its wire form; built untimed."""
    names = cfg.names
    messages = (build_message(names[i % len(names)], body(i)) for i in range(cfg.checks))
    return [(message.tenant, message.to_wire()) for message in messages]


def bench_checks(cfg: Config) -> tuple[list[Series], list[str], dict[str, float]]:
    print("1. guard.check alone", file=sys.stderr)
    queue = MEMORY_QUEUE
    guards = make_guards(cfg, queue)
    items = check_items(cfg)
    inactive = PublishGuard()  # no limits at all: check returns at once

    def make(key: str) -> Session:
        if key == "build":
            return BuildSession(cfg.names)
        guarded = guards.get(key)
        return CheckSession(inactive if guarded is None else guarded.guard, queue, items)

    figures = rounds_of(cfg, "guard.check", make, cfg.checks, labels=CHECK_LABELS)
    per_check = {key: per_unit_us(series, series.label) for key, series in figures.rates.items()}
    rows = [
        *per_check.values(),
        ratio("guard.check (tenant limits) / build", per_check["guard"], per_check["build"]),
        ratio("guard.check (+ queue limit) / build", per_check["guard_q"], per_check["build"]),
    ]
    checked = [
        f"{key}: {guarded.verify(cfg.tenants)}"
        for key, guarded in guards.items()
        if guarded is not None
    ]
    notes = [
        f"{cfg.checks} checks per configuration and round over {cfg.tenants} tenants in turn, "
        "one message per check; wall time per call",
        "guards after the rounds: " + "; ".join(checked),
        *figures.failures,
    ]
    return rows, notes, {key: series.median for key, series in per_check.items()}


# -- 2. in-memory transport -----------------------------------------------------------------------
@dataclass(slots=True)
class MemorySession:
    """TenantProducer.send to a fresh in-memory broker (every round starts from an empty store)."""

    names: Sequence[str]
    guarded: Guarded | None
    total: int
    broker: InMemoryBroker | None = None
    transport: InMemoryTransport | None = None
    producer: TenantProducer | None = None

    def start(self) -> None:
        self.broker = InMemoryBroker()
        self.transport = InMemoryTransport(self.broker)
        self.transport.connect()
        guard = None if self.guarded is None else self.guarded.guard
        self.producer = TenantProducer(self.transport, routing=SHARED, guard=guard)

    def block(self, first: int, count: int) -> None:
        if self.producer is None:
            raise BenchmarkError("block before start")
        send, names, tenants = self.producer.send, self.names, len(self.names)
        for index in range(first, first + count):
            send(MEMORY_QUEUE, names[index % tenants], body(index))

    def finish(self) -> None:
        if self.broker is None or self.transport is None:
            return
        stored = self.broker.depth(MEMORY_QUEUE)
        self.transport.close()
        self.broker.close()
        if stored != self.total:
            raise BenchmarkError(f"in-memory broker holds {stored} of {self.total} messages")


# -- 3. ActiveMQ over STOMP -----------------------------------------------------------------------
@dataclass(slots=True)
class Broker:
    """Where the drain connects, and what a transport found there."""

    settings: StompSettings
    server: str = ""
    flavour: str = ""
    prefetch_headers: dict[str, str] = field(default_factory=dict)
    drained: int = 0


def connected_transport(cfg: Config) -> StompTransport:
    transport = open_transport(cfg.url, os.environ)
    if not isinstance(transport, StompTransport):
        raise BenchmarkError(f"{parse_transport_url(cfg.url).redacted} is not a STOMP transport")
    within(cfg.timeout_s, "connect", transport.connect)
    return transport


def probe_broker(cfg: Config) -> Broker:
    broker = Broker(
        StompSettings.from_url(parse_transport_url(cfg.url), connect_options_from_env(os.environ))
    )
    transport = connected_transport(cfg)
    try:
        broker.server = transport.server
        broker.flavour = transport.flavour.value
        broker.prefetch_headers = transport.flavour.prefetch_headers(
            DRAIN_PREFETCH, broker.settings.artemis_window_bytes
        )
        if not transport.capabilities.atomic_batches:
            print("note: no atomic batches on this broker: batch() sends plainly", file=sys.stderr)
    finally:
        transport.close()
    return broker


def drain(cfg: Config, broker: Broker, queue: str, expected: int | None) -> int:
    """Consume (auto-ack) the queue: expected messages, or (None) whatever comes until none has
    come for a second. Returns how many; untimed."""
    count = 0
    last = time.monotonic()
    lock = threading.Lock()
    done = threading.Event()
    errors: list[str] = []

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            nonlocal count, last
            with lock:
                count += 1
                last = time.monotonic()
                if expected is not None and count >= expected:
                    done.set()

        def on_error(self, frame: Any) -> None:
            errors.append(str(frame.headers.get("message", "ERROR frame")))
            done.set()

    settings = broker.settings
    conn = stomp.Connection12(
        [(settings.host, settings.port)],
        vhost=settings.vhost or settings.host,
        heartbeats=(0, 0),
        auto_decode=False,
        reconnect_attempts_max=1,
    )
    conn.set_listener("drain", Listener())
    within(
        cfg.timeout_s,
        "drain connect",
        lambda: conn.connect(settings.username, settings.password, wait=True),
    )
    try:
        conn.subscribe(f"/queue/{queue}", id="drain", ack="auto", headers=broker.prefetch_headers)
        if expected is not None:
            if not done.wait(cfg.timeout_s) or errors:
                raise BenchmarkError(
                    f"drain of {queue}: {count} of {expected} messages within "
                    f"{cfg.timeout_s:.0f}s {'; '.join(errors)}"
                )
        else:
            while True:
                time.sleep(0.1)
                with lock:
                    if time.monotonic() - last >= 1.0:
                        break
        conn.unsubscribe("drain")
    finally:
        conn.disconnect()
    with lock:
        broker.drained += count
        return count


@dataclass(slots=True)
class StompSession:
    """producer.batch() of cfg.batch messages each over a connection of its own."""

    cfg: Config
    queue: str
    guarded: Guarded | None
    transport: StompTransport | None = None
    producer: TenantProducer | None = None

    def start(self) -> None:
        self.transport = connected_transport(self.cfg)
        guard = None if self.guarded is None else self.guarded.guard
        self.producer = TenantProducer(self.transport, routing=SHARED, guard=guard)

    def block(self, first: int, count: int) -> None:
        if self.producer is None:
            raise BenchmarkError("block before start")
        names, tenants, queue, size = (
            self.cfg.names,
            len(self.cfg.names),
            self.queue,
            self.cfg.batch,
        )
        end = first + count
        for start in range(first, end, size):
            with self.producer.batch() as outgoing:
                for index in range(start, min(start + size, end)):
                    outgoing.send(queue, names[index % tenants], body(index))

    def finish(self) -> None:
        if self.transport is not None:
            self.transport.close()


# -- throughput sections --------------------------------------------------------------------------
@dataclass(slots=True)
class Outcome:
    rows: list[Series]
    notes: list[str]
    verdict: str
    median_ratio: float
    base_us: float


def throughput(
    cfg: Config,
    name: str,
    make: SessionFactory,
    guards: dict[str, Guarded | None],
    total: int,
    *,
    unit: int = 1,
    after_round: Callable[[bool], None] | None = None,
) -> Outcome:
    figures = rounds_of(cfg, name, make, total, unit=unit, after_round=after_round)
    rates, cpu = figures.rates, figures.cpu
    target = ratio("guard / baseline (target >= 0.90)", rates["guard"], rates["base"])
    queue_ratio = ratio("guard + queue limit / baseline (info)", rates["guard_q"], rates["base"])
    base_time = per_unit_us(rates["base"], "baseline: time per message")
    rows = [
        *rates.values(),
        target,
        queue_ratio,
        base_time,
        difference_us("guard: added time per message", rates["guard"], rates["base"]),
        difference_us("guard + queue limit: added time per msg", rates["guard_q"], rates["base"]),
        *cpu.values(),
        ratio("CPU per message: guard / baseline", cpu["guard"], cpu["base"]),
    ]
    checked = [
        f"{key}: {guarded.verify(cfg.tenants)}"
        for key, guarded in guards.items()
        if guarded is not None
    ]
    of_medians = rates["guard"].median / rates["base"].median
    of_medians_q = rates["guard_q"].median / rates["base"].median
    verdict = verdict_line(name, target.median, of_medians)
    notes = [
        "guards after the rounds: " + "; ".join(checked),
        f"ratio of the median rates: guard {of_medians:.3f}, guard + queue limit "
        f"{of_medians_q:.3f}; rounds at or above 0.90: guard {at_or_above(target, GUARD_TARGET)}"
        f", guard + queue limit {at_or_above(queue_ratio, GUARD_TARGET)}",
        *figures.failures,
        verdict,
        f"  with a queue limit too (info): median ratio {queue_ratio.median:.3f} -> "
        f"{'met' if queue_ratio.median >= GUARD_TARGET else 'NOT MET'}",
    ]
    return Outcome(rows, notes, verdict, target.median, base_time.median)


def verdict_line(name: str, median_ratio: float, of_medians: float) -> str:
    if math.isnan(median_ratio):
        return f"VERDICT {name}: NO FIGURE (every round failed)"
    word = "met" if median_ratio >= GUARD_TARGET else "NOT MET"
    return (
        f"VERDICT {name}: {word} -- guard / baseline throughput {median_ratio:.3f} (median of "
        f"per-round ratios; {of_medians:.3f} of the median rates), target >= {GUARD_TARGET:.2f}"
    )


def bench_memory(cfg: Config) -> Outcome:
    print("2. in-memory transport", file=sys.stderr)
    guards = make_guards(cfg, MEMORY_QUEUE)

    def make(key: str) -> Session:
        return MemorySession(cfg.names, guards[key], cfg.messages)

    outcome = throughput(cfg, "memory", make, guards, cfg.messages)
    outcome.notes.insert(
        0,
        f"TenantProducer.send, {cfg.messages} messages per configuration and round in "
        f"{len(block_bounds(cfg.messages, cfg.blocks, 1))} interleaved blocks; a fresh "
        "InMemoryBroker per configuration and round",
    )
    return outcome


def bench_stomp(cfg: Config, broker: Broker, queue: str) -> Outcome:
    print("3. STOMP", file=sys.stderr)
    guards = make_guards(cfg, queue)

    def make(key: str) -> Session:
        return StompSession(cfg, queue, guards[key])

    def after_round(completed: bool) -> None:
        # A complete round sent each configuration's messages; after a failed one, whatever
        # arrives until the queue has been quiet for a second.
        drain(cfg, broker, queue, len(KEYS) * cfg.stomp_messages if completed else None)

    outcome = throughput(
        cfg, "stomp", make, guards, cfg.stomp_messages, unit=cfg.batch, after_round=after_round
    )
    outcome.notes.insert(
        0,
        f"producer.batch() of {cfg.batch}, {cfg.stomp_messages} messages per configuration and "
        f"round in {len(block_bounds(cfg.stomp_messages, cfg.blocks, cfg.batch))} interleaved "
        f"blocks, a connection each; queue {queue} (SHARED), drained after each round (untimed)",
    )
    return outcome


# -- 4. shared buckets in Redis -------------------------------------------------------------------
REDIS_LABELS = {
    "base": "baseline: no guard",
    "guard": "guard: in-memory buckets (2/check)",
    "redis": "guard: buckets in Redis (2/check)",
}


def bench_redis(cfg: Config) -> tuple[list[Series], list[str], str, float]:
    print("4. shared buckets in Redis", file=sys.stderr)
    prefix = f"bench:{unique_queue('publish').rsplit('.', 1)[-1]}"
    shared = RedisPublishBuckets.from_url(cfg.redis_url, prefix=prefix)
    try:
        shared.client.ping()
        guarded: dict[str, Guarded | None] = {
            "base": None,
            "guard": make_guard(cfg, MEMORY_QUEUE, queue_limit=False),
            "redis": make_guard(cfg, MEMORY_QUEUE, queue_limit=False, shared=shared),
        }

        def make(key: str) -> Session:
            return MemorySession(cfg.names, guarded[key], cfg.redis_messages)

        figures = rounds_of(cfg, "redis", make, cfg.redis_messages, labels=REDIS_LABELS)
        keys = sum(1 for _ in shared.client.scan_iter(match=f"{prefix}:*", count=1000))
    finally:
        for key in shared.client.scan_iter(match=f"{prefix}:*", count=1000):
            shared.client.delete(key)
        shared.close()
    rates, cpu = figures.rates, figures.cpu
    target = ratio("redis guard / baseline (target >= 0.90)", rates["redis"], rates["base"])
    rows = [
        *rates.values(),
        target,
        ratio("in-memory guard / baseline", rates["guard"], rates["base"]),
        ratio("redis guard / in-memory guard", rates["redis"], rates["guard"]),
        per_unit_us(rates["base"], "baseline: time per message"),
        difference_us("redis guard: added time per message", rates["redis"], rates["base"]),
        *cpu.values(),
    ]
    checked = [f"{key}: {g.verify(cfg.tenants)}" for key, g in guarded.items() if g is not None]
    if keys != 2 * cfg.tenants:
        raise BenchmarkError(f"Redis holds {keys} bucket keys, expected {2 * cfg.tenants}")
    verdict = verdict_line("redis", target.median, rates["redis"].median / rates["base"].median)
    notes = [
        f"TenantProducer.send on the in-memory transport, {cfg.redis_messages} messages per "
        f"configuration and round; Redis {redact_url(cfg.redis_url)}, one script call per publish",
        "guards after the rounds: " + "; ".join(checked) + f"; {keys} bucket keys in Redis",
        *figures.failures,
        verdict,
    ]
    return rows, notes, verdict, target.median


# -- main -----------------------------------------------------------------------------------------
def default_url() -> str:
    return os.environ.get("BOOST_BROKER_URL", "").strip() or DEFAULT_URL


def parse_args(argv: Sequence[str] | None) -> tuple[Config, Path | None]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--messages", type=int, default=10_000, help="in-memory: messages per config and round"
    )
    parser.add_argument(
        "--stomp-messages", type=int, default=5_000, help="STOMP: messages per config and round"
    )
    parser.add_argument("--batch", type=int, default=100, help="STOMP: messages per batch()")
    parser.add_argument(
        "--blocks", type=int, default=10, help="interleaved blocks per configuration and round"
    )
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument(
        "--overrides", type=int, default=100, help="tenants with limits of their own"
    )
    parser.add_argument(
        "--checks", type=int, default=20_000, help="guard.check calls per config and round (1)"
    )
    parser.add_argument("--transport", choices=["memory", "stomp", "both"], default="both")
    parser.add_argument("--url", default=None, help=f"STOMP broker (default {default_url()})")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per broker wait")
    parser.add_argument("--no-warmup", action="store_true", help="skip the warm-up round")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BOOST_PUBLISH_REDIS_URL", "").strip() or "redis://127.0.0.1:6379/0",
        help="Redis of section 4 (default BOOST_PUBLISH_REDIS_URL, else the local one)",
    )
    parser.add_argument(
        "--redis-messages", type=int, default=5_000, help="Redis: messages per config and round"
    )
    parser.add_argument("--no-redis", action="store_true", help="skip section 4 (Redis)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    for option in (
        "rounds",
        "messages",
        "stomp_messages",
        "batch",
        "blocks",
        "tenants",
        "checks",
        "redis_messages",
    ):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    if not 0 <= args.overrides <= args.tenants:
        parser.error("--overrides must be between 0 and --tenants")
    transports = ("memory", "stomp") if args.transport == "both" else (args.transport,)
    cfg = Config(
        rounds=args.rounds,
        messages=args.messages,
        stomp_messages=args.stomp_messages,
        batch=args.batch,
        blocks=args.blocks,
        tenants=args.tenants,
        overrides=args.overrides,
        checks=args.checks,
        url=args.url or default_url(),
        timeout_s=args.timeout,
        warmup=not args.no_warmup,
        transports=transports,
        redis_url="" if args.no_redis else args.redis_url,
        redis_messages=args.redis_messages,
        names=tuple(f"org-{index:05d}" for index in range(1, args.tenants + 1)),
    )
    return cfg, args.json


def section(
    report: dict[str, Any], name: str, title: str, rows: list[Series], notes: list[str]
) -> None:
    print("\n" + table(title, rows, notes), flush=True)
    report["sections"][name] = {"rows": [row.report() for row in rows], "notes": notes}


def main(argv: Sequence[str] | None = None) -> int:
    cfg, json_path = parse_args(argv)
    started = time.monotonic()
    report: dict[str, Any] = {"config": cfg.report(), "sections": {}, "verdicts": {}}
    broker = probe_broker(cfg) if "stomp" in cfg.transports else None
    if broker is not None:
        report["broker"] = {"server": broker.server, "flavour": broker.flavour}
    print(
        f"boost_tenancy publish-limits benchmark  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n"
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs; stomp.py {stomp.__version__}"
        + (f"; broker {broker.server} ({broker.flavour})" if broker else "")
        + f"\ntenants={cfg.tenants} (with limits of their own: {cfg.overrides}) "
        f"rounds={cfg.rounds} blocks={cfg.blocks} messages={cfg.messages} (memory) "
        f"stomp_messages={cfg.stomp_messages} batch={cfg.batch} checks={cfg.checks}\n"
        f"limits: default  {DEFAULT_LIMITS}\n        tenant   {OVERRIDE_LIMITS}\n"
        f"        queue    {QUEUE_LIMITS}\n"
        "figures per round (r1..), median over rounds; ratios are taken per round",
        flush=True,
    )

    rows, notes, check_us = bench_checks(cfg)
    section(report, "checks", f"1. guard.check alone ({cfg.tenants} tenants in turn)", rows, notes)

    verdicts: list[str] = []
    if "memory" in cfg.transports:
        outcome = bench_memory(cfg)
        outcome.notes.append(
            f"from section 1: {check_us['guard']:.1f} us per check on "
            f"{outcome.base_us:.1f} us per send would give about "
            f"{outcome.base_us / (outcome.base_us + check_us['guard']):.3f}"
        )
        title = f"2. In-memory transport: TenantProducer.send ({cfg.messages} messages)"
        section(report, "memory", title, outcome.rows, outcome.notes)
        report["verdicts"]["memory"] = outcome.median_ratio
        verdicts.append(outcome.verdict)

    if broker is not None:
        queue = unique_queue("publish")
        report["queue"] = queue
        try:
            outcome = bench_stomp(cfg, broker, queue)
        finally:
            left = drain(cfg, broker, queue, None)
        outcome.notes.append(
            f"left on the broker: queue {queue}, empty ({broker.drained} messages consumed in "
            f"all, {left} of them by the final sweep)"
        )
        title = (
            f"3. ActiveMQ over STOMP ({parse_transport_url(cfg.url).redacted}): "
            f"batch() of {cfg.batch} ({cfg.stomp_messages} messages)"
        )
        section(report, "stomp", title, outcome.rows, outcome.notes)
        report["verdicts"]["stomp"] = outcome.median_ratio
        verdicts.append(outcome.verdict)

    if cfg.redis_url:
        rows, notes, verdict, median_ratio = bench_redis(cfg)
        title = f"4. Shared buckets in Redis: TenantProducer.send ({cfg.redis_messages} messages)"
        section(report, "redis", title, rows, notes)
        report["verdicts"]["redis"] = median_ratio
        verdicts.append(verdict)

    print("\n" + "\n".join(verdicts), flush=True)
    print(f"(run took {time.monotonic() - started:.0f} s)", flush=True)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchmarkError, BoostTenancyError, TimeoutError) as exc:
        print(f"benchmark failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
