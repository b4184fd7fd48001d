"""The error store under database faults: nothing it does may hang its callers or a shutdown.

A PostgreSQL that accepts TCP and never answers, one that stops answering mid-run (a proxy in
the test stops forwarding), and a SQLite file another connection holds write-locked.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from structlog.testing import capture_logs

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    Routing,
    RunnerSettings,
    TenantProcessor,
)
from boost_tenancy.errors import ErrorStoreError
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.error_store import (
    ErrorStore,
    FailureOutcome,
    FailureRecord,
    PostgresErrorStore,
    SQLiteErrorStore,
    open_error_store,
)
from boost_tenancy.resilience.recorder import DOWN_COOLDOWN_S, record_failure
from boost_tenancy.routing import Topology
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unavailable, wait_until

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TENANT = TenantId("tenant-faults")
# Every limit involved is 2 to 5 s; a loaded CI machine gets three times that and more.
BOUND_S = 15.0

pytestmark = pytest.mark.slow


def make(message_id: str) -> FailureRecord:
    return FailureRecord(
        tenant=TENANT,
        queue="cmd.document.process",
        message_id=message_id,
        correlation_id=None,
        attempt=1,
        outcome=FailureOutcome.RETRY,
        error_type="TransientError",
        error_text="storage unavailable",
        occurred_at=datetime.now(UTC),
        trace="Traceback (most recent call last):\nTransientError: storage unavailable",
    )


class SilentListener:
    """Accepts TCP connections and never sends a byte: a server that is up but not answering."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self._server.close()
        for connection in self.accepted:
            connection.close()


