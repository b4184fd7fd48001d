"""Helpers of the failure-mode tests: worker processes run by the CLI, and reading a queue back."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.transports.base import Delivery, Transport
from boost_tenancy.transports.registry import open_transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.local_artemis import HOST as ARTEMIS_HOST
from devtools.local_artemis import PASSWORD as ARTEMIS_PASSWORD
from devtools.local_artemis import USER as ARTEMIS_USER
from devtools.local_artemis import ArtemisSettings, LocalArtemis
from devtools.local_broker import ACTIVEMQ_JAR, LocalBroker, LocalBrokerSettings
from tests.broker_target import URL_ENV, stomp_env
from tests.conftest import Inbox, unavailable, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The project root: the worker's working directory, so `tests` is importable there."""
BOOST_TENANCY = Path(sys.executable).parent / "boost-tenancy"
"""The command-line entry point installed next to the interpreter running the tests."""

BrokerAddress = StompSettings | str
"""Where a broker answers: STOMP settings, or the URL of any transport (amqp://user:pw@host)."""


def open_client(address: BrokerAddress) -> Transport:
    """A connected transport to address."""
    transport = (
        StompTransport(address) if isinstance(address, StompSettings) else open_transport(address)
    )
    transport.connect()
    return transport


def broker_env(address: BrokerAddress) -> dict[str, str]:
    """The BOOST_BROKER_* variables that point a worker process at address."""
    return stomp_env(address) if isinstance(address, StompSettings) else {URL_ENV: address}


