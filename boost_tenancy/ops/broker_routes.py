"""Routing at send time on ActiveMQ Classic: filtered composite queues in the broker's own
configuration, so each tenant's messages sent to a shared queue are stored in its queue at once.

The runner's TenantRouter moves messages after they are stored on the shared queue, in the order
they arrived: a backlog of one tenant queued ahead still delays another tenant's first messages
by the time it takes to move it (docs/fairness.md). Classic can route before storing instead: a
<compositeQueue> named after the shared queue forwards each message to the destination whose
selector it matches. With sendWhenNotMatched="true" (Classic 5.16+) a message that matches no
tenant's selector (an unknown tenant, no tenantUUID at all) is stored on the shared queue itself,
where the TenantRouter quarantines it or routes it to the default tenant, and counts it.

The queues are the ROUTED topology's own (tenant.<tenant>.<queue>), so runners, producers and
operators need no change: the broker does what the router would, before the message is stored.
Every tenant and queue must be listed; a tenant added later is routed by the TenantRouter until
the broker's configuration lists it.

The project's broker plugin (brokers/classic, TenantRoutingPlugin) routes every tenant instead,
of the queues listed or of every queue not declared shared (EVERY_QUEUE): a message of a routed
queue whose tenantUUID is a valid tenant id is stored in tenant.<tenant>.<queue> at send time,
whatever the tenant; anything else stays on the shared queue for the TenantRouter, as above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final
from xml.sax.saxutils import quoteattr

from boost_tenancy.errors import ConfigError
from boost_tenancy.routing import Routing, Topology, check_logical_queue
from boost_tenancy.selectors import TENANT_PROPERTY, tenant_selector
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.artemis_management import STOMP_LOSS_PLUGIN

_ROUTED = Routing(default=Topology.ROUTED)

ROUTING_PLUGIN_CLASS: Final = "io.boosttenancy.activemq.TenantRoutingPlugin"
"""The Classic broker plugin of brokers/classic: routes every tenant of the queues it lists."""

EVERY_QUEUE: Final = "*"
"""The plugins' queues="*": every queue with a shared queue name outside the toolkit's
namespaces, except those declared shared, as the toolkit's default routing (routed) says."""


ARTEMIS_PLUGIN_CLASS: Final = "io.boosttenancy.artemis.TenantPlugin"
"""The Artemis broker plugin of brokers/artemis: routes every tenant of the queues it lists,
quarantines what names no valid tenant and applies each tenant's limits at the broker."""


def check_routed_at_send(routing: Routing, queue: str) -> str:
    """queue, if its messages may be routed at send time: a valid logical queue the routing does
    not make shared (its consumers, a Java service's selector among them, read the shared queue
    itself, which routing at send time would leave empty); else a ConfigError saying so."""
    if routing.topology(check_logical_queue(queue)) is Topology.SHARED:
        raise ConfigError(
            f"queue {queue!r} is shared (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES): its consumers "
            "read the shared queue itself, which routing at send time would leave empty"
        )
    return queue


def shared_queues(routing: Routing) -> tuple[str, ...]:
    """The queues routing declares shared (BOOST_ROUTING_OVERRIDES), which routing every queue
    at send time (EVERY_QUEUE) must leave alone; a ConfigError when every queue is shared."""
    if routing.default is Topology.SHARED:
        raise ConfigError(
            "every queue is shared (BOOST_ROUTING=shared): routing every queue at send time "
            "would leave the shared queues their consumers read empty"
        )
    return tuple(sorted(q for q, t in routing.overrides.items() if t is Topology.SHARED))


def check_shared_name(name: str) -> str:
    """name, if the plugins' shared property takes it: a logical queue, or a prefix
    ending in ".*" checked as a queue it would cover ("tenant.acme.*" covers tenant queues and
    is refused); else a ConfigError."""
    if name.endswith(".*"):
        check_logical_queue(name[:-1] + "x")
        return name
    return check_logical_queue(name)


def _plugin_queues(queues: Iterable[str], shared: Iterable[str]) -> tuple[list[str], list[str]]:
    """A plugin's queues (logical queues, or [EVERY_QUEUE]) and shared names, checked."""
    listed = list(queues)
    every = listed == [EVERY_QUEUE]
    queue_names = [EVERY_QUEUE] if every else sorted({check_logical_queue(q) for q in listed})
    if not queue_names:
        raise ConfigError("broker routes: no queue given")
    shared_names = sorted({check_shared_name(q) for q in shared})
    if shared_names and not every:
        raise ConfigError("broker routes: shared queues are for routing every queue (*) only")
    return queue_names, shared_names


def classic_routing_plugin(
    queues: Iterable[str], *, shared: Iterable[str] = (), indent: str = "    "
) -> str:
    """The Spring <bean> element, for the <plugins> element of a Classic <broker>, that makes
    the project's TenantRoutingPlugin route every tenant's messages of queues to
    tenant.<tenant>.<queue> at send time; queues [EVERY_QUEUE] routes every queue but shared.
    Queue names are checked as logical queues; none is a ConfigError."""
    queue_names, shared_names = _plugin_queues(queues, shared)
    which = "every queue but the shared ones" if queue_names == [EVERY_QUEUE] else "these queues"
    shared_line = (
        f'{indent}<property name="shared" value={quoteattr(",".join(shared_names))}/>\n'
        if shared_names
        else ""
    )
    return (
        f"<!-- Printed by boost-tenancy broker-routes: every tenant's messages of {which} to "
        f"tenant.<tenant>.<queue>; no valid {TENANT_PROPERTY}, or none, stays on the shared queue "
        "for the TenantRouter. List it before <authorizationPlugin>. -->\n"
        f'<bean xmlns="http://www.springframework.org/schema/beans" '
        f"class={quoteattr(ROUTING_PLUGIN_CLASS)}>\n"
        f'{indent}<property name="queues" value={quoteattr(",".join(queue_names))}/>\n'
        f"{shared_line}"
        "</bean>\n"
    )


