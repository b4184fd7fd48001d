"""TenantWorkers: one subscription per (tenant, queue), a work queue that takes turns between
tenants, and worker threads that run the dispatcher, stopped within a grace period."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import structlog

from boost_tenancy.errors import TransportError
from boost_tenancy.lifecycle import run_until_stopped
from boost_tenancy.processing.admission import AdmissionGate, Admitted
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.processing.draining import QueueDrains, QueueKey, QueueStateSource
from boost_tenancy.processing.event_loop import EventLoop
from boost_tenancy.processing.lifespan import Lifespan
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.processing.runner_health import RunnerHealth
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.processing.scheduling import FairWorkQueue
from boost_tenancy.routing import Routing
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import ConnectionStatus, Delivery, SubscribeRequest, Transport

log = structlog.get_logger("boost_tenancy.processing.runner")

EXIT_HANDLERS_ABANDONED = 3
"""run()'s exit code when the grace period ended with handlers still running: their messages
were left unacknowledged (the broker redelivers them), which an operator should know of."""

CANCELLED_SETTLE_S = 5.0
"""How long stop() waits, after cancelling the async handlers still running at the end of the
grace period, for their workers to settle them (retried, the attempt counted)."""


class Companion(Protocol):
    """What runs beside the workers while they consume (the shared-queue router, the parked
    re-drive): started once every subscription is open, stopped before the workers finish,
    given the runner's grace period (how long to wait within it is the companion's choice)."""

    def start(self) -> None: ...

    def stop(self, timeout: float) -> None: ...


class TenantWorkers:
    """Runs a TenantProcessor's deliveries for a fixed list of tenants on one transport.

    It runs what it is given (the dispatcher, the admission gate, companions such as the
    shared-queue router), which the application layer builds
    (boost_tenancy.application.runner.ProcessorRunner). The transport's receiving thread only
    hands deliveries over; worker threads run the dispatcher. Stopping lets in-flight handlers
    finish within a deadline and leaves the rest unacknowledged.
    """

    def __init__(
        self,
        processor: TenantProcessor,
        transport: Transport,
        tenants: Sequence[TenantId],
        physical: Mapping[QueueKey, str],
        dispatcher: Dispatcher,
        *,
        settings: RunnerSettings,
        routing: Routing,
        gate: AdmissionGate | None = None,
        event_loop: EventLoop | None = None,
        queue_states: QueueStateSource | None = None,
        on_connected: Sequence[Callable[[], object]] = (),
        companions: Sequence[Companion] = (),
    ) -> None:
        """physical: the broker queue of each (tenant, logical queue) to subscribe to, for
        every tenant and each of the processor's queues.

        gate: deliveries of a tenant over its limits wait there, unacknowledged, in order.
        event_loop: where async handlers and middleware run (started and stopped here).
        queue_states tells which (tenant, queue) pairs operators drained or deleted: those are
        not subscribed, or drained while running (processing/draining.py).

        on_connected are called in order once start() has connected the transport, before any
        worker or subscription: what needs the broker's capabilities (known only then) starts
        there. One that raises stops the start, the transport closed again, and the error goes
        to the caller of start() or run(). companions start, in order, once every subscription
        is open, and stop first when the runner stops.
        """
        self._tenants = tuple(tenants)
        self._physical = dict(physical)
        self._routing = routing
        self._processor = processor
        self._transport = transport
        self._gate = gate
        self._settings = settings
        self._event_loop = event_loop
        self._dispatcher = dispatcher
        self._companions = tuple(companions)

        # Takes turns between tenants so one tenant's prefetched backlog cannot hold every worker.
        self._work: FairWorkQueue[Delivery | Admitted] = FairWorkQueue(
            self._settings.tenant_weights
        )
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._workers: list[threading.Thread] = []
        self._queue_states = queue_states
        self._on_connected = tuple(on_connected)
        self._drains = QueueDrains(transport, self._subscribe_request)
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._started = False
        self._lifespan = Lifespan(processor, event_loop)
        self._opened = False
        """The lifespan started and has not stopped yet."""

    @property
    def tenants(self) -> tuple[TenantId, ...]:
        return self._tenants

    @property
    def routing(self) -> Routing:
        return self._routing

    @property
    def in_flight(self) -> int:
        """Handlers running right now."""
        return self._busy

    def health(self) -> RunnerHealth:
        """The runner's state now, for probes (/healthz, /readyz) and gauges; safe from any
        thread."""
        workers = list(self._workers)
        # A drained (tenant, queue) is not expected to be subscribed: it does not make the
        # runner unready.
        expected, subscriptions = self._drains.serving()
        running = self._started and not self._stopping.is_set()
        transport = self._transport
        if isinstance(transport, ConnectionStatus):
            connected = running and transport.is_connected
            open_now = sum(1 for sub in subscriptions if transport.is_open(sub)) if connected else 0
        else:
            connected, open_now = running, len(subscriptions) if running else 0
        return RunnerHealth(
            started=self._started,
            stopped=self._stopping.is_set(),
            workers=len(workers),
            workers_alive=sum(1 for worker in workers if worker.is_alive()),
            connected=connected,
            subscriptions=expected,
            subscriptions_open=open_now,
        )

    def start(self) -> None:
        """Connect, start the workers and open every (tenant, queue) subscription."""
        if self._started:
            return
        self._started = True
        if self._event_loop is not None:
            self._event_loop.start()
        opened = False
        try:
            # Before connecting: what the handlers share is open before the first delivery.
            self._lifespan.start()
            opened = True
            self._transport.connect()
            try:
                for connected in self._on_connected:
                    connected()
            except BaseException:
                self._transport.close()
                raise
        except BaseException:
            if opened:
                self._lifespan.stop()
            if self._event_loop is not None:
                self._event_loop.stop()
            raise
        self._opened = True
        for index in range(self._settings.workers):
            self._workers.append(self._start_worker(index))
        if self._gate is not None:
            self._gate.start(self._work.put, logical=self._routing.logical)
        held = self._queue_states.first_read() if self._queue_states is not None else ()
        self._drains.open(list(self._physical), held)
        if self._queue_states is not None:
            self._queue_states.start(self._drains.apply)
        # After subscribing: what they move to this runner's tenants is taken at once, while
        # the runner already handles new messages.
        for companion in self._companions:
            companion.start()
        log.info(
            "runner_started",
            processor=type(self._processor).__name__,
            tenants=len(self._tenants),
            queues=list(self._processor.queues),
            workers=self._settings.workers,
        )

    def _subscribe_request(self, key: QueueKey) -> SubscribeRequest:
        tenant, queue = key
        physical = self._physical[key]
        # A shared queue needs the tenant's selector. A per-tenant queue holds only this
        # tenant's messages, so it takes all of them: one that names another tenant (or
        # none) reaches the dispatcher's tenant guard and is quarantined, where a selector
        # would leave it on the queue for good, counted nowhere.
        return SubscribeRequest(
            physical,
            tenant_selector(tenant) if physical == queue else None,
            self._settings.prefetch,
            self._receiver(tenant),
        )

    @property
    def drains(self) -> QueueDrains:
        """The runner's subscriptions and which of them are drained."""
        return self._drains

    def _receiver(self, tenant: TenantId) -> Callable[[Delivery], None]:
        if self._gate is not None:
            offer = self._gate.offer

            def through_the_gate(delivery: Delivery) -> None:
                offer(tenant, delivery)

            return through_the_gate

        def on_delivery(delivery: Delivery) -> None:
            self._work.put(tenant, delivery)

        return on_delivery

    def _start_worker(self, index: int) -> threading.Thread:
        worker = threading.Thread(target=self._work_loop, name=f"boost-worker-{index}", daemon=True)
        worker.start()
        return worker

    def supervise(self) -> int:
        """Replace any worker thread that ended while the runner runs; returns how many.

        The dispatcher turns whatever a handler raises into an outcome, so a worker ending is a
        defect: it is logged at critical level and replaced, so the runner never keeps running
        with fewer workers (or none) than it was given.
        """
        if self._stopping.is_set():
            return 0
        replaced = 0
        for index, worker in enumerate(self._workers):
            if not worker.is_alive():
                log.critical("worker_died_replaced", worker=worker.name)
                self._workers[index] = self._start_worker(index)
                replaced += 1
        return replaced

    def _work_loop(self) -> None:
        while not self._stopping.is_set():
            taken = self._work.get(timeout=0.2)
            if taken is None:
                continue
            tenant, item = taken
            if self._stopping.is_set():
                return  # left unacknowledged: the broker redelivers it after close
            admitted: Admitted | None = None
            if isinstance(item, Admitted):  # handed over by the gate, with its slot
                admitted, delivery = item, item.delivery
            else:
                delivery = item
            with self._busy_lock:
                self._busy += 1
            try:
                if admitted is not None and admitted.expired and self._gate is not None:
                    # Held past the gate's hold time: re-sent for later, no attempt counted.
                    delay = self._gate.defer_delay_ms()
                    self._dispatcher.defer(tenant, delivery, delay, "held too long")
                else:
                    self._dispatcher.dispatch(tenant, delivery)
            except TransportError as exc:
                # Not acknowledged: the broker redelivers it once the connection is back.
                log.warning("delivery_settle_failed", queue=delivery.queue, error=str(exc))
            except BaseException:  # a worker must outlive any defect; supervise() is the backstop
                log.critical("dispatcher_failed", queue=delivery.queue, exc_info=True)
            finally:
                with self._busy_lock:
                    self._busy -= 1
                self._drains.settled(delivery)
                if admitted is not None and self._gate is not None:
                    self._gate.done(tenant, admitted.slot)

    def stop(self, grace_s: float | None = None) -> bool:
        """Stop taking messages, let in-flight handlers finish within grace_s, then disconnect.

        Returns False if some handler was still running at the deadline; its message stays
        unacknowledged and the broker redelivers it. An async handler running at the deadline is
        cancelled instead, and its worker settles it as a retry with its attempt counted.
        """
        grace = self._settings.shutdown_grace_s if grace_s is None else grace_s
        deadline = time.monotonic() + grace
        # First of all: no handler starts from now on. What is queued or arrives meanwhile stays
        # unacknowledged and goes back to the broker uncounted when the transport closes; a
        # handler started while the router and the re-drive wound down (up to 10 s) would be
        # cut off by the close, and its attempt would run again.
        self._stopping.set()
        self._work.close()  # wakes idle workers now; queued deliveries stay unacknowledged
        if self._queue_states is not None:
            self._queue_states.stop()
        for companion in self._companions:
            companion.stop(grace)
        self._join_workers(deadline)
        # Past the grace period a coroutine is cancelled, and its worker settles it as a retry
        # before the transport closes; a plain handler cannot be, and is left.
        if self._event_loop is not None and (cancelled := self._event_loop.cancel_running()):
            log.warning("async_handlers_cancelled", count=cancelled)
            self._join_workers(time.monotonic() + CANCELLED_SETTLE_S)
        finished = not any(worker.is_alive() for worker in self._workers)
        if not finished:
            # A handler still runs: the connection closes before what it uses does, so its
            # message goes back to the broker uncounted instead of failing on a closed pool and
            # being settled as a retry or a dead letter.
            self._transport.close()
        if self._opened:
            self._opened = False
            self._lifespan.stop()  # on the loop, before it stops
        if self._event_loop is not None:
            self._event_loop.stop()
        if finished:
            self._transport.close()
        log.info("runner_stopped", clean=finished)
        return finished

    def _join_workers(self, deadline: float) -> None:
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    def request_stop(self) -> None:
        """Ask run() to stop; safe from a signal handler."""
        self._stop_requested.set()

    def run(self, *, install_signal_handlers: bool = True) -> int:
        """Start, block until SIGTERM/SIGINT or request_stop(), stop gracefully.

        Returns 0, or EXIT_HANDLERS_ABANDONED when the grace period ended with handlers running.
        """
        finished = run_until_stopped(
            self.start,
            self.stop,
            self._stop_requested,
            install_signal_handlers=install_signal_handlers,
            tick=self.supervise,
        )
        self._processor.close()
        return 0 if finished is not False else EXIT_HANDLERS_ABANDONED
