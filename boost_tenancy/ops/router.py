"""TenantRouter: empties the shared queue of every routed logical queue into the tenants' own
queues, so Java and legacy producers keep sending to <queue> while each tenant's messages are
stored, and consumed, apart in tenant.<tenant>.<queue>.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.ops.moving import MOVE_BATCH, Move, QueueMover, copy_of, tenancy_violation
from boost_tenancy.processing.inbound import adopt
from boost_tenancy.processing.middleware import DispatchObserver
from boost_tenancy.processing.outcomes import Quarantine
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Routing, check_logical_queue
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId, claimed_tenant
from boost_tenancy.transports.base import Delivery, Transport

log = structlog.get_logger("boost_tenancy.ops.router")

OnRouted = Callable[[TenantId, int], None]
"""Told after each broker transaction how many messages of a tenant it moved; must not raise."""


class TenantRouter:
    """Moves every message of routed shared queues, unchanged, to its tenant's queue.

    It subscribes with no selector: every message is taken, so none waits on the shared queue
    for a consumer that never comes, and a broker without selectors (RabbitMQ) routes too. Each
    batch is one broker transaction where the transport has atomic_forward (a crash between the
    copy and the acknowledgement duplicates a message elsewhere, never loses it). Every runner of
    a routed queue starts one on its own transport: competing consumers, each message moved once.

    A message whose tenantUUID is missing or not a valid tenant is quarantined through the
    dispatcher's Settler (DLQ.<queue>.quarantine, recorded in the error store). With a
    default_tenant (opt-in, for legacy producers), a message with no tenantUUID property at all
    is routed to that tenant's queue with tenantUUID set; an invalid tenantUUID is still
    quarantined: the router never guesses whose a message is.
    """

    def __init__(
        self,
        transport: Transport,
        queues: Sequence[str],
        *,
        error_store: ErrorStore,
        routing: Routing = DEFAULT_ROUTING,
        default_tenant: TenantId | str | None = None,
        observers: Sequence[DispatchObserver] = (),
        on_routed: OnRouted | None = None,
        prefetch: int = MOVE_BATCH,
    ) -> None:
        """observers are told of quarantines as the dispatcher tells them (accounting);
        on_routed of the messages moved to each tenant. prefetch defaults to a full batch per
        transaction (docs/fairness.md has the rates measured with it)."""
        for queue in queues:
            if not routing.routes(check_logical_queue(queue)):
                raise ConfigError(
                    f"queue {queue!r} is {routing.topology(queue).value}, not routed: "
                    "nothing is routed from its shared queue"
                )
        self._routing = routing
        self._default = None if default_tenant is None else TenantId.parse(default_tenant)
        self._on_routed = on_routed
        self._lock = threading.Lock()
        self._defaulted = 0
        self._mover = QueueMover(
            transport,
            queues,
            self._plan,
            selector=None,
            error_store=error_store,
            prefetch=prefetch,
            name="router",
            routing=routing,
            observers=observers,
            on_moved=self._moved,
        )

    @property
    def queues(self) -> tuple[str, ...]:
        """The shared queues routed."""
        return self._mover.queues

    @property
    def default_tenant(self) -> TenantId | None:
        return self._default

    @property
    def routed(self) -> Mapping[TenantId, int]:
        """Messages moved to each tenant's queue so far, the defaulted ones included."""
        return self._mover.moved

    @property
    def defaulted(self) -> int:
        """Messages without a tenantUUID routed to the default tenant so far."""
        with self._lock:
            return self._defaulted

    @property
    def quarantined(self) -> int:
        """Messages without a valid tenant moved to quarantine so far."""
        return self._mover.quarantined

    def start(self) -> None:
        """Subscribe to every shared queue on the (connected) transport and start routing."""
        self._mover.start()
        log.info(
            "router_started",
            queues=list(self.queues),
            default_tenant=None if self._default is None else self._default.value,
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop routing and unsubscribe; what was not moved returns to the shared queue. The
        transport stays open: it is its owner's to close."""
        self._mover.stop(timeout)
        log.info(
            "router_stopped",
            routed=sum(self.routed.values()),
            defaulted=self.defaulted,
            quarantined=self.quarantined,
        )

    def _plan(self, delivery: Delivery) -> Move | Quarantine:
        raw = delivery.properties.get(TENANT_PROPERTY)
        # The toolkit's headers as the dispatcher would adopt them, the rest unchanged: a message
        # without a valid boostMessageId gets the id derived from it here, on the shared queue,
        # so a copy the router makes twice (a lost connection between copy and acknowledgement,
        # where the forward is not atomic) is a duplicate the handlers can recognise.
        adopted = adopt(delivery).delivery
        message = copy_of(adopted)
        tenant = claimed_tenant(raw)
        if raw is None and self._default is not None:
            tenant = self._default
            message = copy_of(adopted, {**adopted.properties, TENANT_PROPERTY: tenant.value})
        if tenant is None:
            return tenancy_violation(delivery, raw, "is not a valid tenant")
        try:
            target = self._routing.physical(delivery.queue, tenant)
        except ConfigError as exc:  # the name would be too long for the broker
            return tenancy_violation(delivery, raw, f"has no queue of its own: {exc}")
        return Move(delivery, tenant, target, message)

    def _moved(self, moves: Sequence[Move]) -> None:
        counts: dict[TenantId, int] = {}
        defaulted = 0
        for move in moves:
            counts[move.tenant] = counts.get(move.tenant, 0) + 1
            defaulted += TENANT_PROPERTY not in move.delivery.properties
        if defaulted:
            with self._lock:
                self._defaulted += defaulted
        log.debug(
            "shared_queue_routed",
            tenants={t.value: n for t, n in counts.items()},
            defaulted=defaulted,
        )
        if self._on_routed is not None:
            for tenant, count in counts.items():
                self._on_routed(tenant, count)


__all__ = ["OnRouted", "TenantRouter"]