class SwitchableProxy:
    """A TCP proxy to PostgreSQL that can stop forwarding while keeping every connection open."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def stop_forwarding(self) -> None:
        """From now on, bytes in either direction are held back: the server seems to hang."""
        self._forwarding.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                return
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._forwarding.wait()
                if self._closed:
                    return
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def close(self) -> None:
        self._closed = True
        self._forwarding.set()
        self._server.close()
        for connection in self._sockets:
            connection.close()


@pytest.fixture(scope="module")
def postgres_dsn() -> str:
    dsn = os.environ.get("BOOST_TEST_POSTGRES_DSN", DEFAULT_DSN)
    try:
        with psycopg.connect(dsn, connect_timeout=5):
            pass
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL unreachable at BOOST_TEST_POSTGRES_DSN: {exc}")
    return dsn


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()


@dataclass
class ProxiedPostgres:
    """An error store table of its own, reached through a proxy the test can make hang."""

    proxy: SwitchableProxy
    dsn: str
    table: str
    direct_dsn: str

    def stored_ids(self) -> list[str]:
        with psycopg.connect(self.direct_dsn, autocommit=True) as admin:
            rows = admin.execute(f'SELECT message_id FROM "{self.table}"').fetchall()
        return [row[0] for row in rows]


@pytest.fixture
def proxied_postgres(postgres_dsn: str) -> Iterator[ProxiedPostgres]:
    info = psycopg.conninfo.conninfo_to_dict(postgres_dsn)
    proxy = SwitchableProxy(str(info.get("host", "127.0.0.1")), int(info.get("port", 5432)))
    proxied = psycopg.conninfo.make_conninfo(postgres_dsn, host="127.0.0.1", port=proxy.port)
    target = ProxiedPostgres(proxy, proxied, "t_" + uuid.uuid4().hex[:12], postgres_dsn)
    try:
        yield target
    finally:
        proxy.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f'DROP TABLE IF EXISTS "{target.table}"')


class Call:
    """A call made on a daemon thread, so that one that hangs fails its test, not the whole run."""

    def __init__(self, function: Callable[..., object], *args: object) -> None:
        self.returned: list[object] = []
        self.raised: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(function, *args), daemon=True)
        self._thread.start()

    def _run(self, function: Callable[..., object], *args: object) -> None:
        try:
            self.returned.append(function(*args))
        except BaseException as exc:  # handed to the test's thread to assert on
            self.raised.append(exc)

    def finished(self) -> bool:
        """Whether the call ended (returned or raised) within BOUND_S."""
        self._thread.join(BOUND_S)
        return not self._thread.is_alive()


def test_opening_a_store_on_a_silent_postgres_fails_within_seconds(silent: SilentListener) -> None:
    started = time.monotonic()
    opening = Call(open_error_store, f"postgresql://postgres@127.0.0.1:{silent.port}/test")

    assert opening.finished(), "start-up still hanging"
    assert time.monotonic() - started < BOUND_S
    assert silent.accepted, "the listener accepted the connection: this is a silent server"
    [error] = opening.raised
    assert isinstance(error, ErrorStoreError)
    assert str(error).startswith(
        f"error store table 'boost_failures': connect failed: PostgreSQL at "
        f"127.0.0.1:{silent.port} did not complete the connection within 5 s"
    )
    assert isinstance(error.__cause__, psycopg.OperationalError)


@pytest.mark.postgres
def test_a_postgres_that_stops_answering_mid_run_holds_up_no_caller_and_no_close(
    proxied_postgres: ProxiedPostgres,
) -> None:
    store = PostgresErrorStore(proxied_postgres.dsn, table=proxied_postgres.table)
    assert record_failure(store, make("before")) is True

    proxied_postgres.proxy.stop_forwarding()
    started = time.monotonic()
    with capture_logs() as logs:
        callers = [Call(record_failure, store, make(f"w{n}")) for n in range(4)]
        assert all(caller.finished() for caller in callers)
    assert time.monotonic() - started < BOUND_S
    assert [caller.returned for caller in callers] == [[False]] * 4
    logged = [e for e in logs if e["event"] == "error_store_write_failed"]
    assert sorted(e["record_message_id"] for e in logged) == [f"w{n}" for n in range(4)]
    assert all(e["log_level"] == "critical" for e in logged)

    # SIGTERM's path: close() while a statement is stuck on the silent connection.
    closing = Call(store.close)
    assert closing.finished(), "close() waited for the hung statement"
    assert closing.returned == [None]
    with pytest.raises(ErrorStoreError, match="after close"):
        store.failures(tenant=TENANT)
    proxied_postgres.proxy.close()
    assert proxied_postgres.stored_ids()[0] == "before"


def test_a_write_locked_sqlite_file_bounds_the_write_then_records_again(tmp_path: Path) -> None:
    path = tmp_path / "errors.sqlite3"
    store = SQLiteErrorStore(path)
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        assert record_failure(store, make("before")) is True
        # Another process's long write transaction, as a second connection holding the lock.
        locker.execute("BEGIN EXCLUSIVE")

        # A single statement gives up after the store's short busy timeout, not SQLite's 30 s.
        started = time.monotonic()
        with pytest.raises(ErrorStoreError, match="locked"):
            store.record(make("direct"))
        assert time.monotonic() - started < BOUND_S

        started = time.monotonic()
        with capture_logs() as logs:
            assert record_failure(store, make("locked"), timeout_s=5.0) is False
        assert time.monotonic() - started < BOUND_S
        [entry] = [e for e in logs if e["event"] == "error_store_write_failed"]
        assert entry["record_message_id"] == "locked"
        assert "locked" in entry["error"]

        locker.execute("ROLLBACK")
        # Within the cool-down after a failure, callers do not wait for the store; once it is
        # over, the next write reaches the store again.
        assert wait_until(
            lambda: record_failure(store, make("after"), timeout_s=10.0),
            timeout=DOWN_COOLDOWN_S + BOUND_S,
            interval=0.5,
        )
        stored = [r.message_id for r in store.failures(tenant=TENANT)]
        # The try that was still waiting when the caller gave up may have landed late.
        assert stored in (["before", "after"], ["before", "locked", "after"])
    finally:
        locker.close()
        store.close()


def test_close_of_a_sqlite_store_returns_while_a_write_waits_for_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "errors.sqlite3"
    store = SQLiteErrorStore(path)
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        writing = Call(record_failure, store, make("locked"))
        time.sleep(0.5)  # let the write reach the lock; the test holds either way

        closing = Call(store.close)
        assert closing.finished(), "close() waited for the locked write"
        assert closing.returned == [None]
        assert writing.finished()
        assert writing.returned == [False]
        with pytest.raises(ErrorStoreError, match="after close"):
            store.record(make("after-close"))
    finally:
        locker.close()


# -- a runner beside a store that hangs: messages keep settling, stop stays bounded ---------------
class AlwaysFails(TenantProcessor):
    queues = ("cmd.faults",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise PermanentError("cannot be handled")


def _run_beside(store: ErrorStore, count: int) -> tuple[int, float]:
    """Dead-letter count failing messages through a runner; returns how many reached the DLQ
    and how long stop() took."""
    broker = InMemoryBroker()
    runner = ProcessorRunner(
        AlwaysFails(),
        InMemoryTransport(broker),
        [TENANT],
        error_store=store,
        settings=RunnerSettings(workers=4, shutdown_grace_s=5.0),
        redrive_parked=False,
        routing=Routing(Topology.SHARED),  # DLQ.cmd.faults: one queue, read by its name
    )
    runner.start()
    try:
        for n in range(count):
            broker.put(
                "cmd.faults",
                WireMessage(body="{}", properties={"tenantUUID": TENANT.value, "n": str(n)}),
            )
        wait_until(lambda: broker.depth("DLQ.cmd.faults") == count, timeout=120)
    finally:
        started = time.monotonic()
        runner.stop()
        took = time.monotonic() - started
        dead = broker.depth("DLQ.cmd.faults")
        left = broker.depth("cmd.faults")
        broker.close()
    assert left == 0, "nothing left on the source queue"
    return dead, took


@pytest.mark.postgres
def test_a_runner_beside_a_postgres_that_stopped_answering_keeps_settling_messages(
    proxied_postgres: ProxiedPostgres,
) -> None:
    store = PostgresErrorStore(proxied_postgres.dsn, table=proxied_postgres.table)
    proxied_postgres.proxy.stop_forwarding()
    with capture_logs() as logs:
        dead, stop_took = _run_beside(store, 20)
    assert dead == 20, "every message dead-lettered although no failure could be recorded"
    assert stop_took < BOUND_S, f"stop took {stop_took:.1f}s"
    unrecorded = [e for e in logs if e["event"] == "error_store_write_failed"]
    assert len(unrecorded) == 20 and all(e["log_level"] == "critical" for e in unrecorded)
    closing = Call(store.close)
    assert closing.finished()


def test_a_runner_beside_a_write_locked_sqlite_keeps_settling_messages(tmp_path: Path) -> None:
    path = tmp_path / "errors.sqlite3"
    store = SQLiteErrorStore(path)
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        dead, stop_took = _run_beside(store, 20)
        assert dead == 20
        assert stop_took < BOUND_S, f"stop took {stop_took:.1f}s"
    finally:
        locker.close()
        store.close()
