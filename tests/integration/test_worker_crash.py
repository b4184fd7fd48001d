"""A worker process killed mid-handle (SIGKILL) loses nothing: restarted, it gets the message again.

The worker is the real command (`boost-tenancy run ... --tenant org-A`) in its own process, so the
kill is what a crash or an OOM kill does: no shutdown code runs, the broker only sees the
connection drop and puts every unacknowledged delivery back.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import TenantProducer
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until
from tests.integration.crash_processors import (
    BLOCK_ENV,
    LOG_ENV,
    MARKER_ENV,
    QUEUE_ENV,
    output_queue,
)
from tests.integration.worker_support import WorkerPool, message_ids, read_queue, worker_pool

pytestmark = [pytest.mark.broker, pytest.mark.slow]

PROCESSOR = "tests.integration.crash_processors:SlowProcessor"
A_COUNT = 5
B_COUNT = 3


@pytest.fixture
def workers(tmp_path: Path, stomp_settings: StompSettings) -> Iterator[WorkerPool]:
    yield from worker_pool(tmp_path, stomp_settings)


def _log_lines(path: Path) -> list[tuple[str, int, bool]]:
    """(message id, attempt, redelivered) per handled message, in the order handled."""
    if not path.exists():
        return []
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        message_id, attempt, redelivered = line.split(" ")
        lines.append((message_id, int(attempt), redelivered == "True"))
    return lines


def test_worker_killed_mid_handle_is_redelivered_after_restart_and_nothing_is_lost(
    stomp_settings: StompSettings, tmp_path: Path, workers: WorkerPool
) -> None:
    queue = unique_queue("crash")
    handled_log = tmp_path / "handled.log"
    marker = tmp_path / "in-flight"
    sender = StompTransport(stomp_settings)
    sender.connect()
    try:
        producer = TenantProducer(sender)
        a_ids = [producer.send(queue, "org-A", {"n": n}).message_id for n in range(A_COUNT)]
        b_ids = [producer.send(queue, "org-B", {"n": n}).message_id for n in range(B_COUNT)]
    finally:
        sender.close()
    env = {
        QUEUE_ENV: queue,
        LOG_ENV: str(handled_log),
        MARKER_ENV: str(marker),
        # One worker: exactly one handler is mid-flight when the kill comes; the other messages
        # sit prefetched in the process and die with it, unacknowledged.
        "BOOST_WORKERS": "1",
        "BOOST_PREFETCH": "10",
    }

    first = workers.start(PROCESSOR, ["org-A"], {**env, BLOCK_ENV: "1"})
    wait_until(lambda: marker.exists() or not first.running(), timeout=30)
    assert marker.exists(), f"no handler started:\n{first.text()}"
    killed_id = marker.read_text(encoding="utf-8")
    assert _log_lines(handled_log) == [(killed_id, 1, False)]
    first.signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL

    second = workers.start(PROCESSOR, ["org-A"], {**env, BLOCK_ENV: "0"})
    assert wait_until(lambda: len(_log_lines(handled_log)) >= A_COUNT + 1, timeout=30), (
        f"handled: {_log_lines(handled_log)}\n{second.text()}"
    )
    # Time for a duplicate to show up before the worker is stopped.
    assert not wait_until(lambda: len(_log_lines(handled_log)) > A_COUNT + 1, timeout=1.5)
    second.signal(signal.SIGTERM)
    assert second.wait(15) == 0, second.text()

    handled = _log_lines(handled_log)
    counts = Counter(message_id for message_id, _, _ in handled)
    assert set(counts) == set(a_ids), "only org-A's messages, every one of them"
    assert counts[killed_id] == 2
    assert all(counts[m] == 1 for m in a_ids if m != killed_id)
    again = [entry for entry in handled[1:] if entry[0] == killed_id]
    # Redelivered by the broker, not retried by the toolkit: the attempt count stays 1.
    assert again == [(killed_id, 1, True)]

    # The restarted worker's results: one per org-A message, none from the killed handler.
    # The default routing: each tenant's messages, and outputs, are in its own queues.
    a_queue, b_queue = (DEFAULT_ROUTING.physical(queue, t) for t in ("org-A", "org-B"))
    a_out = DEFAULT_ROUTING.physical(output_queue(queue), "org-A")
    outputs = read_queue(stomp_settings, a_out, tenant=None, expect=A_COUNT)
    assert sorted(d.properties["tenantUUID"] for d in outputs) == ["org-A"] * A_COUNT
    assert sorted(json.loads(str(d.body))["source"] for d in outputs) == sorted(a_ids)
    assert {json.loads(str(d.body))["tenantUUID"] for d in outputs} == {"org-A"}
    # Every org-A message was acknowledged: nothing of org-A is left on the queue.
    assert read_queue(stomp_settings, a_queue, tenant="org-A", expect=0) == []
    # org-B's messages were never dispatched to the org-A worker: still there, first delivery.
    b_left = read_queue(stomp_settings, b_queue, tenant="org-B", expect=B_COUNT)
    assert sorted(message_ids(b_left)) == sorted(b_ids)
    assert [d.redelivered for d in b_left] == [False] * B_COUNT
