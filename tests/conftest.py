"""Shared fixtures: the broker and database a test needs, and the transports of the contract suite.

A missing broker or database skips a test locally and fails it under CI=true, so CI can never
pass by skipping the real-broker tests.

The broker under test is a test dimension (tests/broker_target.py): by default the project's
local ActiveMQ Classic; BOOST_TEST_BROKER_FLAVOUR (with BOOST_BROKER_URL, _OPENWIRE_PORT,
_AMQP_URL, _USER, _PASSWORD) names an external one; `--artemis-container` starts
Artemis with the project's docker/artemis configuration. Against an external broker, tests that
manage brokers themselves (local_broker) or rely on Classic (classic_only, when the flavour is
another) are skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.error_store import ErrorStore, FailureRecord, SQLiteErrorStore
from boost_tenancy.transports.base import Delivery, Outgoing, Transport
from boost_tenancy.transports.registry import redact_url
from boost_tenancy.transports.stomp import StompSettings
from devtools.activemq_install import ACTIVEMQ_JAR
from devtools.local_artemis import ArtemisSettings, ensure_client_jar
from tests.artemis_container import ArtemisContainer, docker_engine_missing
from tests.broker_target import (
    AMQP_URL_ENV,
    FLAVOUR_ENV,
    OPENWIRE_PORT_ENV,
    BrokerTarget,
    BrokerTargetError,
    amqp_handshake,
    connected_server,
)
from tests.jms.peer import JmsPeer, compile_peer, jms_available

TARGET_KEY = pytest.StashKey[BrokerTarget]()
_CONFIG: dict[str, pytest.Config] = {}
"""The run's config, for the report hook (a TestReport does not carry it)."""
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672"
"""The local RabbitMQ of `scripts/rabbitmq ensure`: the amqp_url fixture's default."""


# -- the broker under test ------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("boost-tenancy broker").addoption(
        "--artemis-container",
        action="store_true",
        help="start ActiveMQ Artemis (docker/artemis configuration) with testcontainers and run "
        "the contract and integration suites against it; needs a Docker engine",
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        target = BrokerTarget.from_env(os.environ)
    except BrokerTargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("artemis_container", default=False):
        target = _start_artemis_container(config, target)
    config.stash[TARGET_KEY] = target
    _CONFIG["config"] = config


