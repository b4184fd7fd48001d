"""Poison messages on the real broker: each kind settles, and never stalls its tenant or another.

For every poison kind, 10 poison messages of org-A are queued ahead of good messages of org-A
and org-B: every good message must be handled, every poison message must end settled (handled,
dead-lettered or quarantined, as its kind calls for), and nothing may be left on the source
queue. The poison is sent as raw STOMP frames, the way a foreign producer (or a bug) sends it.
The hostile generator of the in-memory property suite then drives a bounded run here too, and a
worker process given every kind at once stops on SIGTERM within its grace period.

The queues are routed (the default): the poison goes through the router to the tenant's own
queue first, and is settled there (or, when the router cannot copy it, by the router itself); the
hostile generator runs on a shared queue too.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from boost_tenancy import DispatchSettings, ProcessorRunner, RetryPolicy, Routing, RunnerSettings
from boost_tenancy.ops.dead_letters import DeadLetterAdmin
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Topology
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.broker_target import raw_connect_frame
from tests.conftest import unique_queue, wait_until
from tests.hostile import (
    BEHAVIOUR,
    KEY,
    TENANTS,
    Ends,
    HostileMessage,
    HostileProcessor,
    expected_end,
    hostile_batches,
    output_queue,
)
from tests.integration.worker_support import (
    WorkerPool,
    read_queue,
    read_queues,
    stored_in,
    worker_pool,
)

pytestmark = [pytest.mark.broker]

IMMEDIATE = RetryPolicy(max_attempts=3, base_delay_ms=0, max_delay_ms=0, jitter=0.0)


def sources(queue: str, routing: Routing = DEFAULT_ROUTING) -> list[str]:
    """Where the tenants' messages of queue can be: the shared queue and, when routed, each
    tenant's own; their dead letters and quarantines are DLQ.<each>[.quarantine]."""
    return stored_in(queue, TENANTS) if routing.routes(queue) else [queue]


def outputs(queue: str, routing: Routing = DEFAULT_ROUTING) -> list[str]:
    """The output queues of every tenant (ctx.publish follows the routing)."""
    return sorted({routing.physical(output_queue(queue), t) for t in TENANTS})


def dead_letters(queue: str, routing: Routing = DEFAULT_ROUTING) -> list[str]:
    return [dead_letter_queue(q) for q in sources(queue, routing)]


def quarantines(queue: str, routing: Routing = DEFAULT_ROUTING) -> list[str]:
    return [quarantine_queue(q) for q in sources(queue, routing)]


# -- raw STOMP: what a foreign producer can put on the wire ----------------------------------------
def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")


def raw_frame(
    queue: str, headers: Mapping[str, str], body: bytes, *, content_length: bool
) -> bytes:
    """A SEND frame as written by hand; without content-length the body is a JMS TextMessage."""
    head = {"destination": f"/queue/{queue}", "persistent": "true", **headers}
    if content_length:
        head["content-length"] = str(len(body))
    lines = "".join(f"{_escape(k)}:{_escape(v)}\n" for k, v in head.items())
    return f"SEND\n{lines}\n".encode() + body + b"\x00"


def raw_send(settings: StompSettings, frames: Sequence[bytes]) -> None:
    """Send frames on a plain socket and wait for a receipt after the last one."""
    with socket.create_connection((settings.host, settings.port), timeout=15) as sock:
        sock.sendall(raw_connect_frame(settings))
        _read_until(sock, b"CONNECTED")
        # The receipt on the last SEND: on Artemis a DISCONNECT's receipt confirms no SEND
        # before it (tests/raw_stomp.py).
        last = frames[-1].replace(b"SEND\n", b"SEND\nreceipt:done\n", 1)
        sock.sendall(b"".join([*frames[:-1], last]))
        _read_until(sock, b"RECEIPT")
        sock.sendall(b"DISCONNECT\n\n\x00")


def _read_until(sock: socket.socket, word: bytes) -> None:
    data = b""
    while word not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"broker closed the connection before {word!r}: {data!r}")
        data += chunk
        if b"ERROR" in data:
            raise AssertionError(f"broker answered with an ERROR frame: {data!r}")


# -- the poison kinds ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Poison:
    """One kind of poison: how it goes on the wire and where it must end."""

    body: bytes
    behaviour: str = "ok"
    headers: tuple[tuple[str, str], ...] = ()
    content_length: bool = False
    ends_in: str = "dlq"

    def frame(self, queue: str, key: str) -> bytes:
        """This poison as one SEND of org-A to queue, carrying key."""
        headers = {"tenantUUID": "org-A", KEY: key, BEHAVIOUR: self.behaviour, **dict(self.headers)}
        return raw_frame(queue, headers, self.body, content_length=self.content_length)


