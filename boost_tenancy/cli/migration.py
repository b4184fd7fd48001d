"""migrate (what moving from the shared topology to per-tenant queues leaves to move by hand:
a tenant's dead letters of the shared queue; docs/migration.md)."""

from __future__ import annotations

import argparse
import json

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import LIST_HELP, Subparsers, connected, tenants
from boost_tenancy.ops.migration import migrate_dead_letters


def migrate(args: argparse.Namespace, settings: AppSettings) -> int:
    chosen = tenants(args.tenant)
    transport = connected(settings)
    try:
        for tenant in chosen:
            moved = migrate_dead_letters(transport, args.queue, tenant, routing=settings.routing)
            print(json.dumps({"tenant": tenant.value, "queue": args.queue, "moved": moved}))
    finally:
        transport.close()
    return 0


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("migrate", help=help_of("migrate"))
    actions = cmd.add_subparsers(dest="migrate_command", required=True)
    dead = actions.add_parser(
        "dead-letters",
        help="move tenants' dead letters of DLQ.<queue> to DLQ.tenant.<tenant>.<queue>",
    )
    dead.add_argument("--queue", required=True, help="the logical queue")
    dead.add_argument("--tenant", action="append", required=True, help=LIST_HELP)
    dead.set_defaults(handler=migrate)