def artemis_tenant_plugin(
    queues: Iterable[str],
    properties: Mapping[str, str] | None = None,
    *,
    shared: Iterable[str] = (),
    indent: str = "    ",
) -> str:
    """The <broker-plugins> element, for broker.xml's <core>, that makes the project's Artemis
    TenantPlugin route every tenant's messages of queues to tenant.<tenant>.<queue> at send
    time (queues [EVERY_QUEUE]: every queue but shared), with its other properties
    (max-message-bytes, messages-per-second, bytes-per-second, burst-seconds,
    max-queued-messages, policy-store-url, ...). Queue names are checked as logical queues; none
    is a ConfigError."""
    queue_names, shared_names = _plugin_queues(queues, shared)
    values = {"queues": ",".join(queue_names), **(properties or {})}
    if shared_names:
        values["shared"] = ",".join(shared_names)
    lines = "".join(
        f"{indent * 2}<property key={quoteattr(key)} value={quoteattr(value)}/>\n"
        for key, value in values.items()
    )
    return (
        f"<!-- Printed by boost-tenancy broker-routes: every tenant's messages of these queues to "
        f"tenant.<tenant>.<queue>; no valid {TENANT_PROPERTY}, or none, to "
        "DLQ.<queue>.quarantine; every unacknowledged message of a lost STOMP connection back "
        "to its queue. The jar of brokers/artemis goes in the broker's lib/. -->\n"
        "<broker-plugins>\n"
        f"{_stomp_loss_element(indent)}"
        f"{indent}<broker-plugin class-name={quoteattr(ARTEMIS_PLUGIN_CLASS)}>\n"
        f"{lines}"
        f"{indent}</broker-plugin>\n"
        "</broker-plugins>\n"
    )


def artemis_stomp_loss_plugin(*, indent: str = "    ") -> str:
    """The <broker-plugins> element, for broker.xml's <core>, of a broker that routes nothing at
    send time: the StompLossPlugin alone, which every Artemis the toolkit's STOMP consumers use
    should run (artemis_tenant_plugin's element has it too)."""
    return (
        "<!-- Every unacknowledged message of a lost STOMP connection back to its queue. The jar "
        "of brokers/artemis goes in the broker's lib/. -->\n"
        f"<broker-plugins>\n{_stomp_loss_element(indent)}</broker-plugins>\n"
    )


def _stomp_loss_element(indent: str) -> str:
    return f"{indent}<broker-plugin class-name={quoteattr(STOMP_LOSS_PLUGIN)}/>\n"


def classic_destination_interceptors(
    queues: Iterable[str], tenants: Iterable[TenantId | str], *, indent: str = "    "
) -> str:
    """The <destinationInterceptors> element routing every tenant's messages of every shared
    queue to tenant.<tenant>.<queue> at send time, for a Classic <broker> element.

    Queue names are checked as logical queues and tenants parsed (the selector quotes nothing a
    valid tenant id could break out of); an empty list of either is a ConfigError.
    """
    queue_names = sorted({check_logical_queue(q) for q in queues})
    tenant_ids = sorted({TenantId.parse(t) for t in tenants}, key=lambda t: t.value)
    if not queue_names:
        raise ConfigError("broker routes: no queue given")
    if not tenant_ids:
        raise ConfigError("broker routes: no tenant given")
    pad = indent * 4
    lines = [
        "<destinationInterceptors>",
        f"{indent}<virtualDestinationInterceptor>",
        f"{indent * 2}<virtualDestinations>",
    ]
    lines.append(
        f"{indent * 3}<!-- Printed by boost-tenancy broker-routes: each listed tenant's messages "
        f"to tenant.<tenant>.<queue>; any other {TENANT_PROPERTY}, or none, stays on the shared "
        "queue for the TenantRouter -->"
    )
    for queue in queue_names:
        lines.append(
            f'{indent * 3}<compositeQueue name={quoteattr(queue)} forwardOnly="true" '
            'sendWhenNotMatched="true">'
        )
        lines.append(f"{pad}<forwardTo>")
        for tenant in tenant_ids:
            selector = tenant_selector(tenant).render()
            target = _ROUTED.physical(queue, tenant)
            lines.append(
                f"{pad}{indent}<filteredDestination selector={quoteattr(selector)} "
                f"queue={quoteattr(target)}/>"
            )
        lines.append(f"{pad}</forwardTo>")
        lines.append(f"{indent * 3}</compositeQueue>")
    lines += [
        f"{indent * 2}</virtualDestinations>",
        f"{indent}</virtualDestinationInterceptor>",
        "</destinationInterceptors>",
    ]
    return "\n".join(lines) + "\n"
