"""Routing at send time on ActiveMQ Artemis: one exclusive divert per tenant on the shared
address, created at run time through the broker's management address.

A message a producer sends to the shared address `<queue>` that matches a tenant's divert
(`tenantUUID = '<t>'`) is stored once, in `tenant.<t>.<queue>`, and never on the shared queue;
one that matches none (an unknown tenant, no tenantUUID at all) is stored on the shared queue,
where the runners' TenantRouter quarantines it or routes it to the default tenant, and counts it.
That is Classic's composite queue with sendWhenNotMatched (ops/broker_routes.py), made by the
runner for its own tenants instead of written into the broker's configuration.

Why diverts and not filtered queues on the shared address: Artemis gives an ANYCAST message to
exactly one of the address's queues whose filter matches, round robin (BindingsImpl.getNextBinding),
so the shared queue itself, which has no filter, would take a share of every tenant's messages;
exclusive bindings are tried before that routing (BindingsImpl.route, routeToExclusiveBindings),
and a message one of them takes reaches no queue of the address.

What Artemis does, read from its source (apache/activemq-artemis; this module is checked against
an in-memory model of it, testing/memory.py, not against a running Artemis):
- A management request and its reply are artemis_requests.py's. The body must arrive as text:
  over STOMP, a SEND without content-length. An overload is picked by the operation's name and
  the number of parameters, booleans as JSON booleans (ManagementServiceImpl.invokeOperation).
- createDivert on a name some binding (queue or divert) already has does nothing and still
  answers success (ActiveMQServerImpl.deployDivert): divert names here never collide with a
  queue name (`boost.divert.` prefix), and existing diverts are listed first (getDivertNames).
- A divert whose forwarding address has no queue drops what it diverts, and Artemis runs each
  request on its own: the queues are asked for first (createQueue with ignoreIfExists), and the
  diverts only once every queue was made (install).
- The diverted copy is a new message with _AMQ_ORIG_ADDRESS, _AMQ_ORIG_QUEUE (the divert's
  name) and _AMQ_ORIG_MESSAGE_ID; its properties and body are the original's.
- Diverts made through management are stored in the broker's journal and survive a restart.
- The user needs the `manage` permission on activemq.management (and `send` there); without it
  the request is refused and no reply comes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, TypeVar

from boost_tenancy.errors import ConfigError
from boost_tenancy.routing import check_logical_queue, tenant_queue_of
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.transports.artemis_requests import (
    ManagementError,
    Operation,
    Runs,
)
from boost_tenancy.transports.base import BrokerCount, SendRoute

DIVERT_PREFIX: Final = "boost.divert."
"""Divert names: the target queue's name under this prefix, which no queue of the toolkit has."""
PLUGIN_RESOURCE: Final = "boost.tenant-plugin"
"""The management resource of the project's Artemis plugin: counters() gives its counts."""
PLUGIN_DIVERT_PREFIX: Final = "boost.tenant-routing."
"""The divert the project's Artemis plugin (brokers/artemis) makes for each shared queue it
routes, then the queue's name: where it is, the broker routes every tenant of that queue itself."""
STOMP_LOSS_PLUGIN: Final = "io.boosttenancy.artemis.StompLossPlugin"
"""The plugin of brokers/artemis that gives every unacknowledged message of a lost STOMP
connection back to its queue; Artemis 2.44 alone may keep some of them from every consumer until
it restarts (docs/interop.md)."""


def divert_name(route: SendRoute) -> str:
    return DIVERT_PREFIX + route.target


def list_diverts() -> Operation:
    return Operation("getDivertNames")


def create_queue(queue: str) -> Operation:
    """A durable ANYCAST queue named as its address; nothing happens where it exists."""
    config = {
        "name": queue,
        "address": queue,
        "routing-type": "ANYCAST",
        "durable": True,
        "auto-create-address": True,
    }
    return Operation("createQueue", (json.dumps(config), True))


