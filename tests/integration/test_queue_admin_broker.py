"""Per-tenant queue administration on the real ActiveMQ Classic: `boost-tenancy queues list`
shows the tenant's queues with the statistics plugin's counts and consumers, `queues drain`
makes a running runner end that one subscription once its handler settled (the other tenant's
keeps consuming, a message sent meanwhile stays on the queue), and `queues delete` purges it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.queue_states import QueueState, QueueStateWatcher, open_queue_state_store
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.broker_target import stomp_env
from tests.conftest import unique_queue, wait_until

pytestmark = [
    pytest.mark.broker,
]

CLI = Path(sys.executable).parent / "boost-tenancy"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Held(TenantProcessor):
    """Records the n of what it handled; n == "hold" waits until release is set."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.handled: list[tuple[str, object]] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        n = message.data.get("n") if isinstance(message.data, dict) else None
        if n == "hold":
            self.holding.set()
            assert self.release.wait(30)
        with self._lock:
            self.handled.append((message.tenant.value, n))

    def seen(self, tenant: TenantId) -> list[object]:
        with self._lock:
            return [n for t, n in self.handled if t == tenant.value]


@pytest.fixture
def transport(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    transport = StompTransport(stomp_settings)
    transport.connect()
    yield transport
    transport.close()


def cli(stomp_settings: StompSettings, store_url: str, *args: str) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("BOOST_")}
    env.update(stomp_env(stomp_settings))
    env["BOOST_POLICY_STORE"] = store_url
    env["BOOST_ACTOR"] = "ops-test"
    done = subprocess.run(
        [str(CLI), "queues", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_list_drain_with_a_running_runner_then_delete_and_purge(
    stomp_settings: StompSettings, transport: StompTransport, tmp_path: Path
) -> None:
    tenant = TenantId(f"qadmin-{uuid.uuid4().hex[:10]}")
    other = TenantId(f"qadmin-{uuid.uuid4().hex[:10]}")
    queue = unique_queue("cmd.qadmin")
    broker_queue = f"tenant.{tenant.value}.{queue}"
    store_url = f"sqlite:///{tmp_path / 'policy.sqlite3'}"
    states = open_queue_state_store(store_url)
    producer = TenantProducer(transport)
    processor = Held(queue)
    runner = ProcessorRunner(
        processor,
        StompTransport(stomp_settings),
        [tenant, other],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
        settings=RunnerSettings(workers=2, prefetch=5),
        queue_states=QueueStateWatcher(states, poll_s=0.2),
    )
    runner.start()
    try:
        producer.send(queue, tenant, {"n": "hold"})
        assert processor.holding.wait(15)
        transport.send(f"DLQ.{broker_queue}", WireMessage(body="dead", properties={}))

        code, out, err = cli(stomp_settings, store_url, "list", "--tenant", tenant.value, "--json")
        assert code == 0, err
        (row,) = [json.loads(line) for line in out.splitlines()]
        assert (row["queue"], row["broker_queue"], row["state"]) == (queue, broker_queue, "active")
        assert (row["consumers"], row["in_flight"], row["dead_lettered"]) == (1, 1, 1)

        # The drain waits for the held handler; it is released once the drain is picked up.
        threading.Timer(1.5, processor.release.set).start()
        code, out, err = cli(
            stomp_settings,
            store_url,
            "drain",
            "--tenant",
            tenant.value,
            "--queue",
            queue,
            "--timeout",
            "30",
        )
        assert code == 0, err + out
        drained = json.loads(out)
        assert drained["drained"] is True
        assert (drained["consumers"], drained["in_flight"]) == (0, 0)
        assert drained["changed"]["actor"] == "ops-test"
        assert processor.seen(tenant) == ["hold"]

        for n in range(5):
            producer.send(queue, tenant, {"n": n})
        producer.send(queue, other, {"n": "other"})
        assert wait_until(lambda: processor.seen(other) == ["other"], timeout=15)
        assert processor.seen(tenant) == ["hold"]
        code, out, err = cli(stomp_settings, store_url, "list", "--tenant", tenant.value, "--json")
        (row,) = [json.loads(line) for line in out.splitlines()]
        assert (row["depth"], row["consumers"], row["state"]) == (5, 0, "draining")

        code, out, err = cli(
            stomp_settings, store_url, "delete", "--tenant", tenant.value, "--queue", queue
        )
        assert code == 0, err + out
        deleted = json.loads(out)
        assert (deleted["removed"], deleted["dead_letters_kept"]) == (5, 1)
        assert states.state(tenant, queue) is QueueState.DELETED
        stats = transport.queue_stats([broker_queue])[broker_queue]
        assert stats is not None and stats.stored == 0
        assert processor.seen(tenant) == ["hold"]
    finally:
        processor.release.set()
        runner.stop(grace_s=10)
        states.close()


def test_delete_refuses_a_queue_a_runner_still_consumes(
    stomp_settings: StompSettings, transport: StompTransport, tmp_path: Path
) -> None:
    tenant = TenantId(f"qadmin-{uuid.uuid4().hex[:10]}")
    queue = unique_queue("cmd.qadmin")
    store_url = f"sqlite:///{tmp_path / 'policy.sqlite3'}"
    TenantProducer(transport).send(queue, tenant, {"n": 1})
    code, _, err = cli(
        stomp_settings, store_url, "delete", "--tenant", tenant.value, "--queue", queue
    )
    assert code == 2
    assert "active" in err and "drain" in err
    # Recorded draining, but a consumer is still on the queue: refused, nothing purged.
    states = open_queue_state_store(store_url)
    states.set(tenant, queue, QueueState.DRAINING, actor="ops-test")
    states.close()
    consumer = StompTransport(stomp_settings)
    consumer.connect()
    consumer.subscribe(
        f"tenant.{tenant.value}.{queue}", selector=None, prefetch=1, on_delivery=lambda d: None
    )
    try:
        code, _, err = cli(
            stomp_settings, store_url, "delete", "--tenant", tenant.value, "--queue", queue
        )
    finally:
        consumer.close()
    assert code == 2
    assert "not drained yet" in err and "1 consumer" in err
    # The consumer's unacknowledged delivery goes back to the queue as its connection ends.
    held = f"tenant.{tenant.value}.{queue}"
    assert wait_until(
        lambda: (s := transport.queue_stats([held])[held]) is not None and s.stored == 1
    )
