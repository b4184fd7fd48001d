"""An operator's hold on a tenant's queues: list them with the broker's counts, drain one (runners
stop consuming it), resume it, and delete a drained one (every message purged)."""

from __future__ import annotations

import queue as queue_mod
import time
from typing import Final

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.ops.queue_reports import DeleteReport, DrainReport, TenantQueueRow
from boost_tenancy.ops.queue_states import (
    QueueState,
    QueueStateRecord,
    SqlQueueStateStore,
)
from boost_tenancy.quotas.policy import PolicyChange
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.routing import (
    DEFAULT_ROUTING,
    DLQ_PREFIX,
    QUARANTINE_SUFFIX,
    TENANT_QUEUE_PREFIX,
    Routing,
    Topology,
    check_logical_queue,
)
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import (
    Delivery,
    ListedQueue,
    QueueStats,
    Transport,
    queue_lister,
    queue_stats_reader,
)

PURGE_PREFETCH: Final = 500
_POLL_S: Final = 0.25


class QueueAdminError(BoostTenancyError):
    """A queue cannot be drained, resumed or deleted as asked (not drained, purge unfinished)."""


def tenant_prefixes(tenant: TenantId) -> list[str]:
    """The broker queue prefixes of a tenant: its queues, and their dead letters and quarantine."""
    own = f"{TENANT_QUEUE_PREFIX}{tenant.value}."
    return [own, DLQ_PREFIX + own]


