"""A broker outage in the middle of a stream of persistent messages loses none of them.

A dedicated broker (its own home and ports, never the shared one) is restarted cleanly, or
killed and started again, while a producer sends and a ProcessorRunner consumes for two tenants.
Neither side is restarted by the test: both transports must reconnect by themselves.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantProcessor,
    TenantProducer,
    TransportError,
)
from boost_tenancy.header_values import new_id
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until
from tests.integration.worker_support import OwnBroker, own_broker, read_queues, stored_in

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("restarts and kills a Classic and an Artemis of its own"),
]

TENANTS = ("org-A", "org-B")
TOTAL = 300
OUTAGE_AFTER = 100
"""Messages confirmed before the outage starts."""
SEND_PACE_S = 0.01
HANDLE_S = 0.05
"""Two workers handle at most 40 messages a second, fewer than the producer sends: at the
outage messages wait on the broker, sit prefetched in the runner and are being handled."""


@pytest.fixture(scope="module", params=["classic", "artemis"])
def restart_broker(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[OwnBroker]:
    home = tmp_path_factory.mktemp(f"restart-{request.param}")
    yield from own_broker(request.param, home, 62613, 62616)


class IdRecorder(TenantProcessor):
    """Records every message id it handles (and whose subscription handled it)."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.handled: Counter[str] = Counter()
        self.wrong_tenant: list[str] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        time.sleep(HANDLE_S)
        with self._lock:
            self.handled[ctx.message_id] += 1
            if message.data.get("tenant") != ctx.tenant.value:
                self.wrong_tenant.append(ctx.message_id)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.handled)


class SteadyProducer(threading.Thread):
    """Sends TOTAL persistent messages at a steady pace, re-sending (same id) what failed."""

    def __init__(self, settings: StompSettings | Callable[[], Transport], queue: str) -> None:
        """settings: the STOMP broker, or a factory of the (unconnected) transport to send on."""
        super().__init__(name="steady-producer", daemon=True)
        self._connect: Callable[[], Transport] = (
            (lambda: StompTransport(settings)) if isinstance(settings, StompSettings) else settings
        )
        self._queue = queue
        self.sent: list[str] = []
        """Ids the broker confirmed, in order."""
        self.resends = 0
        self.errors: list[str] = []
        self.failure: BaseException | None = None
        self._lock = threading.Lock()

    def confirmed(self) -> int:
        with self._lock:
            return len(self.sent)

    def run(self) -> None:
        transport = self._connect()
        try:
            transport.connect()
            producer = TenantProducer(transport)
            give_up = time.monotonic() + 120
            for index in range(TOTAL):
                tenant = TENANTS[index % len(TENANTS)]
                message_id = new_id()
                while True:
                    try:
                        producer.send(
                            self._queue,
                            tenant,
                            {"n": index, "tenant": tenant},
                            message_id=message_id,
                        )
                        break
                    except TransportError as exc:
                        if time.monotonic() > give_up:
                            raise
                        with self._lock:
                            self.resends += 1
                            self.errors.append(str(exc))
                        time.sleep(0.1)
                with self._lock:
                    self.sent.append(message_id)
                time.sleep(SEND_PACE_S)
        except BaseException as exc:
            self.failure = exc
        finally:
            transport.close()


