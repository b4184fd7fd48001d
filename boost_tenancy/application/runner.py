"""ProcessorRunner: a TenantProcessor assembled with what it runs. The one place that builds a
runner's parts from its arguments: the broker queue of each (tenant, queue), the dispatcher and
its event loop, the router that empties the shared queues of routed queues into the tenants' own,
the parked re-drive and the send-time routes; the processing layer's TenantWorkers runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from boost_tenancy.errors import ConfigError
from boost_tenancy.expiry import ExpiryPolicy
from boost_tenancy.messages import PublishCheck, check_queue_name
from boost_tenancy.ops.broker_plugins import missing_broker_plugins
from boost_tenancy.ops.parking import ParkedMove, ParkedRedrive
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.ops.send_routes import install_send_routes, routes_of
from boost_tenancy.processing.admission import AdmissionGate
from boost_tenancy.processing.aio import AnyMiddleware, middleware_of, needs_event_loop
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.processing.draining import QueueStateSource
from boost_tenancy.processing.event_loop import EventLoop
from boost_tenancy.processing.middleware import DispatchObserver, MiddlewareStack
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.processing.runner import Companion, TenantWorkers
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Routing, parked_queue
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Transport

REDRIVE_STOP_S = 5.0
"""How long stop() waits for the parked re-drive to finish the batch it is moving."""
ROUTER_STOP_S = 10.0
"""How long stop() waits for the router at most (less with a shorter grace period)."""


class _StopWithin:
    """A companion stopped with a wait of its own, chosen from the runner's grace period."""

    def __init__(self, part: Companion, wait_s: Callable[[float], float]) -> None:
        self._part = part
        self._wait_s = wait_s

    def start(self) -> None:
        self._part.start()

    def stop(self, timeout: float) -> None:
        self._part.stop(self._wait_s(timeout))


class ProcessorRunner(TenantWorkers):
    """Runs a TenantProcessor for a fixed list of tenants on one transport."""

    def __init__(
        self,
        processor: TenantProcessor,
        transport: Transport,
        tenants: Sequence[TenantId | str],
        *,
        error_store: ErrorStore,
        settings: RunnerSettings | None = None,
        middleware: Sequence[AnyMiddleware] = (),
        gate: AdmissionGate | None = None,
        observers: Sequence[DispatchObserver] = (),
        routing: Routing = DEFAULT_ROUTING,
        redrive_parked: bool = True,
        route_shared: bool = True,
        route_at_send: bool = True,
        default_tenant: TenantId | str | None = None,
        publish_guard: PublishCheck | None = None,
        message_ttl: ExpiryPolicy | None = None,
        queue_states: QueueStateSource | None = None,
        on_connected: Sequence[Callable[[], object]] = (),
    ) -> None:
        """routing picks each (tenant, queue)'s broker queue; redrive_parked moves the tenants'
        parked backlog (parked.<tenant>.<queue>, see ParkingSweeper) back at start.

        route_shared runs a TenantRouter for the processor's routed queues, whatever tenants
        this runner serves: every message sent to their shared queue goes to its tenant's queue,
        a message without a tenantUUID to default_tenant's when one is given (else quarantined).

        route_at_send: where the broker takes routes at run time (the transport's
        send_time_routes: Artemis), start() has it store this runner's tenants' messages sent
        to the shared queues in their own queues at once (ops/send_routes.py); the router then
        takes only what no route matches.

        gate: deliveries of a tenant over its limits wait there, unacknowledged, in order (the
        fairness gate, boost_tenancy.fairness.gate).

        publish_guard and message_ttl apply to what handlers publish (ctx.publish): their
        tenant's publishing limits, and the expiry its time-to-live gives each message.

        queue_states tells which (tenant, queue) pairs operators drained or deleted: those are
        not subscribed, or drained while running (processing/draining.py).

        on_connected are called in order once start() has connected the transport, before any
        worker or subscription: what needs the broker's capabilities (known only then) starts
        there, as the runner's queue gauges do. One that raises stops the start, the transport
        closed again, and the error goes to the caller of start() or run().
        """
        if not processor.queues:
            raise ConfigError(f"{type(processor).__name__}.queues names no queue to consume")
        for name in processor.queues:
            check_queue_name(name)
        parsed = tuple(TenantId.parse(t) for t in tenants)
        if not parsed:
            raise ConfigError("a runner needs at least one tenant")
        # Resolved once, so a name the routing refuses stops the runner before it connects.
        physical = {
            (tenant, queue): routing.physical(queue, tenant)
            for tenant in parsed
            for queue in processor.queues
        }
        settings = settings or RunnerSettings()
        # The runner's pieces outside the processor's own; the retry middleware is innermost.
        middleware = (*middleware, *middleware_of(processor))
        # Only for an async handler or middleware; a plain processor runs no loop at all.
        event_loop = (
            EventLoop(settings.event_loop) if needs_event_loop(processor, middleware) else None
        )
        dispatcher = Dispatcher(
            processor,
            transport,
            error_store,
            settings=settings.dispatch,
            middleware=middleware,
            observers=observers,
            routing=routing,
            publish_guard=publish_guard,
            message_ttl=message_ttl,
            event_loop=event_loop,
        )
        self.middleware: MiddlewareStack = dispatcher.middleware
        """The runner's middleware, in the order it runs (its names: middleware.names)."""
        companions: list[Companion] = []
        self._redrive: ParkedRedrive | None = None
        if redrive_parked:
            self._redrive = ParkedRedrive(
                transport,
                [
                    ParkedMove(tenant, parked_queue(queue, tenant), broker_queue)
                    for (tenant, queue), broker_queue in physical.items()
                ],
            )
            # As long as it needs to finish the batch it moves, whatever the grace period.
            companions.append(_StopWithin(self._redrive, lambda _grace: REDRIVE_STOP_S))
        routed = [queue for queue in processor.queues if routing.routes(queue)]
        self._router: TenantRouter | None = None
        if route_shared and routed:
            self._router = TenantRouter(
                transport,
                routed,
                error_store=error_store,
                routing=routing,
                default_tenant=default_tenant,
                # Every piece told of outcomes hears of the router's quarantines too.
                observers=self.middleware.observers,
            )
            companions.append(_StopWithin(self._router, lambda grace: min(grace, ROUTER_STOP_S)))
        send_routes = routes_of(routing, processor.queues, parsed) if route_at_send else []
        self.send_routes_added: int | None = None
        """How many routes start() added on the broker (0: all were there); None: none made."""

        def install_routes() -> None:
            # Before subscribing: the tenants' queues exist, and new messages go there from now.
            self.send_routes_added = install_send_routes(transport, send_routes)

        self.missing_broker_plugins: list[str] | None = []
        """The plugins the transport needs that start() found the broker without (warned of);
        None: the broker could not be asked."""

        def check_plugins() -> None:
            self.missing_broker_plugins = missing_broker_plugins(transport)

        super().__init__(
            processor,
            transport,
            parsed,
            physical,
            dispatcher,
            settings=settings,
            routing=routing,
            gate=gate,
            event_loop=event_loop,
            queue_states=queue_states,
            on_connected=(*on_connected, install_routes, check_plugins),
            companions=companions,
        )

    @property
    def router(self) -> TenantRouter | None:
        """What routes the shared queues of the processor's routed queues; None without any."""
        return self._router

    def wait_parked_redriven(self, timeout: float | None = None) -> bool:
        """Block until the parked backlog has been moved back (True at once without redrive)."""
        return self._redrive is None or self._redrive.wait(timeout)


__all__ = ["ProcessorRunner"]
