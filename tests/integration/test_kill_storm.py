"""Kill storm: workers SIGKILLed at random and the broker restarted twice lose and leak nothing.

Three tenants' persistent messages wait on one shared queue of a dedicated broker (its own home
and ports, never the shared one), ActiveMQ Classic and ActiveMQ Artemis in turn, and on the
tenants' own queues of the local RabbitMQ (a machine service, restarted as the brokers of the
test's own are). Worker processes (`boost-tenancy run`) consume them while the
test SIGKILLs the worker ten times at random moments, restarts the broker cleanly once and kills
it (-9) once; a last worker drains the queue. Every sent message must have been handled, by its
own tenant only, with duplicates no more than the deliveries in flight at each failure (and, for
a kill -9 of the broker, the acknowledgements it had not yet written); on RabbitMQ, whose node
loses many such acknowledgements, what that crash brings back is counted and printed apart.
Replay a run with KILL_STORM_SEED=<the printed seed>.
"""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

import pytest

from boost_tenancy import TenantProducer
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.transports.base import QueueLister
from tests.conftest import unique_queue, wait_until
from tests.integration.rabbitmq_node import LocalRabbitMQ
from tests.integration.storm_processors import HANDLE_MS_ENV, LOG_ENV, QUEUE_ENV
from tests.integration.worker_support import (
    BrokerAddress,
    Worker,
    WorkerPool,
    message_ids,
    open_client,
    own_broker,
    read_queues,
    stored_in,
    worker_pool,
)

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker(
        "restarts and kills a Classic and an Artemis of its own, and the local RabbitMQ"
    ),
]

PROCESSOR = "tests.integration.storm_processors:StormRecorder"
SEED_ENV = "KILL_STORM_SEED"

TENANTS = ("org-storm-a", "org-storm-b", "org-storm-c")
TENANT_WEIGHTS = (5, 3, 2)
"""Uneven on purpose: one tenant's backlog outlasts the others'."""
TOTAL = 2_000
SEND_BATCH = 100
KILLS = 10
BROKER_RESTARTS = 2
"""One clean stop and start, one kill -9 and start."""
WORKERS = 2
PREFETCH = 4
HANDLE_MS = 3
SUBSCRIPTIONS = len(TENANTS)
"""Every worker runs all three tenants on the one queue: one subscription per tenant."""