def create_divert(route: SendRoute) -> Operation:
    """The exclusive divert of route's tenant from the shared address to its queue."""
    config = {
        "name": divert_name(route),
        "address": route.source,
        "forwarding-address": route.target,
        "exclusive": True,
        "filter-string": tenant_selector(route.tenant).render(),
        "routing-type": "ANYCAST",
    }
    return Operation("createDivert", (json.dumps(config),))


def destroy_divert(route: SendRoute) -> Operation:
    return Operation("destroyDivert", (divert_name(route),))


def routes_named(names: Iterable[str]) -> list[SendRoute]:
    """The routes of the toolkit's own diverts among the broker's divert names, sorted; any other
    divert is left out."""
    routes = []
    for name in sorted(names):
        target = name.removeprefix(DIVERT_PREFIX)
        split = tenant_queue_of(target) if name.startswith(DIVERT_PREFIX) else None
        if split is None:
            continue
        tenant, queue = split
        route = SendRoute(queue, tenant, target)
        try:
            check_logical_queue(queue)
        except ConfigError:
            continue  # tenant.t.DLQ.x and the like: not a name this toolkit gives a divert
        if divert_name(route) == name:
            routes.append(route)
    return routes


def queue_operations(routes: Sequence[SendRoute], *, made: Collection[str] = ()) -> list[Operation]:
    """Every queue the routes need, shared and tenant, made where missing, but those in made: a
    divert on an address that does not exist is silently not made, and one whose target has no
    queue drops what it diverts. Asked every time, also for diverts already there (a target an
    operator deleted is made again)."""
    queues = [route.source for route in routes] + [route.target for route in routes]
    return [create_queue(queue) for queue in dict.fromkeys(queues) if queue not in made]


def divert_operations(routes: Sequence[SendRoute], existing: Iterable[str]) -> list[Operation]:
    """The diverts of routes that the broker does not list yet. To be asked only once every
    queue of queue_operations exists: Artemis runs each request on its own, so a divert sent
    with a queue that failed would be made all the same, and drop its tenant's messages."""
    have = set(existing)
    return [create_divert(route) for route in routes if divert_name(route) not in have]


