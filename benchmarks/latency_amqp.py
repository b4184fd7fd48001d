"""The AMQP 1.0 sides of bench_latency.py (--transport amqp): a paced raw proton sender, a raw
proton receiver that accepts each message (bench_amqp's consume baseline), and a ProcessorRunner
on AmqpTransport, all on the tenant's per-tenant queue (bench_amqp.ROUTING: RabbitMQ applies no
selectors).

Each message is persistent JSON text carrying its send time, with the properties the transport
sends (bench_amqp.raw_message), so the runner takes it as it would take the toolkit's own.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_amqp import (
    ROUTING,
    AmqpConfig,
    QueueCapability,
    RawClient,
    RawConsumer,
    connected_transport,
    raw_message,
)
from bench_common import BenchmarkError
from proton import Connection, Event
from proton.handlers import MessagingHandler
from proton.reactor import Container

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantProcessor,
)
from boost_tenancy.resilience.error_store import SQLiteErrorStore


class _Tick(MessagingHandler):  # type: ignore[misc]
    """The pacing timer of a PacedSender (its own handler: RawClient's timer is the timeout)."""

    def __init__(self, sender: PacedSender) -> None:
        super().__init__()
        self._sender = sender

    def on_timer_task(self, event: Event) -> None:
        self._sender.pump(event.container)


class PacedSender(RawClient):
    """Sends count messages at rate (inf: as fast as the link's credit allows), each body with
    its send time; done when the broker accepted every one."""

    def __init__(self, cfg: AmqpConfig, queue: str, tenant: str, rate: float, count: int) -> None:
        super().__init__(cfg, f"paced sender to {queue}", count, prefetch=0)
        self.queue = queue
        self.tenant = tenant
        self.rate = rate
        self.sent = 0
        self.began = 0.0
        self.elapsed = 0.0
        self._link: Any = None
        self._tick = _Tick(self)
        self._ticking = False

    def started(self, container: Container, conn: Connection) -> None:
        self._link = container.create_sender(
            conn,
            target=self.cfg.address(self.queue),
            options=QueueCapability(self.cfg.flavour.durable_terminus),
        )

    def on_sendable(self, event: Event) -> None:
        if not self.began:
            self.began = time.monotonic()
        self.pump(event.container)

    def pump(self, container: Container) -> None:
        """Send every message due by now that the credit allows; wake again for the next."""
        self._ticking = False
        link = self._link
        while self.sent < self.expected and link is not None and link.credit:
            due = self.began + self.sent / self.rate
            ahead = due - time.monotonic()
            if ahead > 0:
                if not self._ticking:
                    self._ticking = True
                    container.schedule(ahead, self._tick)
                return
            body = json.dumps({"n": self.sent, "tenantUUID": self.tenant, "sentAt": time.time()})
            link.send(raw_message(self.tenant, body))
            self.sent += 1
        if self.sent == self.expected and not self.elapsed:
            self.elapsed = time.monotonic() - self.began

    def on_accepted(self, event: Event) -> None:
        self.count += 1
        if self.count == self.expected:
            self.finish()


def paced_send(cfg: AmqpConfig, queue: str, tenant: str, rate: float, count: int) -> float:
    """Send count messages at rate to the tenant's queue; returns the rate achieved."""
    sender = PacedSender(cfg, ROUTING.physical(queue, tenant), tenant, rate, count)
    sender.run()
    return count / max(sender.elapsed, 1e-9)


class _RecordingReceiver(RawConsumer):
    """bench_amqp's raw receiver, recording each message's latency as it takes it."""

    def __init__(
        self, cfg: AmqpConfig, queue: str, credit: int, record: Callable[[float], None]
    ) -> None:
        super().__init__(cfg, queue, 1 << 62, credit)
        self._record = record
        self.ready = threading.Event()
        self.stop_requested = False

    def on_start(self, event: Event) -> None:
        super().on_start(event)
        # It runs until stopped: the timeout timer becomes a poll for the stop.
        self._timer.cancel()
        self._timer = None
        event.container.schedule(0.05, self)

    def started(self, container: Container, conn: Connection) -> None:
        super().started(container, conn)
        self.ready.set()

    def on_message(self, event: Event) -> None:
        sent_at = json.loads(event.message.body).get("sentAt")
        if sent_at is not None:
            self._record(time.time() - float(sent_at))
        self.accept(event.delivery)
        event.receiver.flow(1)
        self.count += 1

    def on_timer_task(self, event: Event) -> None:
        if self.stop_requested:
            self.finish()
        else:
            event.container.schedule(0.05, self)


def raw_side(
    cfg: AmqpConfig, queue: str, tenant: str, record: Callable[[float], None]
) -> Callable[[], None]:
    """The raw receiver on the tenant's queue, on a thread of its own; returns what stops it."""
    receiver = _RecordingReceiver(cfg, ROUTING.physical(queue, tenant), cfg.prefetch, record)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            Container(receiver).run()
        except BaseException as exc:  # reported by stop()
            failure.append(exc)

    thread = threading.Thread(target=run, name="raw-amqp-receiver", daemon=True)
    thread.start()
    if not receiver.ready.wait(cfg.timeout_s):
        raise BenchmarkError(f"raw receiver on {queue}: no link within {cfg.timeout_s:.0f}s")

    def stop() -> None:
        receiver.stop_requested = True
        thread.join(10.0)
        if failure:
            raise BenchmarkError(f"raw receiver on {queue} failed: {failure[0]}")

    return stop


def timed_processor(queue: str, record: Callable[[float], None]) -> TenantProcessor:
    """A processor of queue that records, as its handler starts, how long ago the message's
    body says it was sent (both protocols' toolkit side)."""

    class Timed(TenantProcessor):
        queues = (queue,)

        def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
            sent_at = message.data.get("sentAt") if isinstance(message.data, dict) else None
            if sent_at is not None:
                record(time.time() - float(sent_at))

    return Timed()


def toolkit_side(
    cfg: AmqpConfig, queue: str, tenant: str, workers: int, record: Callable[[float], None]
) -> Callable[[], None]:
    """A ProcessorRunner for the tenant on AmqpTransport, recording each latency as its handler
    starts."""
    tmp = tempfile.TemporaryDirectory(prefix="bench-latency-amqp-")
    store = SQLiteErrorStore(Path(tmp.name) / "errors.sqlite3")
    runner = ProcessorRunner(
        timed_processor(queue, record),
        connected_transport(cfg),
        [tenant],
        error_store=store,
        settings=RunnerSettings(workers=workers, prefetch=cfg.prefetch),
        routing=ROUTING,
    )
    runner.start()

    def stop() -> None:
        runner.stop(grace_s=10.0)
        store.close()
        tmp.cleanup()

    return stop
