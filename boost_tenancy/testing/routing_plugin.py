"""The project's Classic tenant routing plugin (brokers/classic) as the in-memory broker models
it: where it stores a message, and which queues it may be configured with."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.messages import check_queue_name
from boost_tenancy.ops.broker_routes import EVERY_QUEUE, check_shared_name
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


_BROKER_PREFIXES: Final = ("ActiveMQ.", "activemq.", "BROKER.DLQ.", "EXP.")


@dataclass(frozen=True, slots=True)
class PluginQueues:
    """Which queues a Classic tenant routing plugin routes (TenantRoutingPlugin.routes)."""

    listed: frozenset[str] = frozenset()
    every: bool = False
    shared: frozenset[str] = frozenset()
    shared_prefixes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.every or bool(self.listed)

    def routes(self, queue: str) -> bool:
        if not self.every:
            return queue in self.listed
        if queue in self.shared or queue.startswith(self.shared_prefixes):
            return False
        try:
            check_logical_queue(queue)
        except BoostTenancyError:
            return False  # a toolkit namespace, a broker queue, or not a toolkit name at all
        return True


def plugin_queues(queues: Iterable[str], shared: Iterable[str] = ()) -> PluginQueues:
    """The queues a Classic tenant routing plugin may be configured with, as it checks them
    (TenantRoutingPlugin.setQueues, setShared): toolkit queue names outside its namespaces and
    ActiveMQ.*, or ["*"] alone for every such queue except those of shared (exact names, or a
    prefix ending in ".*"); a queue both listed and shared is refused."""
    for what, names in (("tenant_routed_queues", queues), ("tenant_shared_queues", shared)):
        if isinstance(names, str):
            raise ConfigError(f"{what} must be a list of queue names, not the string {names!r}")
    listed = tuple(queues)
    every = listed == (EVERY_QUEUE,)
    checked = frozenset(() if every else (_checked(q, "tenant_routed_queues") for q in listed))
    exact: set[str] = set()
    prefixes: list[str] = []
    for name in shared:
        checked_name = check_shared_name(name)
        if checked_name.endswith(".*"):
            prefixes.append(checked_name[:-1])
        else:
            exact.add(_checked(checked_name, "tenant_shared_queues"))
    if both := sorted(checked & exact):
        raise ConfigError(f"{both[0]!r} is both routed and shared: a shared queue is never routed")
    return PluginQueues(checked, every, frozenset(exact), tuple(prefixes))


def _checked(queue: str, what: str) -> str:
    checked = check_logical_queue(queue)
    if checked.startswith(_BROKER_PREFIXES):
        raise ConfigError(f"{what}: {queue!r} is reserved for the broker")
    return checked
