"""A broker that stops answering with its connections up (a frozen process: SIGSTOP), a Classic
and an Artemis of the test's own: the STOMP transport gives up within its bounds, and once the
broker runs again nothing it confirmed is lost and what it held unacknowledged comes back."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import Delivery, Transport
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import open_transport
from boost_tenancy.transports.stomp import StompTransport
from tests.conftest import Inbox, wait_until
from tests.integration.worker_support import OwnBroker, own_broker, read_queues

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("stops and continues a Classic and an Artemis of its own"),
]

CONFIRM_S = 3.0


@pytest.fixture(scope="module", params=["classic", "artemis"])
def broker(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[OwnBroker]:
    home = tmp_path_factory.mktemp(f"frozen-{request.param}")
    yield from own_broker(request.param, home, 62613, 62616)


RUNNING_STATES = frozenset("RS")
"""Thread states in which a thread may still run its own code (a thread in D, uninterruptible
in the kernel, stops when it leaves it)."""


def thread_states(pid: int) -> dict[str, int]:
    """How many of the process's threads are in each state (T: stopped), from /proc."""
    states: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                stat = Path(task.path, "stat").read_bytes()
                state = chr(stat[stat.rindex(b")") + 2])
                states[state] = states.get(state, 0) + 1
    return states


def listening_pids(port: int) -> set[int]:
    """The processes holding a socket that listens on port, from /proc (any address)."""
    inodes: set[bytes] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_bytes().splitlines()[1:]:
                fields = row.split()
                # local address "ADDR:PORT" in hex; state 0A is LISTEN
                if int(fields[1].rsplit(b":", 1)[1], 16) == port and fields[3] == b"0A":
                    inodes.add(fields[9])
    owners: set[int] = set()
    for process in os.scandir("/proc"):
        if not process.name.isdigit():
            continue
        # A process may end while it is read: whatever it held is not listening any more.
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{process.name}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path).encode()
                    if target.startswith(b"socket:[") and target[8:-1] in inodes:
                        owners.add(int(process.name))
    return owners


@dataclasses.dataclass
class Frozen:
    """The frozen broker's pid and port, and what /proc says of them when asked."""

    pid: int
    ports: tuple[int, ...]

    def witness(self) -> str:
        listeners = {port: sorted(listening_pids(port)) for port in self.ports}
        return f"broker pid {self.pid}: threads by state {thread_states(self.pid)}; {listeners=}"


@contextlib.contextmanager
def frozen(broker: OwnBroker) -> Iterator[Frozen]:
    """The broker process stopped (SIGSTOP) while the block runs, continued after. The block
    starts once no thread of it can run, and only if the ports the transports use are its own."""
    pid = broker.process.status()["pid"]
    assert isinstance(pid, int)
    amqp_port = urlsplit(broker.amqp_url).port if broker.amqp_url else None
    state = Frozen(pid, (broker.settings.port, *([amqp_port] if amqp_port else [])))
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while RUNNING_STATES & set(thread_states(pid)) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not RUNNING_STATES & set(thread_states(pid)), f"still running: {state.witness()}"
        for port in state.ports:
            assert listening_pids(port) == {pid}, f"not the broker's port: {state.witness()}"
        yield state
    finally:
        os.kill(pid, signal.SIGCONT)


def transport_to(broker: OwnBroker, *, heartbeat_s: float = 10.0) -> StompTransport:
    settings = dataclasses.replace(
        broker.settings, confirm_timeout_s=CONFIRM_S, heartbeat_s=heartbeat_s, reconnect_wait_s=5
    )
    transport = StompTransport(settings)
    transport.connect()
    return transport


def message(body: str) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": "org-frozen"})


def failure_of(action: Callable[[], object], within_s: float, broker: Frozen) -> TransportError:
    """The TransportError action raised, which it must within within_s."""
    raised: list[BaseException] = []
    started = time.monotonic()

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within_s)
    took = time.monotonic() - started
    assert not thread.is_alive(), f"still blocked after {within_s}s; {broker.witness()}"
    assert len(raised) == 1 and isinstance(raised[0], TransportError), (
        f"{raised or 'returned'} after {took:.3f}s; {broker.witness()}"
    )
    return raised[0]


@pytest.mark.parametrize(
    ("messages", "body_size", "says"),
    [(1, 10, "no receipt"), (50, 200_000, "read nothing")],
    ids=["a send", "a batch of 10 MB"],
)
def test_a_write_to_a_frozen_broker_fails_in_bounded_time_and_loses_nothing_confirmed(
    broker: OwnBroker, messages: int, body_size: int, says: str
) -> None:
    """A send waits at most confirm_timeout_s for its receipt. A batch of more than the
    sockets' buffers hold blocks in its write instead, which fails once nothing moved for as
    long (several times that in all, as the buffers still take a little at each try)."""
    queue = f"frozen.{uuid.uuid4().hex[:8]}"
    items = [(queue, message("x" * body_size))] * messages
    transport = transport_to(broker)
    try:
        transport.send(queue, message("confirmed before"))
        with frozen(broker) as stopped:
            started = time.monotonic()
            error = failure_of(lambda: transport.send_batch(items, atomic=False), 60, stopped)
            took = time.monotonic() - started
        assert says in str(error), error
        if says == "no receipt":
            assert CONFIRM_S <= took < CONFIRM_S + 5, took
        assert wait_until(lambda: transport.is_connected, timeout=60), "no reconnection"
    finally:
        transport.close()
    # A reader of its own, with heart-beats as configured by default.
    bodies = [d.body for d in read_queues(broker.settings, [queue], expect=1, timeout_s=20)]
    assert "confirmed before" in bodies, bodies


@pytest.mark.parametrize("protocol", ["stomp", "amqp"])
def test_what_a_frozen_broker_held_unacknowledged_comes_back_once_it_runs(
    broker: OwnBroker, protocol: str
) -> None:
    """Heart-beats (STOMP) or the idle timeout (AMQP) of 1 s notice the silence, and a send
    fails within the confirm timeout; the broker, running again, redelivers what the lost
    connection held."""
    transport = listening_transport(broker, protocol)
    queue = f"frozen.{uuid.uuid4().hex[:8]}"
    try:
        transport.send(queue, message("held"))
        inbox = Inbox()
        transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
        assert wait_until(lambda: len(inbox) == 1, timeout=20)
        with frozen(broker) as stopped:
            started = time.monotonic()
            failure_of(lambda: transport.send(queue, message("while frozen")), 30, stopped)
            took = time.monotonic() - started
        assert took < CONFIRM_S + 5, took
        # The send that failed may be stored too (the broker read it before it froze), and
        # come first.

        def held_again() -> list[Delivery]:
            return [d for d in inbox.items[1:] if d.body == "held"]

        assert wait_until(lambda: bool(held_again()), timeout=60), "the held message did not return"
        again = held_again()[0]
        assert again.redelivered
        transport.ack(again)
    finally:
        transport.close()


def listening_transport(broker: OwnBroker, protocol: str) -> Transport:
    """A connected transport of protocol with 1 s heart-beats (STOMP) or idle timeout (AMQP)."""
    if protocol == "stomp":
        return transport_to(broker, heartbeat_s=1.0)
    if broker.amqp_url is None:
        pytest.skip("ActiveMQ Classic 5.17 has no AMQP 1.0 acceptor")
    options = ConnectOptions(
        username=broker.settings.username,
        password=broker.settings.password,
        confirm_timeout_s=CONFIRM_S,
        heartbeat_s=1.0,
        reconnect_wait_s=5,
    )
    transport = open_transport(broker.amqp_url, options)
    transport.connect()
    return transport