class ConnectionWatch(threading.Thread):
    """Notes every change of a transport's is_connected, from the outside."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(name="connection-watch", daemon=True)
        self._transport = transport
        self.changes: list[bool] = [transport.is_connected]
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.005):
            now = self._transport.is_connected
            if now != self.changes[-1]:
                self.changes.append(now)

    def stop(self) -> None:
        self._done.set()
        self.join(5)


def _crash_and_start(broker: OwnBroker) -> None:
    broker.kill()
    broker.start()


def _stomp_stacks() -> str:
    """Where the transport threads are, for a failure that would otherwise be a bare timeout."""
    frames = sys._current_frames()
    lines = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is None or thread is threading.current_thread():
            continue
        names = [entry.name for entry in traceback.extract_stack(frame)]
        lines.append(f"{thread.name}: {' > '.join(names[-6:])}")
    return "\n".join(lines)


def _stop_runner(runner: ProcessorRunner, timeout_s: float) -> bool | None:
    """runner.stop() on a helper thread: None if it did not return (a wedged transport)."""
    result: list[bool] = []
    stopper = threading.Thread(
        target=lambda: result.append(runner.stop(grace_s=timeout_s / 2)), daemon=True
    )
    stopper.start()
    stopper.join(timeout_s)
    return result[0] if result else None


@pytest.mark.parametrize(
    "outage",
    [
        pytest.param(OwnBroker.restart, id="clean-restart"),
        pytest.param(_crash_and_start, id="kill-and-start"),
    ],
)
def test_broker_outage_mid_stream_loses_no_persistent_message(
    restart_broker: OwnBroker,
    tmp_path: Path,
    outage: Callable[[OwnBroker], None],
    figures: Callable[[str], None],
) -> None:
    settings = dataclasses.replace(
        restart_broker.settings, confirm_timeout_s=10.0, reconnect_wait_s=60.0
    )
    queue = unique_queue("restart")
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
    stopped = False
    runner.start()
    watch = ConnectionWatch(runner_transport)
    watch.start()
    try:
        producer.start()
        assert wait_until(lambda: producer.confirmed() >= OUTAGE_AFTER, timeout=30)
        backlog = producer.confirmed() - len(processor.snapshot())
        began = time.monotonic()
        outage(restart_broker)
        outage_s = time.monotonic() - began

        # Neither side is restarted: both must get their connection back by themselves.
        producer.join(45)
        if producer.is_alive():
            pytest.fail(
                f"the producer never finished: {producer.confirmed()} of {TOTAL} sent\n"
                + _stomp_stacks()
            )
        assert producer.failure is None, f"the producer gave up: {producer.failure!r}"
        assert len(producer.sent) == TOTAL
        assert len(set(producer.sent)) == TOTAL
        if not wait_until(lambda: runner_transport.is_connected, timeout=30):
            pytest.fail("the runner never reconnected\n" + _stomp_stacks())

        expected = set(producer.sent)
        all_handled = wait_until(lambda: expected <= set(processor.snapshot()), timeout=60)
        missing = expected - set(processor.snapshot())
        assert all_handled, f"{len(missing)} of {TOTAL} messages never handled: {sorted(missing)}"
        # Let redelivered duplicates arrive before stopping the runner.
        previous: Counter[str] = Counter()
        while (current := processor.snapshot()) != previous:
            previous = current
            time.sleep(1.5)
        # The same runner lost its connection and got it back by itself.
        watch.stop()
        changes = list(watch.changes)
        assert False in changes, "the runner never noticed the outage"
        assert changes[-1] is True
        assert runner_transport.is_connected
        stopped = True
        assert _stop_runner(runner, 10) is True, "the runner did not stop cleanly"
    finally:
        watch.stop()
        if not stopped:
            _stop_runner(runner, 10)
        store.close()

    handled = processor.snapshot()
    assert set(handled) == expected, "every handled id is one the producer sent"
    assert processor.wrong_tenant == []
    duplicates = {m: n for m, n in handled.items() if n > 1}
    figures(
        f"outage {outage_s:.1f}s with {backlog} sent but not yet handled; {TOTAL} sent, "
        f"{producer.resends} re-sends, {len(duplicates)} handled more than once "
        f"({sum(duplicates.values()) - len(duplicates)} extra handlings); "
        f"runner connected: {changes}"
    )
    # Everything was acknowledged: nothing left on the queue, nothing dead-lettered.
    stored = stored_in(queue, TENANTS)
    assert read_queues(settings, stored) == []
    assert read_queues(settings, [dead_letter_queue(q) for q in stored]) == []