def install(session: Runs, routes: Sequence[SendRoute]) -> int:
    """Make routes on the broker in steps, each only once the one before succeeded: the shared
    queues, then (for those the broker plugin does not route) the tenant queues, then the missing
    diverts, then a listing that proves them (createDivert answers success where it made
    nothing: a name some binding has, an address that does not exist).
    Returns how many diverts were added; ManagementError names any that is not there."""
    existing = divert_names(session.run([list_diverts()])[0])
    # A shared queue the broker plugin routes needs no divert per tenant: the broker stores
    # every tenant's message in its queue already, and makes the queue on first use.
    by_plugin = plugin_routed(existing)
    routes = [route for route in routes if route.source not in by_plugin]
    if not routes:
        return 0
    # The shared queues first. A plugin routing every queue (queues="*") makes its divert as a
    # queue's address is made, and each tenant's queue as its first message comes: the listing
    # after says which the broker now routes itself, and those need nothing more. (Making their
    # tenant queues here too cost a runner of 1,000 tenants 0.5 s at each start.)
    shared = list(dict.fromkeys(route.source for route in routes))
    session.run([create_queue(queue) for queue in shared])
    existing = divert_names(session.run([list_diverts()])[0])
    by_plugin = plugin_routed(existing)
    routes = [route for route in routes if route.source not in by_plugin]
    if not routes:
        return 0
    session.run(queue_operations(routes, made=shared))
    added = divert_operations(routes, existing)
    if not added:
        return 0
    session.run(added)
    present = set(divert_names(session.run([list_diverts()])[0]))
    missing = [divert_name(route) for route in routes if divert_name(route) not in present]
    if missing:
        raise ManagementError(
            f"Artemis answered success but has no divert {', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        )
    return len(added)


def plugin_routed(divert_names: Iterable[str]) -> set[str]:
    """The shared queues the project's broker plugin routes, read off the broker's diverts."""
    return {
        name.removeprefix(PLUGIN_DIVERT_PREFIX)
        for name in divert_names
        if name.startswith(PLUGIN_DIVERT_PREFIX)
    }


def plugin_counts(session: Runs) -> list[BrokerCount] | None:
    """What the broker's tenant plugin counted; None where no plugin runs there."""
    try:
        (result,) = session.run([Operation("counters", resource=PLUGIN_RESOURCE)])
    except ManagementError as exc:
        if "AMQ229067" in str(exc):  # Cannot find resource: no plugin on this broker
            return None
        raise
    try:
        rows = json.loads(str(result))
        return [
            BrokerCount(
                str(row["event"]),
                str(row["tenant"]),
                str(row["queue"]),
                str(row["reason"]),
                int(row["count"]),
            )
            for row in rows
        ]
    except (ValueError, TypeError, KeyError) as exc:
        raise ManagementError(f"the tenant plugin's counters are unreadable: {result!r}") from exc


def broker_plugins(session: Runs) -> list[str]:
    """The class names of the plugins the broker runs (its brokerPluginClassNames)."""
    (result,) = session.run([Operation("getBrokerPluginClassNames")])
    if not isinstance(result, list) or not all(isinstance(n, str) for n in result):
        raise ManagementError(f"Artemis listed its plugins as {result!r}, not a list of names")
    return list(result)


def listed(session: Runs) -> list[SendRoute]:
    """The routes the broker's diverts make, of the toolkit's own naming."""
    return routes_named(divert_names(session.run([list_diverts()])[0]))


def remove(session: Runs, routes: Sequence[SendRoute]) -> int:
    """Destroy the diverts of routes the broker has (a tenant gone, a queue no longer routed);
    their queues stay, with what they hold. Returns how many were destroyed."""
    present = {divert_name(route) for route in listed(session)}
    ops = [destroy_divert(route) for route in routes if divert_name(route) in present]
    session.run(ops)
    return len(ops)


T = TypeVar("T")


class ManagedRoutes:
    """The SendRouteInstaller of a transport to Artemis: install, listed and remove, each run in
    a management session the transport opens (management_session, which refuses where its
    capabilities do not declare send_time_routes). An empty list of routes asks nothing."""

    def management_session(self, work: Callable[[Runs], T]) -> T:
        """Run work with a management session on this transport's broker, then end the
        session."""
        raise NotImplementedError

    def install_send_routes(self, routes: Sequence[SendRoute]) -> int:
        return self.management_session(lambda session: install(session, routes)) if routes else 0

    def send_routes(self) -> list[SendRoute]:
        return self.management_session(listed)

    def remove_send_routes(self, routes: Sequence[SendRoute]) -> int:
        return self.management_session(lambda session: remove(session, routes)) if routes else 0

    def routed_by_broker(self) -> list[str]:
        return self.management_session(
            lambda session: sorted(plugin_routed(divert_names(session.run([list_diverts()])[0])))
        )

    def broker_counts(self) -> list[BrokerCount] | None:
        """What the broker's tenant plugin counted; None where no plugin runs there."""
        return self.management_session(plugin_counts)

    def broker_plugins(self) -> list[str]:
        """The class names of the plugins the broker runs (BrokerPluginLister)."""
        return self.management_session(broker_plugins)


def divert_names(result: object) -> list[str]:
    """getDivertNames's result: a list of names."""
    if not isinstance(result, list) or not all(isinstance(n, str) for n in result):
        raise ManagementError(f"Artemis listed diverts as {result!r}, not a list of names")
    return list(result)


__all__ = [
    "DIVERT_PREFIX",
    "PLUGIN_DIVERT_PREFIX",
    "PLUGIN_RESOURCE",
    "STOMP_LOSS_PLUGIN",
    "ManagedRoutes",
    "ManagementError",
    "Operation",
    "create_divert",
    "create_queue",
    "destroy_divert",
    "divert_name",
    "divert_names",
    "divert_operations",
    "install",
    "list_diverts",
    "listed",
    "plugin_counts",
    "plugin_routed",
    "queue_operations",
    "remove",
    "routes_named",
]