class QueueAdmin:
    """Lists, drains, resumes and deletes one tenant's queues on a connected transport.

    states is the queue state store runners read (BOOST_POLICY_STORE); list works without it,
    the other operations need it. Use the same routing as the queues' producers and runners.

    Only a queue stored per tenant (tenant.<tenant>.<queue>: routed or per_tenant topology) can
    be drained or deleted for one tenant; a shared queue holds every tenant's messages at once
    and is refused. The broker's figures come from the transport's QueueLister (capability
    queue_listing); the states from the queue state store (ops/queue_states.py), which the
    runners follow.
    """

    def __init__(
        self,
        transport: Transport,
        states: SqlQueueStateStore | None,
        *,
        routing: Routing = DEFAULT_ROUTING,
    ) -> None:
        self._transport = transport
        self._states = states
        self._routing = routing

    def _store(self) -> SqlQueueStateStore:
        if self._states is None:
            raise ConfigError(
                "no queue state store: set BOOST_POLICY_STORE to a sqlite:/// path or a "
                "postgresql:// URL (the runners read queue states there)"
            )
        return self._states

    def _broker_queue(self, tenant: TenantId, queue: str) -> str:
        """tenant.<tenant>.<queue>, refusing a shared queue."""
        topology = self._routing.topology(check_logical_queue(queue))
        if topology is Topology.SHARED:
            raise ConfigError(
                f"queue {queue!r} is shared (BOOST_ROUTING): one broker queue holds every "
                "tenant's messages, so it cannot be drained or deleted for one tenant"
            )
        return self._routing.physical(queue, tenant)

    # -- list ------------------------------------------------------------------------------------
    def list(self, tenant: TenantId | str) -> list[TenantQueueRow]:
        """Every broker queue of the tenant, with its dead letters, quarantine and state; a
        queue with a recorded state that the broker no longer has is listed too."""
        tenant_id = TenantId.parse(tenant)
        listed = {
            q.name: q for q in queue_lister(self._transport).list_queues(tenant_prefixes(tenant_id))
        }
        records = (
            {} if self._states is None else {r.queue: r for r in self._states.of_tenant(tenant_id)}
        )
        own = f"{TENANT_QUEUE_PREFIX}{tenant_id.value}."
        queues = set(records)
        for name in listed:
            base = name.removeprefix(DLQ_PREFIX).removesuffix(QUARANTINE_SUFFIX)
            if base.startswith(own):
                queues.add(base[len(own) :])
        return [self._row(tenant_id, q, listed, records.get(q)) for q in sorted(queues)]

    def _row(
        self,
        tenant: TenantId,
        queue: str,
        listed: dict[str, ListedQueue],
        record: QueueStateRecord | None,
    ) -> TenantQueueRow:
        name = f"{TENANT_QUEUE_PREFIX}{tenant.value}.{queue}"
        main = listed.get(name)
        dead = listed.get(dead_letter_queue(name))
        quarantine = listed.get(quarantine_queue(name))
        state = None
        if self._states is not None:
            state = QueueState.ACTIVE if record is None else record.state
        return TenantQueueRow(
            tenant=tenant,
            queue=queue,
            broker_queue=name,
            exists=main is not None,
            depth=0 if main is None else main.stats.waiting,
            in_flight=0 if main is None else main.stats.in_flight,
            consumers=0 if main is None else main.consumers,
            dead_lettered=0 if dead is None else dead.stats.stored,
            quarantined=0 if quarantine is None else quarantine.stats.stored,
            state=state,
        )

    def _observe(self, tenant: TenantId, broker_queue: str) -> ListedQueue | None:
        listed = queue_lister(self._transport).list_queues(
            [f"{TENANT_QUEUE_PREFIX}{tenant.value}."]
        )
        return next((q for q in listed if q.name == broker_queue), None)

    # -- drain and resume ------------------------------------------------------------------------
    def drain(self, tenant: TenantId | str, queue: str, *, actor: str) -> PolicyChange | None:
        """Record the queue draining (audited); None when it already was. Runners pick it up
        within their poll interval. A deleted queue stays deleted."""
        tenant_id = TenantId.parse(tenant)
        self._broker_queue(tenant_id, queue)
        queue_lister(self._transport)  # refused before anything is recorded
        store = self._store()
        if store.state(tenant_id, queue) is QueueState.DELETED:
            raise QueueAdminError(
                f"{tenant_id.value}'s queue {queue!r} is deleted; `queues resume` makes it active"
            )
        return store.set(tenant_id, queue, QueueState.DRAINING, actor=actor)

    def wait_drained(self, tenant: TenantId | str, queue: str, *, timeout_s: float) -> DrainReport:
        """Wait, up to timeout_s, until the broker shows the queue without a consumer and with
        nothing in flight; reports what it saw last either way."""
        tenant_id = TenantId.parse(tenant)
        broker_queue = self._broker_queue(tenant_id, queue)
        started = time.monotonic()
        while True:
            seen = self._observe(tenant_id, broker_queue)
            consumers = 0 if seen is None else seen.consumers
            in_flight = 0 if seen is None else seen.stats.in_flight
            drained = consumers == 0 and in_flight == 0
            waited = time.monotonic() - started
            if drained or waited >= timeout_s:
                return DrainReport(
                    tenant=tenant_id,
                    queue=queue,
                    broker_queue=broker_queue,
                    drained=drained,
                    consumers=consumers,
                    in_flight=in_flight,
                    depth=0 if seen is None else seen.stats.waiting,
                    waited_s=waited,
                )
            time.sleep(min(_POLL_S * 4, max(0.0, timeout_s - waited)))

    def resume(self, tenant: TenantId | str, queue: str, *, actor: str) -> PolicyChange:
        """Make a drained or deleted queue active again (audited): runners subscribe again."""
        tenant_id = TenantId.parse(tenant)
        self._broker_queue(tenant_id, queue)
        change = self._store().set(tenant_id, queue, QueueState.ACTIVE, actor=actor)
        if change is None:
            raise QueueAdminError(f"{tenant_id.value}'s queue {queue!r} is not drained")
        return change

    # -- delete ----------------------------------------------------------------------------------
    def delete(
        self,
        tenant: TenantId | str,
        queue: str,
        *,
        actor: str,
        with_dead_letters: bool = False,
        timeout_s: float = 60.0,
    ) -> DeleteReport:
        """Purge a drained queue (every message removed) and record it deleted (audited).

        Refused unless the queue's state is draining (or deleted, to finish an earlier delete)
        and the broker shows it without a consumer and with nothing in flight. with_dead_letters
        purges DLQ.<broker queue> and its quarantine queue too; they are kept otherwise.
        """
        tenant_id = TenantId.parse(tenant)
        broker_queue = self._broker_queue(tenant_id, queue)
        store = self._store()
        state = store.state(tenant_id, queue)
        if state is QueueState.ACTIVE:
            raise QueueAdminError(
                f"{tenant_id.value}'s queue {queue!r} is active: `queues drain` it first"
            )
        seen = self._observe(tenant_id, broker_queue)
        if seen is not None and (seen.consumers or seen.stats.in_flight):
            raise QueueAdminError(
                f"{tenant_id.value}'s queue {queue!r} is not drained yet: the broker shows "
                f"{seen.consumers} consumer(s) and {seen.stats.in_flight} message(s) in flight"
            )
        deadline = time.monotonic() + timeout_s
        removed = 0 if seen is None else self._purge(broker_queue, deadline)
        dead_removed: int | None = None
        quarantine_removed: int | None = None
        dead_letter_names = [dead_letter_queue(broker_queue), quarantine_queue(broker_queue)]
        if with_dead_letters:
            dead_removed = self._purge(dead_letter_names[0], deadline)
            quarantine_removed = self._purge(dead_letter_names[1], deadline)
        kept = queue_stats_reader(self._transport).queue_stats(dead_letter_names)
        store.set(tenant_id, queue, QueueState.DELETED, actor=actor)
        return DeleteReport(
            tenant=tenant_id,
            queue=queue,
            broker_queue=broker_queue,
            removed=removed,
            dead_letters_removed=dead_removed,
            quarantine_removed=quarantine_removed,
            dead_letters_kept=sum(_stored(kept.get(n)) for n in dead_letter_names),
        )

    def _purge(self, broker_queue: str, deadline: float) -> int:
        """Acknowledge every message of broker_queue until the broker counts none; how many."""
        stats = queue_stats_reader(self._transport)
        if stats.queue_stats([broker_queue]).get(broker_queue) is None:
            return 0  # asking creates no queue; subscribing would
        inbox: queue_mod.SimpleQueue[Delivery] = queue_mod.SimpleQueue()
        subscription = self._transport.subscribe(
            broker_queue, selector=None, prefetch=PURGE_PREFETCH, on_delivery=inbox.put
        )
        removed = 0
        try:
            while True:
                try:
                    delivery = inbox.get(timeout=_POLL_S)
                except queue_mod.Empty:
                    left = stats.queue_stats([broker_queue]).get(broker_queue)
                    # In flight counts this subscription's acknowledgements not written yet.
                    if _stored(left) == 0:
                        return removed
                    if time.monotonic() >= deadline:
                        raise QueueAdminError(
                            f"purge of {broker_queue!r} unfinished at the deadline: {removed} "
                            f"removed, {_stored(left)} left; run the delete again"
                        ) from None
                    continue
                if time.monotonic() >= deadline:
                    # Messages still arriving (a producer, the router) never leave the loop a
                    # quiet moment: the deadline holds between them too. This one goes back.
                    raise QueueAdminError(
                        f"purge of {broker_queue!r} unfinished at the deadline: {removed} "
                        "removed and messages still arriving; stop what sends to it (drain "
                        "stops the runners, not other producers) and run the delete again"
                    )
                self._transport.ack(delivery)
                removed += 1
        finally:
            self._transport.unsubscribe(subscription)


def _stored(stats: QueueStats | None) -> int:
    return 0 if stats is None else stats.stored


__all__ = [
    "QueueAdmin",
    "QueueAdminError",
    "tenant_prefixes",
]