# A delivery is handled again only if its acknowledgement never reached the broker, and the
# broker keeps at most PREFETCH unacknowledged deliveries per subscription of the one worker
# process (the WORKERS handlers only ever run prefetched deliveries). So a SIGKILL of the worker,
# and likewise a broker restart that drops its connection, can make at most
# PREFETCH x SUBSCRIPTIONS = 4 x 3 = 12 extra handlings; the storm at most
# (10 kills + 2 restarts) x 12 = 144 on Classic. The final worker stops by SIGTERM once the queue is
# drained, which duplicates nothing.
IN_FLIGHT_BOUND = PREFETCH * SUBSCRIPTIONS
# Artemis bounds a subscription by bytes: PREFETCH x ARTEMIS_WINDOW_BYTES, and it hands out one
# more message while any credit is left. Every message of the storm is at least
# MIN_MESSAGE_BYTES as the broker counts it (body, properties, headers), so at most
# PREFETCH x ARTEMIS_WINDOW_BYTES / MIN_MESSAGE_BYTES + 1 = 11 are in flight per subscription.
ARTEMIS_WINDOW_BYTES = 512
MIN_MESSAGE_BYTES = 200
ARTEMIS_IN_FLIGHT_BOUND = (PREFETCH * ARTEMIS_WINDOW_BYTES // MIN_MESSAGE_BYTES + 1) * SUBSCRIPTIONS

RESTORED_CEILING = 400
"""At most this many acknowledged messages a kill -9 of RabbitMQ's node may bring back (151 the
most measured here, with 2,000 messages handled at ~100/s): more would mean it lost far more than
the acknowledgements of its last moments."""
PROGRESS_BETWEEN_FAILURES = (40, 110)
"""Handled messages (lines of the log) between two failures, drawn at random. At most 12 x 110 =
1,320 lines for 2,000 messages: the storm never runs out of work, the last worker always has
some left to drain."""
EXTRA_DELAY_S = (0.0, 0.03)
"""Drawn after the progress is reached, so the failure falls anywhere within a handler."""
WAIT_S = 120.0


class Restartable(Protocol):
    def restart(self) -> None: ...
    def kill(self) -> None: ...
    def start(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class StormBroker:
    """The broker of a storm: what the test restarts and kills, and where it sends the messages
    and reads them back (STOMP, where the broker speaks it)."""

    flavour: str
    node: Restartable
    client: BrokerAddress
    amqp_url: str | None
    """Where the workers consume over AMQP 1.0; None where the broker has no acceptor for it."""


@pytest.fixture(scope="module")
def storm_broker(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[StormBroker]:
    flavour: str = request.param
    if flavour == "rabbitmq":
        url: str = request.getfixturevalue("amqp_url")
        yield StormBroker(flavour, LocalRabbitMQ(url), url, url)
        return
    home = tmp_path_factory.mktemp(f"storm-{flavour}")
    for own in own_broker(flavour, home, 62713, 62716):
        client = dataclasses.replace(own.settings, confirm_timeout_s=10.0, reconnect_wait_s=60.0)
        yield StormBroker(flavour, own, client, own.amqp_url)


@pytest.fixture
def workers(tmp_path: Path, storm_broker: StormBroker) -> Iterator[WorkerPool]:
    yield from worker_pool(tmp_path, storm_broker.client)


class Record(NamedTuple):
    """One line of the processor's log: one handling of one delivery."""

    tenant: str
    """The tenant of the subscription (and handler) that got the delivery."""
    message_id: str
    attempt: int
    property_tenant: str
    body_tenant: str
    pid: int


def _records(path: Path) -> list[Record]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        tenant, message_id, attempt, property_tenant, body_tenant, pid = line.split(" ")
        records.append(
            Record(tenant, message_id, int(attempt), property_tenant, body_tenant, int(pid))
        )
    return records


class Struck(NamedTuple):
    """One failure of the storm, placed among the handlings."""

    began: int
    """Handlings logged as it began."""
    ended: int
    """Handlings logged once it was over."""
    what: str


NO_FAILURE = -1


def extra_by_failure(
    records: Sequence[Record], struck: Sequence[Struck], *, prefer: str | None = None
) -> Counter[int]:
    """Each handling of a message after its first, counted against the failure (its index in
    struck; NO_FAILURE when there is none) that made the broker deliver it again: among the
    failures under way or over between the handling before it and this one, a failure of the
    kind prefer when there is one (RabbitMQ's node crash, which brings back what it took as
    acknowledged long before), else the latest."""
    counted: Counter[int] = Counter()
    last: dict[str, int] = {}
    for index, record in enumerate(records):
        before = last.get(record.message_id)
        last[record.message_id] = index
        if before is None:
            continue
        between = [i for i, s in enumerate(struck) if before < s.ended and s.began <= index]
        preferred = [i for i in between if struck[i].what == prefer]
        counted[(preferred or between or [NO_FAILURE])[-1]] += 1
    return counted


def _ceiling(what: str, *, node_crash: str | None, in_flight: int) -> int:
    """The extra handlings one failure may bring: what was in flight; for a kill -9 of the
    broker, as many acknowledged messages again that it had taken but not yet written (Artemis
    appends acknowledgements to its journal without waiting for the disk: measured over AMQP,
    13 back where 12 were in flight, the 13th handled and acknowledged just before the kill);
    for RabbitMQ's node crash, RESTORED_CEILING."""
    if what == node_crash:
        return RESTORED_CEILING
    if what == "broker-kill":
        return 2 * in_flight
    return in_flight


def _line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _send_all(client: BrokerAddress, queue: str, rng: random.Random) -> dict[str, str]:
    """Send TOTAL persistent messages, tenants drawn by rng, each batch confirmed by the broker
    before the next; the tenant each id was sent for."""
    sent_for: dict[str, str] = {}
    transport = open_client(client)
    try:
        producer = TenantProducer(transport)
        tenants = rng.choices(TENANTS, weights=TENANT_WEIGHTS, k=TOTAL)
        for start in range(0, TOTAL, SEND_BATCH):
            with producer.batch() as batch:
                sent = [
                    (batch.send(queue, tenant, {"n": n}), tenant)
                    for n, tenant in enumerate(tenants[start : start + SEND_BATCH], start)
                ]
            sent_for.update((message.message_id, tenant) for message, tenant in sent)
    finally:
        transport.close()
    return sent_for


def _stuck_in_the_broker(client: BrokerAddress, queues: list[str]) -> int:
    """Messages the broker counts in delivery on queues that no consumer holds any more."""
    reader = open_client(client)
    try:
        if not reader.capabilities.queue_listing or not isinstance(reader, QueueLister):
            return 0
        listed = {q.name: q for q in reader.list_queues(["tenant."])}
    finally:
        reader.close()
    return sum(
        q.stats.in_flight for name, q in listed.items() if name in queues and q.consumers == 0
    )


def _progress(worker: Worker, log: Path, lines: int, what: str) -> None:
    """Wait until the log has `lines` lines; fail at once if the worker exits by itself."""
    reached = wait_until(lambda: _line_count(log) >= lines or not worker.running(), timeout=WAIT_S)
    if not worker.running():
        pytest.fail(f"the worker exited by itself ({what}):\n{worker.text()[-4000:]}")
    if not reached:
        pytest.fail(
            f"no progress ({what}): {_line_count(log)} of {lines} lines after {WAIT_S:.0f}s\n"
            f"{worker.text()[-4000:]}"
        )


@pytest.mark.parametrize(
    ("storm_broker", "protocol"),
    [
        ("classic", "stomp"),
        ("artemis", "stomp"),
        ("artemis", "amqp"),
        pytest.param("rabbitmq", "amqp", marks=pytest.mark.amqp_broker),
    ],
    indirect=["storm_broker"],
)
def test_kill_storm_loses_nothing_leaks_nothing_and_bounds_duplicates(
    storm_broker: StormBroker,
    workers: WorkerPool,
    tmp_path: Path,
    protocol: str,
    figures: Callable[[str], None],
) -> None:
    """The workers consume over protocol; the messages are sent and read back over STOMP where
    the broker speaks it (Classic 5.17 here has no AMQP 1.0 acceptor, RabbitMQ no STOMP)."""
    client = storm_broker.client
    seed = int(os.environ.get(SEED_ENV) or secrets.randbits(32))
    print(f"\nkill storm: seed={seed} (replay with {SEED_ENV}={seed})")
    rng = random.Random(seed)
    began = time.monotonic()

    queue = unique_queue("storm")
    log = tmp_path / "handled.log"
    sent_for = _send_all(client, queue, rng)
    assert len(sent_for) == TOTAL
    send_s = time.monotonic() - began

    env = {
        QUEUE_ENV: queue,
        LOG_ENV: str(log),
        HANDLE_MS_ENV: str(HANDLE_MS),
        "BOOST_WORKERS": str(WORKERS),
        "BOOST_PREFETCH": str(PREFETCH),
        "BOOST_SHUTDOWN_GRACE_S": "10",
        "BOOST_ARTEMIS_WINDOW_BYTES": str(ARTEMIS_WINDOW_BYTES),
    }
    artemis = storm_broker.flavour == "artemis"
    # AMQP link credit counts messages, as Classic's prefetch does; Artemis's STOMP window bytes.
    byte_window = artemis and protocol == "stomp"
    bound = (KILLS + BROKER_RESTARTS) * (
        ARTEMIS_IN_FLIGHT_BOUND if byte_window else IN_FLIGHT_BOUND
    )
    if protocol == "amqp":
        assert storm_broker.amqp_url is not None
        env["BOOST_BROKER_URL"] = storm_broker.amqp_url
    failures = ["kill"] * KILLS + ["broker-restart", "broker-kill"]
    rng.shuffle(failures)

    worker = workers.start(PROCESSOR, TENANTS, env)
    started = 1
    struck: list[Struck] = []
    for number, failure in enumerate(failures, 1):
        lines = _line_count(log) + rng.randint(*PROGRESS_BETWEEN_FAILURES)
        _progress(worker, log, lines, f"before failure {number}, {failure}")
        time.sleep(rng.uniform(*EXTRA_DELAY_S))
        began_at = _line_count(log)
        if failure == "kill":
            worker.signal(signal.SIGKILL)
            assert worker.wait(10) == -signal.SIGKILL
            worker = workers.start(PROCESSOR, TENANTS, env)
            started += 1
        elif failure == "broker-restart":
            storm_broker.node.restart()
        else:
            storm_broker.node.kill()
            storm_broker.node.start()
        struck.append(Struck(began_at, _line_count(log), failure))
    storm_s = time.monotonic() - began - send_s

    # The last worker drains the queue; then time for late redeliveries before SIGTERM.
    def drained() -> bool:
        return set(sent_for) <= {r.message_id for r in _records(log)} or not worker.running()

    wait_until(drained, timeout=WAIT_S, interval=0.2)
    assert worker.running(), f"the last worker exited by itself:\n{worker.text()[-4000:]}"
    lines = -1
    while lines != _line_count(log):
        lines = _line_count(log)
        time.sleep(2.0)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.text()[-4000:]
    # Artemis 2.44 alone, over STOMP, held 2 to 6 messages "in delivery" to no consumer after
    # the kills in 5 of 8 storms, until it restarted: its two cleanups of a lost connection race
    # (docs/interop.md). Its own broker runs the StompLossPlugin, as every Artemis of the project
    # does: none held in 14 storms since. Nothing may be held on any broker.
    stuck = _stuck_in_the_broker(client, stored_in(queue, TENANTS))
    assert stuck == 0, (
        f"{stuck} messages held in delivery by no consumer after the storm (an Artemis without "
        "the StompLossPlugin holds them until it restarts, docs/interop.md)"
    )

    records = _records(log)
    handled = Counter(r.message_id for r in records)
    # Nothing may be left behind, dead-lettered, quarantined, or in the broker's own DLQ.
    stored = stored_in(queue, TENANTS)
    left = read_queues(client, stored)
    dead = read_queues(client, [dead_letter_queue(q) for q in stored])
    quarantined = read_queues(client, [quarantine_queue(q) for q in stored])
    # The broker's own dead letters: Classic's ActiveMQ.DLQ, Artemis's per-address BROKER.DLQ.*;
    # RabbitMQ dead-letters nothing by itself without a policy that says where.
    broker_dlqs = {
        "artemis": [f"BROKER.DLQ.{q}" for q in stored],
        "classic": ["ActiveMQ.DLQ"],
    }.get(storm_broker.flavour, [])
    broker_dlq = read_queues(client, broker_dlqs, tenant=None, expect=0) if broker_dlqs else []
    run_s = time.monotonic() - began

    lost = sorted(set(sent_for) - set(handled) - set(message_ids(dead)))
    phantom = sorted(set(handled) - set(sent_for))
    leaked = [
        r
        for r in records
        if r.message_id in sent_for
        and not (r.tenant == r.property_tenant == r.body_tenant == sent_for[r.message_id])
    ]
    duplicates = {m: n for m, n in handled.items() if n > 1}
    extra = sum(handled.values()) - len(handled)
    # RabbitMQ writes consumers' acknowledgements to disk lazily: a kill -9 of its node brings
    # back messages it had already taken as acknowledged (measured with 3.10.8: up to 151 per
    # crash), so what that failure duplicates is no in-flight window: it is held to a ceiling
    # of its own, every other failure to what it had in flight.
    node_crash = "broker-kill" if storm_broker.flavour == "rabbitmq" else None
    by_failure = extra_by_failure(records, struck, prefer=node_crash)
    per_failure = ARTEMIS_IN_FLIGHT_BOUND if byte_window else IN_FLIGHT_BOUND
    restored = sum(n for i, n in by_failure.items() if i >= 0 and struck[i].what == node_crash)
    shown = {
        f"{struck[i].what}#{i + 1}" if i >= 0 else "none": n for i, n in sorted(by_failure.items())
    }
    per_tenant = Counter(sent_for.values())
    figures(
        f"kill storm: broker={storm_broker.flavour} protocol={protocol} seed={seed} "
        f"messages={TOTAL} "
        f"({', '.join(f'{t}={per_tenant[t]}' for t in TENANTS)}) kills={KILLS} "
        f"broker_restarts={BROKER_RESTARTS} ({', '.join(f for f in failures if f != 'kill')} "
        f"at positions {[i for i, f in enumerate(failures, 1) if f != 'kill']}) "
        f"workers_started={started} handlings={len(records)} lost={len(lost)} "
        f"leaked={len(leaked)} dead={len(dead)} duplicates={len(duplicates)} "
        f"extra_handlings={extra} bound={bound} "
        f"extra_by_failure={shown} "
        f"acknowledged_then_restored_by_the_node_crash={restored} "
        f"max_attempt={max((r.attempt for r in records), default=0)} "
        f"held_by_no_consumer={stuck} "
        f"send={send_s:.1f}s storm={storm_s:.1f}s run={run_s:.1f}s"
    )
    if duplicates:
        print(f"kill storm: handled more than once: {dict(sorted(duplicates.items()))}")

    assert lost == [], f"{len(lost)} sent messages never handled: {lost}"
    assert phantom == [], f"handled ids nobody sent: {phantom}"
    assert leaked == [], f"{len(leaked)} handlings outside the message's tenant: {leaked[:20]}"
    assert message_ids(dead) == [], "nothing fails, so nothing is dead-lettered"
    assert message_ids(quarantined) == [], "no delivery reached another tenant's subscription"
    assert broker_dlq == [], "the broker dead-lettered nothing by itself"
    assert message_ids(left) == [], "every message was acknowledged"
    assert by_failure[NO_FAILURE] == 0, "a message was handled again with no failure between"
    for index, count in by_failure.items():
        if index == NO_FAILURE:
            continue
        what = struck[index].what
        ceiling = _ceiling(what, node_crash=node_crash, in_flight=per_failure)
        assert count <= ceiling, (
            f"failure {index + 1} ({what}) brought {count} extra handlings, more "
            f"than the {ceiling} it can: {shown}"
        )
    assert extra - restored <= bound, (
        f"{extra - restored} extra handlings exceed what the {KILLS + BROKER_RESTARTS} failures "
        f"had in flight (at most {bound}): {duplicates}"
    )