POISONS = {
    "nested-200k-brackets": Poison(body=b"[" * 200_000),
    "integer-of-5000-digits": Poison(body=b"1" * 5_000),
    "lone-surrogate-republished": Poison(
        body=b'{"tenantUUID": "org-A", "x": "\\ud83d"}', behaviour="echo", ends_in="out"
    ),
    # Text that is not valid UTF-8, sent as the toolkit sends such text (content-length,
    # marked text): byte-exact on both brokers, so it is undecodable on both.
    "invalid-utf8-text": Poison(
        body=b'{"x": "caf\xe9 \xff"}', headers=(("boostBodyType", "text"),), content_length=True
    ),
    "invalid-utf8-bytes": Poison(body=b"\xff\xfe\x00\x01", content_length=True),
    "attempt-overflow": Poison(
        body=b'{"n": 1}',
        behaviour="raise",
        headers=(("boostAttempt", "99999999999999999999999"),),
    ),
    "system-exit": Poison(body=b'{"n": 1}', behaviour="system_exit"),
    "keyboard-interrupt": Poison(body=b'{"n": 1}', behaviour="keyboard_interrupt"),
    "nul-in-error": Poison(body=b'{"n": 1}', behaviour="nul_error"),
    "foreign-correlation-id": Poison(
        body=b'{"n": 1}', headers=(("correlation-id", "a b/c=d"),), ends_in="out"
    ),
    "forged-original-queue": Poison(
        body=b'{"n": 1}',
        behaviour="permanent",
        headers=(("boostOriginalQueue", "parked.org-B.elsewhere"),),
    ),
    "returns-awaitable": Poison(body=b'{"n": 1}', behaviour="return_awaitable"),
}


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "errors.sqlite3"


def _runner(
    settings: StompSettings,
    queue: str,
    store: SQLiteErrorStore,
    routing: Routing = DEFAULT_ROUTING,
) -> ProcessorRunner:
    return ProcessorRunner(
        HostileProcessor(queue),
        StompTransport(settings),
        TENANTS,
        error_store=store,
        settings=RunnerSettings(workers=4, prefetch=10, dispatch=DispatchSettings(retry=IMMEDIATE)),
        redrive_parked=False,
        routing=routing,
    )


def _good(queue: str, tenant: str, n: int) -> bytes:
    body = json.dumps({"tenantUUID": tenant, "n": n}).encode()
    return raw_frame(
        queue, {"tenantUUID": tenant, KEY: f"good-{tenant}-{n}"}, body, content_length=False
    )


@pytest.mark.parametrize("kind", sorted(POISONS))
def test_poison_of_one_tenant_settles_and_stalls_no_tenant(
    kind: str, stomp_settings: StompSettings, store_path: Path
) -> None:
    poison = POISONS[kind]
    queue = unique_queue("poison")
    frames = [poison.frame(queue, f"poison-{i}") for i in range(10)]
    frames += [_good(queue, tenant, n) for tenant in TENANTS for n in range(5)]
    raw_send(stomp_settings, frames)
    store = SQLiteErrorStore(store_path)
    runner = _runner(stomp_settings, queue, store)
    runner.start()
    try:
        expected_out = 10 + (10 if poison.ends_in == "out" else 0)
        handled = read_queues(stomp_settings, outputs(queue), expect=expected_out, timeout_s=60)
    finally:
        assert runner.stop(grace_s=15), "a handler was still running at the deadline"
        store.close()
    keys = sorted(d.properties[KEY] for d in handled)
    good = sorted(f"good-{tenant}-{n}" for tenant in TENANTS for n in range(5))
    assert [k for k in keys if k.startswith("good-")] == good, "every good message is handled once"
    dead = read_queues(
        stomp_settings, dead_letters(queue), expect=10 if poison.ends_in == "dlq" else 0
    )
    if poison.ends_in == "dlq":
        assert sorted(d.properties.get(KEY, "") for d in dead) == sorted(
            f"poison-{i}" for i in range(10)
        )
        assert all("\x00" not in d.properties.get("boostError", "x\x00") for d in dead)
        # Dead-lettered on org-A's own queue, or by the router when it could not copy it.
        own = DEFAULT_ROUTING.physical(queue, "org-A")
        assert {d.properties["boostOriginalQueue"] for d in dead} <= {own, queue}
    else:
        assert dead == []
        assert sorted(k for k in keys if k.startswith("poison-")) == sorted(
            f"poison-{i}" for i in range(10)
        )
    assert read_queues(stomp_settings, sources(queue), quiet_s=1.5) == [], (
        "nothing is left on the source queues"
    )


