"""queues: a tenant's queues with the broker's counts; drain, resume and delete one of them."""

from __future__ import annotations

import argparse
import json
import sys

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import ACTOR_HELP, TENANT_HELP, Subparsers, acting, connected
from boost_tenancy.cli.output import add_table_output_option, wants_json
from boost_tenancy.ops.queue_admin import QueueAdmin
from boost_tenancy.ops.queue_reports import rows_table
from boost_tenancy.ops.queue_states import SqlQueueStateStore, open_queue_state_store
from boost_tenancy.quotas.policy import PolicyChange
from boost_tenancy.tenancy import TenantId

EXIT_NOT_DRAINED = 1
"""`queues drain` ended at its timeout with a consumer or messages in flight still on the queue."""


def _change(change: PolicyChange | None) -> dict[str, object] | None:
    if change is None:
        return None
    return {
        "at": change.at.isoformat(),
        "actor": change.actor,
        "old": change.old,
        "new": change.new,
    }


def queues_command(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    states: SqlQueueStateStore | None = None
    if settings.policy_store_url:
        states = open_queue_state_store(settings.policy_store_url)
    transport = connected(settings)
    try:
        admin = QueueAdmin(transport, states, routing=settings.routing)
        command = args.queues_command
        if command == "list":
            rows = admin.list(tenant)
            if wants_json(args):
                for row in rows:
                    print(json.dumps(row.as_json()))
            else:
                sys.stdout.write(rows_table(rows))
            return 0
        if command == "drain":
            change = admin.drain(tenant, args.queue, actor=acting(args.actor, settings))
            report = admin.wait_drained(tenant, args.queue, timeout_s=args.timeout)
            print(json.dumps({"state": "draining", "changed": _change(change), **report.as_json()}))
            return 0 if report.drained else EXIT_NOT_DRAINED
        if command == "resume":
            change = admin.resume(tenant, args.queue, actor=acting(args.actor, settings))
            print(
                json.dumps(
                    {
                        "tenant": tenant.value,
                        "queue": args.queue,
                        "state": "active",
                        "changed": _change(change),
                    }
                )
            )
            return 0
        report_json = admin.delete(
            tenant,
            args.queue,
            actor=acting(args.actor, settings),
            with_dead_letters=args.with_dead_letters,
            timeout_s=args.timeout,
        ).as_json()
        print(json.dumps(report_json))
        return 0
    finally:
        transport.close()
        if states is not None:
            states.close()


def register(sub: Subparsers) -> None:
    queues = sub.add_parser("queues", help=help_of("queues"))
    queues.set_defaults(handler=queues_command)
    queues_sub = queues.add_subparsers(dest="queues_command", required=True)

    listing = queues_sub.add_parser(
        "list",
        help="every broker queue of the tenant: depth, in flight, consumers, dead-lettered, "
        "quarantined and state",
    )
    listing.add_argument("--tenant", required=True, help=TENANT_HELP)
    add_table_output_option(listing)

    drain = queues_sub.add_parser(
        "drain",
        help="record the queue draining: runners take nothing new from it and unsubscribe once "
        "what they took is settled; waits until the broker shows no consumer and nothing in "
        f"flight (exit {EXIT_NOT_DRAINED} at the timeout)",
    )
    resume = queues_sub.add_parser(
        "resume", help="make a drained or deleted queue active again: runners subscribe again"
    )
    delete = queues_sub.add_parser(
        "delete",
        help="purge a drained queue (every message removed) and record it deleted; its "
        "dead-letter and quarantine queues are kept unless --with-dead-letters",
    )
    for cmd in (drain, resume, delete):
        cmd.add_argument("--tenant", required=True, help=TENANT_HELP)
        cmd.add_argument("--queue", required=True, help="the logical queue, as services name it")
        cmd.add_argument("--actor", help=ACTOR_HELP)
    drain.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the drain (60)"
    )
    delete.add_argument(
        "--timeout", type=float, default=60.0, help="seconds the purge may take (60)"
    )
    delete.add_argument(
        "--with-dead-letters",
        action="store_true",
        help="purge DLQ.<broker queue> and its quarantine queue too",
    )
