"""What concerns the broker's queues: park, stats, broker-routes and send-routes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from boost_tenancy.application.brokers import open_broker
from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import LIST_HELP, TENANT_HELP, Subparsers, connected, tenants, values
from boost_tenancy.cli.output import add_table_output_option, wants_json
from boost_tenancy.errors import ConfigError
from boost_tenancy.ops.broker_routes import (
    EVERY_QUEUE,
    artemis_tenant_plugin,
    check_routed_at_send,
    classic_destination_interceptors,
    classic_routing_plugin,
    shared_queues,
)
from boost_tenancy.ops.parking import ParkingSweeper
from boost_tenancy.ops.send_routes import routes_of
from boost_tenancy.ops.stats import TenantStats, broker_counts_of, broker_counts_table, stats_table
from boost_tenancy.resilience.error_store import open_error_store
from boost_tenancy.routing import TENANT_QUEUE_PREFIX, Topology
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import send_route_installer


def park(args: argparse.Namespace, settings: AppSettings) -> int:
    queues = values(args.queue)
    for queue in queues:
        topology = settings.routing.topology(queue)
        if topology is not Topology.SHARED:
            # Nothing of another tenant can wait ahead on a per-tenant queue: nothing to park.
            raise ConfigError(
                f"--queue {queue!r} is {topology.value}, stored per tenant; only shared queues "
                "park (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES)"
            )
    store = open_error_store(settings.error_store_url)
    try:
        sweeper = ParkingSweeper(
            open_broker(settings, os.environ),
            queues,
            tenants(args.active_tenant, "--active-tenant"),
            error_store=store,
        )
        code = sweeper.run()
        print(
            json.dumps(
                {
                    "parked": {t.value: n for t, n in sweeper.parked.items()},
                    "quarantined": sweeper.quarantined,
                }
            )
        )
        return code
    finally:
        store.close()


def stats(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    transport = connected(settings)
    try:
        rows = TenantStats(transport, routing=settings.routing).rows(tenant, values(args.queue))
        at_broker = broker_counts_of(transport, tenant)
    finally:
        transport.close()
    if wants_json(args):
        for row in rows:
            print(json.dumps(row.as_json()))
        if at_broker is not None:
            print(json.dumps({"tenant": tenant.value, "at_broker": [asdict(c) for c in at_broker]}))
    else:
        sys.stdout.write(stats_table(rows))
        if at_broker is not None:
            sys.stdout.write("\n" + broker_counts_table(at_broker))
    return 0


def broker_routes(args: argparse.Namespace, settings: AppSettings) -> int:
    if args.queue == [EVERY_QUEUE]:
        if args.tenant:
            raise ConfigError(
                "broker-routes --queue '*' (every queue but the shared ones) is the plugins'; "
                "--tenant routes list their queues"
            )
        shared = shared_queues(settings.routing)
        plugin = artemis_tenant_plugin if args.broker == "artemis" else classic_routing_plugin
        sys.stdout.write(plugin([EVERY_QUEUE], shared=shared))
        return 0
    queues = [check_routed_at_send(settings.routing, queue) for queue in values(args.queue)]
    if args.broker == "artemis":
        if args.tenant:
            raise ConfigError(
                "broker-routes --broker artemis routes every tenant of the queues (the project's "
                "plugin, brokers/artemis); --tenant is for Classic's own composite queues"
            )
        sys.stdout.write(artemis_tenant_plugin(queues))
    elif args.tenant:
        sys.stdout.write(classic_destination_interceptors(queues, tenants(args.tenant)))
    else:
        sys.stdout.write(classic_routing_plugin(queues))
    return 0


def send_routes(args: argparse.Namespace, settings: AppSettings) -> int:
    """The routes the broker makes at send time (the runners' diverts on Artemis), one JSON
    object each; with --add, those of the given queues and tenants are made first (before any
    runner of theirs started); with --remove, those listed are destroyed (their queues stay)."""
    queues = sorted(set(values(args.queue or [])))
    only = set(tenants(args.tenant)) if args.tenant else set()
    if args.remove and not (queues or only):
        raise ConfigError("send-routes --remove needs --queue or --tenant: it never removes all")
    if args.add and not (queues and only):
        raise ConfigError("send-routes --add needs --queue and --tenant: the routes to make")
    if args.add:
        for queue in queues:
            if not settings.routing.routes(queue):
                raise ConfigError(
                    f"queue {queue!r} is {settings.routing.topology(queue).value}, not routed "
                    "(BOOST_ROUTING): its runners do not read tenant.<tenant>.<queue> from "
                    "messages sent to it"
                )
    transport = connected(settings)
    try:
        installer = send_route_installer(transport)
        if installer is None:
            raise ConfigError(
                "this broker takes no routes at run time (send_time_routes: Artemis); on "
                "ActiveMQ Classic, routes at send time are broker configuration (broker-routes)"
            )
        if args.add:
            tenant_ids = sorted(only, key=lambda t: t.value)
            installer.install_send_routes(routes_of(settings.routing, queues, tenant_ids))
        routes = [
            route
            for route in installer.send_routes()
            if (not queues or route.source in queues) and (not only or route.tenant in only)
        ]
        if args.remove:
            installer.remove_send_routes(routes)
        by_plugin = [q for q in installer.routed_by_broker() if not queues or q in queues]
    finally:
        transport.close()
    for route in routes:
        print(
            json.dumps(
                {
                    "queue": route.source,
                    "tenant": route.tenant.value,
                    "target": route.target,
                    "by": "divert",
                    "removed": bool(args.remove),
                }
            )
        )
    # The broker's plugin routes every tenant of these: one line each, whatever --tenant says;
    # broker configuration, which --remove leaves as it is.
    for queue in by_plugin:
        print(
            json.dumps(
                {
                    "queue": queue,
                    "tenant": "*",
                    "target": f"{TENANT_QUEUE_PREFIX}<tenant>.{queue}",
                    "by": "broker plugin",
                    "removed": False,
                }
            )
        )
    return 0


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("park", help=help_of("park"))
    cmd.add_argument("--queue", action="append", required=True, help=LIST_HELP)
    cmd.add_argument(
        "--active-tenant",
        action="append",
        required=True,
        help=f"a tenant whose processor runs (its messages stay); {LIST_HELP}",
    )
    cmd.set_defaults(handler=park)

    cmd = sub.add_parser("broker-routes", help=help_of("broker-routes"))
    cmd.add_argument(
        "--queue",
        action="append",
        required=True,
        help=LIST_HELP + "; '*' alone: every queue but those BOOST_ROUTING_OVERRIDES makes "
        "shared (the plugins' recommended configuration)",
    )
    cmd.add_argument(
        "--tenant",
        action="append",
        help="route only these tenants, with Classic's own composite queues (no plugin); "
        + LIST_HELP,
    )
    cmd.add_argument(
        "--broker",
        choices=("classic", "artemis"),
        default="classic",
        help="the broker the configuration is for: classic (the <plugins> bean, default) or "
        "artemis (the <broker-plugins> element of broker.xml: brokers/artemis's TenantPlugin, "
        "which also quarantines messages without a valid tenant and applies tenant limits)",
    )
    cmd.set_defaults(handler=broker_routes)

    cmd = sub.add_parser("send-routes", help=help_of("send-routes"))
    cmd.add_argument("--queue", action="append", help=f"only these logical queues; {LIST_HELP}")
    cmd.add_argument("--tenant", action="append", help=f"only these tenants; {LIST_HELP}")
    change = cmd.add_mutually_exclusive_group()
    change.add_argument(
        "--add",
        action="store_true",
        help="make the routes of --queue for --tenant now, before any runner of theirs starts "
        "(a runner makes its own at start)",
    )
    change.add_argument(
        "--remove",
        action="store_true",
        help="destroy the routes listed (a tenant gone, a queue no longer routed); a runner "
        "started again makes its own again",
    )
    cmd.set_defaults(handler=send_routes)

    cmd = sub.add_parser("stats", help=help_of("stats"))
    cmd.add_argument("--tenant", required=True, help=TENANT_HELP)
    cmd.add_argument("--queue", action="append", required=True, help=LIST_HELP)
    add_table_output_option(cmd)
    cmd.set_defaults(handler=stats)
