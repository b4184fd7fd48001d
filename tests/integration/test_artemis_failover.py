"""A live/backup Artemis pair on one shared store, run by the project's Artemis manager: the
live broker is killed (-9) while a producer and a runner of three tenants are busy; the backup
takes over the store and every confirmed message; both clients move to it by themselves through
their failover list. Then the old live broker comes back and the backup hands the store back
(fail-back, allow-failback): the clients move back, and still nothing confirmed is lost.

The pair is devtools.artemis_pair's, the one `scripts/artemis-pair` runs; docs/operations.md
shows its configuration ("A live/backup Artemis pair").
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boost_tenancy import ProcessorRunner, RunnerSettings
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.artemis_pair import ArtemisPair
from devtools.local_artemis import HOST, PASSWORD, USER
from tests.conftest import unavailable, unique_queue, wait_until
from tests.integration.test_broker_restart import (
    OUTAGE_AFTER,
    TENANTS,
    TOTAL,
    IdRecorder,
    SteadyProducer,
)

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("runs a live and a backup Artemis of its own and kills the live one"),
    pytest.mark.own_broker("artemis"),
]

LIVE_OFFSET, BACKUP_OFFSET = 1200, 1300
"""Ports 62913/62916/6972 and 63013/63016/7072: clear of every other broker of the suite."""


def _settings(pair: ArtemisPair) -> StompSettings:
    """Both brokers as the clients' failover list, as BOOST_BROKER_URL gives it."""
    return StompSettings(
        host=HOST,
        port=pair.live.settings.stomp_port,
        alternates=((HOST, pair.backup.settings.stomp_port),),
        username=USER,
        password=PASSWORD,
        confirm_timeout_s=10.0,
        reconnect_wait_s=120.0,
        reconnect_max_s=1.0,
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[ArtemisPair]:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        unavailable("Java and Maven are needed to run Artemis brokers of the test's own")
    brokers = ArtemisPair(tmp_path / "pair", LIVE_OFFSET, BACKUP_OFFSET)
    try:
        brokers.start()
        yield brokers
    finally:
        brokers.stop()


def _phase(
    settings: StompSettings,
    queue: str,
    processor: IdRecorder,
    outage: Callable[[], object],
    label: str,
) -> tuple[set[str], dict[str, float | int]]:
    """One producer of TOTAL messages while outage() strikes after OUTAGE_AFTER confirmed;
    returns the confirmed ids and the figures."""
    handled_before = len(processor.snapshot())
    producer = SteadyProducer(settings, queue)
    producer.start()
    assert wait_until(lambda: producer.confirmed() >= OUTAGE_AFTER, timeout=60), label
    backlog = producer.confirmed() - (len(processor.snapshot()) - handled_before)
    began = time.monotonic()
    outage()
    producer.join(240)
    assert not producer.is_alive(), f"{label}: only {producer.confirmed()} of {TOTAL} confirmed"
    assert producer.failure is None, f"{label}: the producer gave up: {producer.failure!r}"
    return set(producer.sent), {
        "backlog": backlog,
        "producer_done_s": round(time.monotonic() - began, 1),
        "resends": producer.resends,
    }


def test_kill_9_of_the_live_broker_then_fail_back_lose_nothing_confirmed(
    pair: ArtemisPair, tmp_path: Path, figures: Callable[[str], None]
) -> None:
    settings = _settings(pair)
    live = f"{HOST}:{pair.live.settings.stomp_port}"
    backup = f"{HOST}:{pair.backup.settings.stomp_port}"
    queue = unique_queue("artemis.failover")
    processor = IdRecorder(queue)
    runner_transport = StompTransport(settings)
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    runner = ProcessorRunner(
        processor,
        runner_transport,
        TENANTS,
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10, shutdown_grace_s=5),
    )
    runner.start()
    try:
        assert runner_transport._connection.where == live
        assert not pair.backup.is_ready(), "the backup must wait for the shared store"

        # 1. kill -9 of the live broker: the backup takes the store over.
        first, failover = _phase(settings, queue, processor, pair.live.kill, "failover")
        assert pair.backup.is_running(), f"the backup is gone:\n{pair.backup.log_tail()}"
        assert wait_until(lambda: runner_transport.is_connected, timeout=60)
        assert runner_transport._connection.where == backup
        assert wait_until(lambda: first <= set(processor.snapshot()), timeout=120), (
            f"{len(first - set(processor.snapshot()))} confirmed messages never handled"
        )

        # 2. The old live broker comes back: the backup hands the store back (fail-back).
        second, failback = _phase(
            settings,
            queue,
            processor,
            lambda: threading.Thread(target=pair.live.start, daemon=True).start(),
            "fail-back",
        )
        assert wait_until(pair.live.is_ready, timeout=120), pair.live.log_tail()
        assert wait_until(
            lambda: runner_transport.is_connected and runner_transport._connection.where == live,
            timeout=120,
        ), "the runner did not follow the fail-back"
        expected = first | second
        assert len(expected) == 2 * TOTAL
        assert wait_until(lambda: expected <= set(processor.snapshot()), timeout=120), (
            f"{len(expected - set(processor.snapshot()))} confirmed messages never handled"
        )
    finally:
        runner.stop(grace_s=5)
        store.close()
    handled: Counter[str] = processor.snapshot()
    assert set(handled) == expected, "every handled id is one the producer confirmed"
    assert processor.wrong_tenant == []
    extra = sum(n - 1 for n in handled.values())
    figures(
        f"artemis live/backup: failover {failover}, fail-back {failback}; "
        f"{2 * TOTAL} confirmed, 0 lost, {extra} extra handlings, 0 leaked"
    )
