"""Routes at send time, made by the runner at start where the broker takes them at run time.

On a broker whose transport declares send_time_routes (Artemis: an exclusive divert per tenant,
transports/artemis_management.py), each of the runner's tenants gets its messages sent to a
routed queue's shared queue stored in its own queue at once: one write instead of two, and no
backlog of another tenant to wait behind on the shared queue. The TenantRouter keeps running:
it takes what no route matches (unknown tenants, none at all) and what was stored on the shared
queue before the routes existed. Where routes cannot be made (another broker, a user without
the permission) nothing changes but the cost: the router moves every message, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from boost_tenancy.errors import TransportError
from boost_tenancy.routing import Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import SendRoute, Transport, send_route_installer

log = structlog.get_logger("boost_tenancy.ops.send_routes")


def routes_of(
    routing: Routing, queues: Sequence[str], tenants: Sequence[TenantId]
) -> list[SendRoute]:
    """A route for every tenant and routed queue: the shared queue to the tenant's queue."""
    return [
        SendRoute(queue, tenant, routing.physical(queue, tenant))
        for queue in queues
        if routing.routes(queue)
        for tenant in tenants
    ]


def install_send_routes(transport: Transport, routes: Sequence[SendRoute]) -> int | None:
    """Make routes on the connected transport's broker; the number added (0 when all were in
    place), or None when the broker takes none (logged when it refused)."""
    installer = send_route_installer(transport)
    if installer is None or not routes:
        return None
    try:
        added = installer.install_send_routes(routes)
    except TransportError as exc:
        # The router still moves every message: slower, and one write more, but nothing lost.
        log.error("send_routes_not_installed", routes=len(routes), error=str(exc))
        return None
    log.info("send_routes_installed", routes=len(routes), added=added)
    return added


__all__ = ["install_send_routes", "routes_of"]