class Worker:
    """One `boost-tenancy run` process; its stdout and stderr go to a file."""

    def __init__(self, process: subprocess.Popen[bytes], output: Path) -> None:
        self.process = process
        self.output = output

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout_s: float) -> int | None:
        """The exit code, or None if the process still runs after timeout_s."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def running(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        try:
            return self.output.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines the worker wrote (BOOST_LOG_FORMAT=json)."""
        found: list[dict[str, Any]] = []
        for line in self.text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(line)
                if isinstance(value, dict):
                    found.append(value)
        return found

    def ensure_stopped(self) -> None:
        """SIGKILL the process if it still runs, and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)


class WorkerPool:
    """Starts worker processes and kills whatever is left of them at teardown."""

    def __init__(self, directory: Path, address: BrokerAddress) -> None:
        self._directory = directory
        self._address = address
        self._workers: list[Worker] = []

    def base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                **broker_env(self._address),
                "BOOST_ERROR_STORE": f"sqlite:///{self._directory / 'errors.sqlite3'}",
                "BOOST_LOG_FORMAT": "json",
                "BOOST_LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
                # `tests.integration...` importable whatever the command does with its
                # working directory.
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
                ),
            }
        )
        return env

    def start(self, processor: str, tenants: Sequence[str], env: Mapping[str, str]) -> Worker:
        output = self._directory / f"worker-{len(self._workers) + 1}.log"
        command = [str(BOOST_TENANCY), "run", processor]
        for tenant in tenants:
            command += ["--tenant", tenant]
        with output.open("wb") as sink:
            process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env={**self.base_env(), **env},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(process, output)
        self._workers.append(worker)
        return worker

    def close(self) -> None:
        for worker in self._workers:
            worker.ensure_stopped()


def worker_pool(directory: Path, address: BrokerAddress) -> Iterator[WorkerPool]:
    """Fixture body: a pool whose processes are all gone after the test."""
    pool = WorkerPool(directory, address)
    try:
        yield pool
    finally:
        pool.close()


def read_queue(
    address: BrokerAddress,
    queue: str,
    *,
    tenant: str | None,
    expect: int,
    quiet_s: float = 1.0,
    timeout_s: float = 15.0,
) -> list[Delivery]:
    """Consume a queue (one tenant's messages, or all) and acknowledge what arrived.

    Waits for at least `expect` deliveries, then until none has arrived for quiet_s, so a
    message more than expected is seen too.
    """
    return read_queues(
        address, [queue], tenant=tenant, expect=expect, quiet_s=quiet_s, timeout_s=timeout_s
    )


def read_queues(
    address: BrokerAddress,
    queues: Sequence[str],
    *,
    tenant: str | None = None,
    expect: int = 0,
    quiet_s: float = 1.0,
    timeout_s: float = 15.0,
) -> list[Delivery]:
    """read_queue over several queues at once: `expect` counts what all of them hold."""
    transport = open_client(address)
    inbox = Inbox()
    try:
        for queue in dict.fromkeys(queues):
            transport.subscribe(
                queue,
                selector=tenant_selector(tenant) if tenant is not None else None,
                prefetch=1000,
                on_delivery=inbox,
            )
        wait_until(lambda: len(inbox) >= expect, timeout=timeout_s)
        seen = -1
        while seen != len(inbox):
            seen = len(inbox)
            time.sleep(quiet_s)
        items = list(inbox.items)
        for delivery in items:
            transport.ack(delivery)
        return items
    finally:
        transport.close()


def stored_in(queue: str, tenants: Sequence[str]) -> list[str]:
    """Every broker queue that can hold the tenants' messages of a logical queue under the default
    routing: the shared queue (what no router has moved yet) and each tenant's own queue."""
    return [queue, *(DEFAULT_ROUTING.physical(queue, tenant) for tenant in tenants)]


def message_ids(deliveries: Sequence[Delivery]) -> list[str]:
    return [d.properties["boostMessageId"] for d in deliveries]


def free_or(preferred: int) -> int:
    """preferred, unless something already listens there (then any free loopback port)."""
    with socket.socket() as sock:
        # Connections of an earlier broker in TIME_WAIT do not make the port taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def dedicated_broker(home: Path, stomp_port: int, openwire_port: int) -> Iterator[LocalBroker]:
    """Fixture body: a broker of the test's own (home and ports), which it may restart or kill
    without touching the broker every other test shares."""
    if not ACTIVEMQ_JAR.is_file() or shutil.which("java") is None:
        unavailable(f"ActiveMQ or Java is not installed ({ACTIVEMQ_JAR}; java on PATH)")
    broker = LocalBroker(
        LocalBrokerSettings(
            home=home, stomp_port=free_or(stomp_port), openwire_port=free_or(openwire_port)
        )
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.stop(timeout_s=30)


@dataclass
class OwnBroker:
    """A broker of a test's own, Classic or Artemis, that it may restart or kill: its STOMP
    address and login as settings."""

    flavour: str
    process: LocalBroker | LocalArtemis
    settings: StompSettings
    amqp_url: str | None = None
    """Its AMQP 1.0 acceptor (Artemis), logged in by BOOST_BROKER_USER/_PASSWORD; None for
    Classic 5.17, which has none."""

    def restart(self) -> None:
        self.process.restart()

    def kill(self) -> None:
        self.process.kill()

    def start(self) -> None:
        self.process.start()


OWN_ARTEMIS_OFFSET = 1100
"""Ports of a test's own Artemis: 62813 (STOMP), 62816 (CORE), 6872 (AMQP), clear of the shared
brokers and of the Classic brokers tests start (626xx, 627xx)."""


def own_broker(
    flavour: str, home: Path, stomp_port: int, openwire_port: int
) -> Iterator[OwnBroker]:
    """Fixture body: a Classic (dedicated_broker) or an Artemis (devtools.local_artemis, the
    project's configuration) of the test's own, stopped afterwards."""
    if flavour == "classic":
        for broker in dedicated_broker(home, stomp_port, openwire_port):
            yield OwnBroker(
                "classic",
                broker,
                StompSettings(host=broker.settings.host, port=broker.settings.stomp_port),
            )
        return
    if shutil.which("java") is None or shutil.which("mvn") is None:
        unavailable("Java and Maven are needed to run an Artemis of the test's own")
    artemis = LocalArtemis(
        ArtemisSettings(
            home=home,
            port_offset=OWN_ARTEMIS_OFFSET,
        )
    )
    try:
        artemis.start()
        yield OwnBroker(
            "artemis",
            artemis,
            StompSettings(
                host=ARTEMIS_HOST,
                port=artemis.settings.stomp_port,
                username=ARTEMIS_USER,
                password=ARTEMIS_PASSWORD,
            ),
            amqp_url=f"amqp://{ARTEMIS_HOST}:{artemis.settings.amqp_port}",
        )
    finally:
        artemis.stop(timeout_s=30)