def _start_artemis_container(config: pytest.Config, declared: BrokerTarget) -> BrokerTarget:
    if declared.external:
        raise pytest.UsageError(
            f"--artemis-container starts its own broker; unset {FLAVOUR_ENV} "
            f"(it names {declared.describe()})"
        )
    reason = docker_engine_missing()
    if reason is not None:
        raise pytest.UsageError(f"--artemis-container needs a Docker engine: {reason}")
    container = ArtemisContainer()
    try:
        target = container.start()
    except Exception as exc:
        raise pytest.UsageError(
            f"--artemis-container: Artemis ({container.image}) did not start: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    config.add_cleanup(container.stop)
    return target


def pytest_report_header(config: pytest.Config) -> str:
    return f"broker under test: {config.stash[TARGET_KEY].describe()}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip what the broker under test cannot run, each with its reason.

    Only an external broker skips anything here: the default run against the local broker
    (CI's run) selects every test.
    """
    target = config.stash[TARGET_KEY]
    for item in items:
        local = item.get_closest_marker("local_broker")
        if local is not None and target.external:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{_why(local, 'manages brokers of its own')}: runs only against the "
                    f"project's local broker, not an external one ({target.origin})"
                )
            )
        classic = item.get_closest_marker("classic_only")
        if classic is not None and target.flavour != "classic":
            item.add_marker(
                pytest.mark.skip(
                    reason=f"ActiveMQ Classic only ({_why(classic, 'Classic behaviour')}); "
                    f"the broker under test is {target.flavour}"
                )
            )


BROKER_OF_KEY = pytest.StashKey[dict[str, str]]()
TALLY_KEY = pytest.StashKey[dict[str, dict[str, int]]]()


def _broker_of(item: pytest.Item, target: BrokerTarget) -> str:
    """Which real broker a test talks to, by its markers, for the per-broker tally; a test
    that runs an Artemis of its own says so by its parameter."""
    callspec = getattr(item, "callspec", None)
    own = item.get_closest_marker("own_broker")
    if (own is not None and own.args == ("artemis",)) or (
        callspec is not None and "artemis" in callspec.params.values()
    ):
        return "artemis (own instance)"
    if item.get_closest_marker("amqp_broker") is not None:
        return f"{target.flavour if target.amqp_url else 'rabbitmq'} (AMQP 1.0)"
    if item.get_closest_marker("broker") is not None:
        return f"{target.flavour} (STOMP)"
    if item.get_closest_marker("java") is not None:
        return f"{target.flavour} (JMS over OpenWire)"
    return "no broker (unit, in-memory models)"


def pytest_collection_finish(session: pytest.Session) -> None:
    target = session.config.stash[TARGET_KEY]
    session.config.stash[BROKER_OF_KEY] = {i.nodeid: _broker_of(i, target) for i in session.items}
    session.config.stash[TALLY_KEY] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _CONFIG.get("config")
    if config is None or BROKER_OF_KEY not in config.stash:
        return
    # A test's outcome is its call's, or a setup's or teardown's that did not pass.
    if report.when != "call" and report.outcome == "passed":
        return
    broker = config.stash[BROKER_OF_KEY].get(report.nodeid, "no broker (unit, in-memory models)")
    tally = config.stash[TALLY_KEY].setdefault(broker, {"passed": 0, "failed": 0, "skipped": 0})
    tally[report.outcome] += 1


FIGURES_KEY = pytest.StashKey[list[str]]()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Report a line of figures the test measured (a storm's lost, leaked and duplicates, an
    outage's timings): printed, and repeated in the run's "figures" section, which the log of a
    quiet run keeps for tests that pass too."""

    def report(line: str) -> None:
        print(line)
        request.config.stash.setdefault(FIGURES_KEY, []).append(
            f"{request.node.name}: {line.strip()}"
        )

    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    measured = config.stash.get(FIGURES_KEY, [])
    if measured:
        terminalreporter.section("figures")
        for line in measured:
            terminalreporter.write_line(line)
    tallies = config.stash.get(TALLY_KEY, {})
    if not tallies:
        return
    terminalreporter.section("tests per broker")
    for broker, tally in sorted(tallies.items()):
        terminalreporter.write_line(
            f"{broker}: {tally['passed']} passed, {tally['failed']} failed, "
            f"{tally['skipped']} skipped"
        )


def _why(marker: pytest.Mark, default: str) -> str:
    return str(marker.args[0]) if marker.args else default


def unavailable(reason: str) -> NoReturn:
    """Skip locally; under CI a missing prerequisite is a failure, not a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def require_activemq() -> None:
    """Skip a test that starts a Classic broker of its own where ActiveMQ is not installed;
    under CI starting it installs it (devtools.activemq_install)."""
    installed = ACTIVEMQ_JAR.is_file() and shutil.which("java") is not None
    if not installed and os.environ.get("CI") != "true":
        pytest.skip(f"ActiveMQ is not installed ({ACTIVEMQ_JAR}); run `apt-get install activemq`")


def reachable_postgres_dsn() -> str:
    """BOOST_TEST_POSTGRES_DSN (default: the local server's `test` database), once a connection
    to it succeeded; otherwise unavailable()."""
    psycopg = pytest.importorskip("psycopg")
    dsn = os.environ.get("BOOST_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL unreachable at BOOST_TEST_POSTGRES_DSN: {exc}")
    return dsn


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02
) -> bool:
    """Poll predicate until it holds or timeout passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class Inbox:
    """Collects deliveries from the transport's receiving thread."""

    def __init__(self) -> None:
        self.items: list[Delivery] = []
        self._lock = threading.Lock()

    def __call__(self, delivery: Delivery) -> None:
        with self._lock:
            self.items.append(delivery)

    def __len__(self) -> int:
        with self._lock:
            return len(self.items)

    def bodies(self) -> list[object]:
        with self._lock:
            return [d.body for d in self.items]


def recorded(store: ErrorStore, count: int, **filters: Any) -> list[FailureRecord]:
    """The store's failures matching filters once at least count are there.

    A failure is recorded just after the broker took the message's retry copy or dead letter,
    so a test that has seen the copy waits a moment for the row.
    """
    wait_until(lambda: len(store.failures(**filters)) >= count)
    return store.failures(**filters)


class ManualClock:
    """A monotonic clock that moves only when told (advance), safe across threads."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ErrorStore]:
    """A SQLite error store of the test's own."""
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()


def unique_queue(prefix: str = "test") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def broker_target(pytestconfig: pytest.Config) -> BrokerTarget:
    """The broker under test: flavour, addresses, credentials, and whether it is external."""
    return pytestconfig.stash[TARGET_KEY]


@pytest.fixture(scope="session")
def broker_flavour(broker_target: BrokerTarget) -> str:
    """classic or artemis: the flavour the broker under test was declared to be."""
    return broker_target.flavour


@pytest.fixture(scope="session")
def stomp_settings(broker_target: BrokerTarget) -> StompSettings:
    """Settings of the broker under test; skipped (or failed under CI) when it does not answer,
    failed when it is another flavour than declared."""
    settings = broker_target.stomp_settings(confirm_timeout_s=15.0)
    try:
        server, flavour = connected_server(settings)
    except BoostTenancyError as exc:
        hint = "" if broker_target.external else " (start one with `scripts/broker start`)"
        unavailable(f"no ActiveMQ broker answering STOMP: {exc}{hint}")
    if flavour is not broker_target.broker_flavour:
        # Results against the wrong flavour would be taken for the declared one's.
        pytest.fail(
            f"the broker under test was declared {broker_target.flavour} "
            f"({broker_target.origin}) but {broker_target.host}:{broker_target.stomp_port} "
            f"answers as {server!r}",
            pytrace=False,
        )
    return settings


@pytest.fixture(scope="session")
def jms_peer(tmp_path_factory: pytest.TempPathFactory, broker_target: BrokerTarget) -> JmsPeer:
    """A real JMS client, compiled once: the BOOST Java services' side of the wire. The
    ActiveMQ client over OpenWire on Classic; on Artemis the Artemis JMS 2.0 client over CORE,
    from Maven Central, logged in as the suite."""
    reason = jms_available()
    if reason is not None:
        unavailable(f"JMS peer unavailable: {reason}")
    peer = compile_peer(tmp_path_factory.mktemp("jms-peer-classes"))
    if broker_target.flavour != "artemis":
        return peer
    try:
        client = ensure_client_jar(ArtemisSettings().cache)
    except BoostTenancyError as exc:
        unavailable(f"the Artemis JMS client could not be had from Maven Central: {exc}")
    login = None
    if broker_target.username is not None and broker_target.password is not None:
        login = (broker_target.username, broker_target.password)
    return dataclasses.replace(peer, artemis_client=client, login=login)


@pytest.fixture(scope="session")
def openwire_url(broker_target: BrokerTarget) -> str:
    """The JMS client's URL of the broker under test (OpenWire).

    The local broker always has OpenWire (a closed port skips locally, fails under CI); an
    external broker may have none, and the JMS tests are then skipped with the reason.
    """
    try:
        url, port = broker_target.openwire_url, broker_target.openwire_port
    except BrokerTargetError as exc:
        pytest.fail(str(exc), pytrace=False)
    if broker_target.flavour == "artemis" and port is not None:
        url = f"tcp://{broker_target.host}:{port}"  # CORE; the JMS peer logs in by itself
    if url is None or port is None:
        unavailable(
            f"the broker under test ({broker_target.origin}) has no OpenWire port: set "
            f"{OPENWIRE_PORT_ENV}"
        )
    if not port_open(broker_target.host, port):
        reason = f"no OpenWire port open at {broker_target.host}:{port}"
        if broker_target.external:
            pytest.skip(f"{reason} on the external broker (set {OPENWIRE_PORT_ENV})")
        unavailable(f"no ActiveMQ broker: {reason}")
    return url


@pytest.fixture(scope="session")
def amqp_url(broker_target: BrokerTarget) -> str:
    """The AMQP 1.0 broker of the amqp_broker tests, proved by a real AMQP 1.0 handshake.

    BOOST_BROKER_AMQP_URL when set (an external broker, Artemis), else BOOST_TEST_AMQP_URL, else
    the local RabbitMQ with its rabbitmq_amqp1_0 plugin, which `scripts/rabbitmq ensure`
    installs, starts and enables (scripts/test runs it). An open port proves nothing there:
    RabbitMQ's AMQP 0-9-1 listener shares port 5672.
    """
    if broker_target.amqp_url is not None:
        url = broker_target.amqp_url
        where = f"{AMQP_URL_ENV}; unset it to use the local RabbitMQ of `scripts/rabbitmq ensure`"
    elif broker_target.external:
        # Never the local RabbitMQ in place of the declared broker's own AMQP acceptor.
        unavailable(
            f"the broker under test ({broker_target.origin}) has no AMQP 1.0 address: "
            f"set {AMQP_URL_ENV}"
        )
    else:
        url = os.environ.get("BOOST_TEST_AMQP_URL", "").strip() or DEFAULT_AMQP_URL
        where = "the local RabbitMQ with rabbitmq_amqp1_0: run `scripts/rabbitmq ensure`"
    reason = amqp_handshake(url, timeout_s=3.0)
    if reason is not None:
        unavailable(f"no AMQP 1.0 broker at {redact_url(url)} ({where}): {reason}")
    return url


TransportFactory = Callable[[], Transport]
"""Makes a connected transport: the contract suite's axis (tests/contract/conftest.py)."""


class WriteCount:
    """Counts the messages a transport writes to the broker: sends, batches and forwarded
    copies. count_writes(transport) installs it on that one transport object."""

    def __init__(self) -> None:
        self.writes = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.writes += n


def count_writes(transport: Transport) -> WriteCount:
    count = WriteCount()
    send, send_batch = transport.send, transport.send_batch
    send_then_ack, send_then_ack_many = transport.send_then_ack, transport.send_then_ack_many

    def counted_send(queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        count.add(1)
        send(queue, message, delay_ms=delay_ms)

    def counted_batch(items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        count.add(len(items))
        send_batch(items, atomic=atomic)

    def counted_forward(delivery: Delivery, items: Sequence[Outgoing]) -> None:
        count.add(len(items))
        send_then_ack(delivery, items)

    def counted_forward_many(
        moves: Sequence[tuple[Delivery, Sequence[Outgoing]]],
    ) -> Sequence[Delivery]:
        count.add(sum(len(items) for _, items in moves))
        return send_then_ack_many(moves)

    transport.send = counted_send  # type: ignore[method-assign]
    transport.send_batch = counted_batch  # type: ignore[method-assign]
    transport.send_then_ack = counted_forward  # type: ignore[method-assign]
    transport.send_then_ack_many = counted_forward_many  # type: ignore[method-assign]
    return count
