"""The project's Classic tenant routing plugin (brokers/classic) as the in-memory broker models
it: where it stores a message, and which queues it may be configured with."""

from __future__ import annotations

from collections.abc import Iterable

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.messages import check_queue_name
from boost_tenancy.routing import TENANT_QUEUE_PREFIX, check_logical_queue
from boost_tenancy.tenancy import TenantId


def plugin_target(queue: str, tenant: object) -> str | None:
    """Where the Classic tenant routing plugin stores a message of queue whose tenantUUID is
    tenant: tenant.<tenant>.<queue> for a valid tenant id and a resulting name of at most 200
    characters, else None (TenantRoutingPlugin.target)."""
    try:
        return check_queue_name(f"{TENANT_QUEUE_PREFIX}{TenantId.parse(tenant).value}.{queue}")
    except BoostTenancyError:
        return None


def plugin_queues(queues: Iterable[str]) -> frozenset[str]:
    """The queues a Classic tenant routing plugin may be configured with, as it checks them
    (TenantRoutingPlugin.setQueues): toolkit queue names outside its namespaces and ActiveMQ.*."""
    if isinstance(queues, str):
        raise ConfigError(
            f"tenant_routed_queues must be a list of queue names, not the string {queues!r}"
        )
    checked = frozenset(check_logical_queue(q) for q in queues)
    if reserved := sorted(q for q in checked if q.startswith("ActiveMQ.")):
        raise ConfigError(f"tenant_routed_queues: {reserved[0]!r} is reserved for the broker")
    return checked
