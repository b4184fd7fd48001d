"""Moving from the shared topology to per-tenant queues: a tenant's dead letters of the shared
queue's DLQ.<queue> moved to its own DLQ.tenant.<tenant>.<queue>, in broker transactions, so
that `dlq list|redrive` of the routed queue finds them (docs/migration.md has the procedure).
"""

from __future__ import annotations

import queue as queue_mod

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.ops.moving import MOVE_BATCH, copy_of, take_batch, unsubscribe_all
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.routing import Routing, Topology, check_logical_queue
from boost_tenancy.selectors import TENANT_PROPERTY, tenant_selector
from boost_tenancy.tenancy import TenantId, belongs_to
from boost_tenancy.transports.base import Delivery, Outgoing, PartlyForwardedError, Transport

log = structlog.get_logger("boost_tenancy.ops.migration")


def migrate_dead_letters(
    transport: Transport,
    queue: str,
    tenant: TenantId | str,
    *,
    routing: Routing,
    idle_s: float = 2.0,
    prefetch: int = MOVE_BATCH,
) -> int:
    """Move tenant's dead letters from DLQ.<queue> to DLQ.<tenant's queue>, unchanged, until
    none arrives for idle_s; returns how many moved.

    Read through the tenant's selector and the tenant guard: another tenant's dead letter is left
    unacknowledged and returns to DLQ.<queue>. Each batch is one broker transaction where the
    transport has atomic_forward (else each copy is confirmed before its original is
    acknowledged: a crash duplicates a dead letter, never loses one). A re-drive from the new
    queue sends to the tenant's queue, derived from the dead-letter queue's name as always.
    """
    tenant_id = TenantId.parse(tenant)
    if routing.topology(check_logical_queue(queue)) is Topology.SHARED:
        raise ConfigError(
            f"queue {queue!r} is shared in this routing: its dead letters already are where "
            "dlq finds them (set BOOST_ROUTING to the topology migrated to)"
        )
    if prefetch < 1:
        raise ConfigError(f"prefetch must be at least 1, got {prefetch}")
    source = dead_letter_queue(queue)
    target = dead_letter_queue(routing.physical(queue, tenant_id))
    inbox: queue_mod.SimpleQueue[Delivery] = queue_mod.SimpleQueue()
    subscription = transport.subscribe(
        source,
        selector=transport.capabilities.guard_selector(tenant_selector(tenant_id)),
        prefetch=prefetch,
        on_delivery=inbox.put,
    )
    moved = 0
    try:
        while batch := take_batch(inbox, idle_s):
            mine = [d for d in batch if belongs_to(d.properties.get(TENANT_PROPERTY), tenant_id)]
            if len(mine) < len(batch):
                log.warning(
                    "dead_letters_of_another_tenant_left",
                    queue=source,
                    tenant=tenant_id.value,
                    count=len(batch) - len(mine),
                )
            if mine:
                # One whose connection is gone is skipped: the broker redelivers it to this
                # subscription after the reconnection, and it is moved (and counted) then.
                try:
                    done = transport.send_then_ack_many(
                        [(d, [Outgoing(target, copy_of(d))]) for d in mine]
                    )
                except PartlyForwardedError as exc:  # forwarding not atomic: some moved
                    moved += len(exc.forwarded)
                    log.info("dead_letters_migrated", source=source, target=target, count=moved)
                    raise
                moved += len(done)
    finally:
        unsubscribe_all(transport, [subscription])
    log.info("dead_letters_migrated", source=source, target=target, count=moved)
    return moved


__all__ = ["migrate_dead_letters"]
