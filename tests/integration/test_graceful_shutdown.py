"""SIGTERM stops a worker gracefully: no new messages, in-flight ones finished within the deadline,
the rest left unacknowledged for redelivery; exit code 0, or 3 when the deadline abandoned a
handler.

The worker is the real command (`boost-tenancy run ... --tenant org-A`) in its own process, so
the signal goes through the runner's own signal handling.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import TenantProducer
from boost_tenancy.processing.runner import EXIT_HANDLERS_ABANDONED
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until
from tests.integration.crash_processors import LOG_ENV, MARKER_ENV, QUEUE_ENV, SLEEP_ENV
from tests.integration.worker_support import (
    Worker,
    WorkerPool,
    message_ids,
    read_queue,
    worker_pool,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]

PROCESSOR = "tests.integration.crash_processors:SleepyProcessor"
COUNT = 5


@pytest.fixture
def workers(tmp_path: Path, stomp_settings: StompSettings) -> Iterator[WorkerPool]:
    yield from worker_pool(tmp_path, stomp_settings)


def _publish(settings: StompSettings, queue: str, tenant: str, count: int) -> list[str]:
    transport = StompTransport(settings)
    transport.connect()
    try:
        producer = TenantProducer(transport)
        return [producer.send(queue, tenant, {"n": n}).message_id for n in range(count)]
    finally:
        transport.close()


def own_queue(queue: str) -> str:
    """Where org-A's messages wait under the default routing: its own queue."""
    return DEFAULT_ROUTING.physical(queue, "org-A")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _start_and_wait_for_first_handler(
    workers: WorkerPool, tmp_path: Path, queue: str, *, sleep_s: float, grace_s: float
) -> tuple[Worker, str]:
    """Start a one-worker process with prefetch 5; return it once a handler is mid-flight."""
    marker = tmp_path / "in-flight"
    worker = workers.start(
        PROCESSOR,
        ["org-A"],
        {
            QUEUE_ENV: queue,
            LOG_ENV: str(tmp_path / "handled.log"),
            MARKER_ENV: str(marker),
            SLEEP_ENV: str(sleep_s),
            "BOOST_WORKERS": "1",
            "BOOST_PREFETCH": str(COUNT),
            "BOOST_SHUTDOWN_GRACE_S": str(grace_s),
        },
    )
    wait_until(lambda: marker.exists() or not worker.running(), timeout=30)
    assert marker.exists(), f"no handler started:\n{worker.text()}"
    return worker, marker.read_text(encoding="utf-8")


def _stopped_event(worker: Worker) -> dict[str, object]:
    stopped = [e for e in worker.events() if e.get("event") == "runner_stopped"]
    assert len(stopped) == 1, worker.text()
    return stopped[0]


def test_sigterm_finishes_the_in_flight_message_and_leaves_the_rest_on_the_queue(
    stomp_settings: StompSettings, tmp_path: Path, workers: WorkerPool
) -> None:
    queue = unique_queue("shutdown")
    sent = _publish(stomp_settings, queue, "org-A", COUNT)
    worker, in_flight = _start_and_wait_for_first_handler(
        workers, tmp_path, queue, sleep_s=2.0, grace_s=10.0
    )
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(15)
    took = time.monotonic() - signalled

    assert code == 0, worker.text()
    # It waited for the 2 s handler, not for the whole 10 s grace, and took nothing new.
    assert took < 8.0, f"exit took {took:.1f}s"
    assert _lines(tmp_path / "handled.log") == [f"start {in_flight} False", f"done {in_flight}"]
    assert _stopped_event(worker)["clean"] is True

    # The finished message was acknowledged; exactly the four untouched ones come back.
    rest = read_queue(stomp_settings, own_queue(queue), tenant="org-A", expect=COUNT - 1)
    assert sorted(message_ids(rest)) == sorted(m for m in sent if m != in_flight)


def test_sigterm_with_a_handler_past_the_deadline_exits_3_and_the_message_comes_back(
    stomp_settings: StompSettings, tmp_path: Path, workers: WorkerPool
) -> None:
    queue = unique_queue("shutdown")
    sent = _publish(stomp_settings, queue, "org-A", COUNT)
    worker, in_flight = _start_and_wait_for_first_handler(
        workers, tmp_path, queue, sleep_s=30.0, grace_s=1.0
    )
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(15)
    took = time.monotonic() - signalled

    assert code == EXIT_HANDLERS_ABANDONED == 3, worker.text()
    # The 1 s grace passed, the 30 s handler was abandoned rather than waited for.
    assert 1.0 <= took < 10.0, f"exit took {took:.1f}s"
    assert _lines(tmp_path / "handled.log") == [f"start {in_flight} False"]
    assert _stopped_event(worker)["clean"] is False

    # Nothing was acknowledged: all five come back, the abandoned one marked redelivered.
    back = read_queue(stomp_settings, own_queue(queue), tenant="org-A", expect=COUNT)
    assert sorted(message_ids(back)) == sorted(sent)
    abandoned = [d for d in back if d.properties["boostMessageId"] == in_flight]
    assert [d.redelivered for d in abandoned] == [True]