def test_dead_letters_with_nul_errors_and_forged_queues_list_and_redrive_to_their_source(
    stomp_settings: StompSettings, store_path: Path
) -> None:
    queue = unique_queue("poison")
    frames = [
        raw_frame(
            queue,
            {
                "tenantUUID": "org-A",
                KEY: f"p-{i}",
                BEHAVIOUR: "nul_error" if i % 2 else "permanent",
                "boostOriginalQueue": f"parked.org-B.{queue}",
            },
            b'{"n": 1}',
            content_length=False,
        )
        for i in range(6)
    ]
    raw_send(stomp_settings, frames)
    store = SQLiteErrorStore(store_path)
    runner = _runner(stomp_settings, queue, store)
    runner.start()
    transport = StompTransport(stomp_settings)
    try:
        transport.connect()
        admin = DeadLetterAdmin(transport, store)
        own = DEFAULT_ROUTING.physical(queue, "org-A")
        assert wait_until(lambda: admin.count("org-A", queue, idle_s=0.5) == 6, timeout=60)
        assert runner.stop(grace_s=15)
        views = admin.list("org-A", queue, idle_s=1.0)
        assert len(views) == 6
        # The forged boostOriginalQueue crossed the router unchanged and was not trusted.
        assert all(v.original_queue == own and "\x00" not in v.error for v in views)
        assert all(v.failures and v.failures[-1].trace for v in views), "failures keep a trace"
        redriven = admin.redrive("org-A", queue, idle_s=1.0)
        assert len(redriven) == 6
        assert admin.count("org-A", queue, idle_s=0.5) == 0
    finally:
        transport.close()
        store.close()
    back = read_queue(stomp_settings, own, tenant="org-A", expect=6)
    assert sorted(d.properties[KEY] for d in back) == sorted(f"p-{i}" for i in range(6))
    assert all("boostOriginalQueue" not in d.properties for d in back)
    assert (
        read_queue(stomp_settings, f"parked.org-B.{queue}", tenant=None, expect=0, quiet_s=0.5)
        == []
    )


# -- the hostile generator, bounded, on the real broker -------------------------------------------
@given(messages=hostile_batches(max_size=6))
@settings(
    max_examples=4,
    deadline=None,
    database=None,
    # No shrinking against a real broker: each try waits for queues, and a failure must end the
    # run in seconds with its example printed, not search for a smaller one for an hour.
    phases=[Phase.generate],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@pytest.mark.parametrize("topology", [Topology.ROUTED, Topology.SHARED])
def test_hostile_generator_on_the_real_broker_settles_every_delivery(
    messages: list[HostileMessage],
    stomp_settings: StompSettings,
    tmp_path: Path,
    topology: Topology,
) -> None:
    routing = Routing(topology)
    queue = unique_queue("hostile")
    sender = StompTransport(stomp_settings)
    sender.connect()
    try:
        for message in messages:
            sender.send(queue, message.message)
    finally:
        sender.close()
    store = SQLiteErrorStore(tmp_path / f"{queue}.sqlite3")
    runner = _runner(stomp_settings, queue, store, routing)
    runner.start()
    ends = [expected_end(m) for m in messages]
    try:
        read = {
            place: read_queues(stomp_settings, names, expect=ends.count(place), timeout_s=30)
            for place, names in (
                ("out", outputs(queue, routing)),
                ("dlq", dead_letters(queue, routing)),
                ("quarantine", quarantines(queue, routing)),
            )
        }
    finally:
        assert runner.stop(grace_s=15)
        store.close()
    found = Ends()
    for place, deliveries in read.items():
        found.add(place, (d.properties for d in deliveries))
    problems = found.check(messages, exactly_once=True)
    assert not problems, "\n".join(problems)
    assert read_queues(stomp_settings, sources(queue, routing)) == []


# -- a worker process given every poison kind stops on SIGTERM within its grace period -------------
@pytest.fixture
def workers(tmp_path: Path, stomp_settings: StompSettings) -> Iterator[WorkerPool]:
    yield from worker_pool(tmp_path, stomp_settings)


@pytest.mark.slow
def test_worker_given_every_poison_kind_handles_the_good_and_stops_on_sigterm_in_grace(
    workers: WorkerPool, stomp_settings: StompSettings
) -> None:
    queue = unique_queue("poison")
    frames = [
        p.frame(queue, f"{kind}-{i}") for kind, p in sorted(POISONS.items()) for i in range(10)
    ]
    frames += [_good(queue, tenant, n) for tenant in TENANTS for n in range(20)]
    raw_send(stomp_settings, frames)
    grace_s = 5.0
    worker = workers.start(
        "tests.integration.poison_processors:PoisonProcessor",
        list(TENANTS),
        {
            "POISON_QUEUE": queue,
            "BOOST_MAX_ATTEMPTS": "3",
            "BOOST_RETRY_BASE_MS": "0",
            "BOOST_RETRY_MAX_MS": "0",
            "BOOST_SHUTDOWN_GRACE_S": str(grace_s),
        },
    )
    poison_out = sum(10 for p in POISONS.values() if p.ends_in == "out")
    handled = read_queues(stomp_settings, outputs(queue), expect=40 + poison_out, timeout_s=90)
    good = {d.properties[KEY] for d in handled if d.properties[KEY].startswith("good-")}
    assert len(good) == 40, worker.text()[-3000:]
    dead = read_queues(
        stomp_settings, dead_letters(queue), expect=10 * len(POISONS) - poison_out, timeout_s=90
    )
    assert len(dead) == 10 * len(POISONS) - poison_out, worker.text()[-3000:]
    worker.signal(signal.SIGTERM)
    started = time.monotonic()
    code = worker.wait(grace_s + 10)
    assert code == 0, (
        f"exit {code} after {time.monotonic() - started:.1f}s\n{worker.text()[-3000:]}"
    )
    assert all(e.get("event") != "worker_died_replaced" for e in worker.events())
    assert read_queues(stomp_settings, sources(queue)) == []
