"""Failover to a backup broker: two ActiveMQ Classic brokers of the test's own share one message
store (Classic's shared-store master/slave, as Artemis pairs a live and a backup), so the backup
waits until the live one stops and then serves every message it had confirmed. A producer and a
ProcessorRunner configured with both addresses (BOOST_BROKER_URL=stomp://live,backup) work on
the live broker; it is stopped mid-stream; both move on to the backup by themselves, and every
message whose send was confirmed is handled.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boost_tenancy import ProcessorRunner, RunnerSettings
from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.stomp import StompTransport
from devtools.local_broker import LocalBroker, LocalBrokerSettings
from tests.conftest import require_activemq, unique_queue, wait_until
from tests.integration.test_broker_restart import (
    OUTAGE_AFTER,
    TENANTS,
    TOTAL,
    IdRecorder,
    SteadyProducer,
)
from tests.integration.test_local_broker import _free_port_pair

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("starts a live and a backup Classic broker and stops the live one"),
]


def _other_free_ports(taken: tuple[int, int]) -> tuple[int, int]:
    """Two free loopback ports other than taken (not bound yet by the live broker either)."""
    sockets = [socket.socket() for _ in range(4)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in sockets if s.getsockname()[1] not in taken]
        return ports[0], ports[1]
    finally:
        for sock in sockets:
            sock.close()


class Pair:
    """A live broker and its backup on one shared store; the backup starts on a thread of its
    own, since it becomes ready only once it holds the store."""

    def __init__(self, home: Path) -> None:
        live_ports = _free_port_pair()
        backup_ports = _other_free_ports(live_ports)
        self.live = LocalBroker(self._settings(home / "live", live_ports))
        self.backup = LocalBroker(self._settings(home / "backup", backup_ports))
        # Shared store: the backup's data directory is the live broker's.
        self.live.data_dir.mkdir(parents=True)
        self.backup.home.mkdir(parents=True)
        self.backup.data_dir.symlink_to(self.live.data_dir, target_is_directory=True)
        self.backup_error: BaseException | None = None
        self._backup_thread = threading.Thread(target=self._start_backup, daemon=True)

    @staticmethod
    def _settings(home: Path, ports: tuple[int, int]) -> LocalBrokerSettings:
        return LocalBrokerSettings(
            home=home, stomp_port=ports[0], openwire_port=ports[1], start_timeout_s=180
        )

    def _start_backup(self) -> None:
        try:
            self.backup.start()
        except BaseException as exc:
            self.backup_error = exc

    def start(self) -> None:
        self.live.start()
        self._backup_thread.start()

    @property
    def url(self) -> str:
        return (
            f"stomp://127.0.0.1:{self.live.settings.stomp_port},"
            f"127.0.0.1:{self.backup.settings.stomp_port}"
        )

    def stop(self) -> None:
        self.live.stop(timeout_s=30)
        self._backup_thread.join(60)
        self.backup.stop(timeout_s=30)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    require_activemq()
    brokers = Pair(tmp_path / "pair")
    try:
        brokers.start()
        yield brokers
    finally:
        brokers.stop()


def test_producer_and_runner_move_to_the_backup_and_lose_nothing_confirmed(
    pair: Pair, tmp_path: Path, figures: Callable[[str], None]
) -> None:
    # Configured the way an entry point is: the failover list in BOOST_BROKER_URL.
    settings = stomp_settings_from_env(
        {
            "BOOST_BROKER_URL": pair.url,
            "BOOST_BROKER_CONFIRM_TIMEOUT_S": "10",
            "BOOST_BROKER_RECONNECT_WAIT_S": "120",
            "BOOST_BROKER_RECONNECT_MAX_S": "1",
        }
    )
    live = f"127.0.0.1:{pair.live.settings.stomp_port}"
    backup = f"127.0.0.1:{pair.backup.settings.stomp_port}"
    queue = unique_queue("failover")
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
    producer = SteadyProducer(settings, queue)
    runner.start()
    try:
        assert runner_transport._connection.where == live
        producer.start()
        assert wait_until(lambda: producer.confirmed() >= OUTAGE_AFTER, timeout=30)
        backlog = producer.confirmed() - len(processor.snapshot())
        assert pair.backup.is_ready() is False, "the backup must wait for the shared store"
        began = time.monotonic()
        pair.live.stop(timeout_s=30)

        producer.join(150)
        assert not producer.is_alive(), f"only {producer.confirmed()} of {TOTAL} confirmed"
        assert producer.failure is None, f"the producer gave up: {producer.failure!r}"
        failover_s = time.monotonic() - began
        assert pair.backup_error is None, f"the backup did not start: {pair.backup_error!r}"
        assert wait_until(lambda: runner_transport.is_connected, timeout=60)
        assert runner_transport._connection.where == backup

        expected = set(producer.sent)
        assert len(expected) == TOTAL
        all_handled = wait_until(lambda: expected <= set(processor.snapshot()), timeout=90)
        missing = expected - set(processor.snapshot())
        assert all_handled, f"{len(missing)} confirmed messages never handled"
    finally:
        runner.stop(grace_s=5)
        store.close()
    handled: Counter[str] = processor.snapshot()
    assert set(handled) == expected
    assert processor.wrong_tenant == []
    figures(
        f"failover with {backlog} confirmed but not yet handled: the producer finished "
        f"{failover_s:.1f}s after the live broker was stopped; {producer.resends} re-sends, "
        f"{sum(n - 1 for n in handled.values())} extra handlings"
    )
