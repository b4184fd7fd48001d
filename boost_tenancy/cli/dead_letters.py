"""dlq (list or re-drive a tenant's dead letters) and errors (its recorded failures)."""

from __future__ import annotations

import argparse
import json
import sys

from boost_tenancy.cli.common import Subparsers, connected
from boost_tenancy.config import AppSettings
from boost_tenancy.ops.dead_letters import DeadLetterAdmin, DeadLetterView
from boost_tenancy.resilience.error_store import FailureOutcome, open_error_store
from boost_tenancy.tenancy import TenantId


def _view_json(view: DeadLetterView) -> str:
    return json.dumps(
        {
            "message_id": view.message_id,
            "tenant": view.tenant.value,
            "original_queue": view.original_queue,
            "reason": view.reason,
            "attempts": view.attempts,
            "error_type": view.error_type,
            "error": view.error,
            "recorded_failures": [
                {
                    "attempt": f.attempt,
                    "outcome": f.outcome.value,
                    "error_type": f.error_type,
                    "error": f.error_text,
                    "at": f.occurred_at.isoformat(),
                }
                for f in view.failures
            ],
        }
    )


def dlq(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    store = open_error_store(settings.error_store_url)
    try:
        transport = connected(settings)
        try:
            admin = DeadLetterAdmin(transport, store, routing=settings.routing)
            if args.dlq_command == "list":
                for view in admin.list(tenant, args.queue):
                    print(_view_json(view))
                return 0
            ids = admin.redrive(tenant, args.queue, message_ids=args.message_id or None)
            # A re-drive moves at most one batch; say what is left so nobody assumes it was all.
            remaining = admin.count(tenant, args.queue)
        finally:
            transport.close()
    finally:
        store.close()
    print(json.dumps({"redriven": ids, "count": len(ids), "remaining": remaining}))
    if remaining and not args.message_id:
        print(
            f"boost-tenancy: {remaining} dead letter(s) remain; run dlq redrive again",
            file=sys.stderr,
        )
    return 0


def errors(args: argparse.Namespace, settings: AppSettings) -> int:
    store = open_error_store(settings.error_store_url)
    try:
        outcome = FailureOutcome(args.outcome) if args.outcome else None
        for record in store.failures(
            tenant=TenantId.parse(args.tenant),
            queue=args.queue,
            message_id=args.message_id,
            outcome=outcome,
            limit=args.limit,
        ):
            print(
                json.dumps(
                    {
                        "tenant": record.tenant.value if record.tenant else None,
                        "queue": record.queue,
                        "message_id": record.message_id,
                        "attempt": record.attempt,
                        "outcome": record.outcome.value,
                        "error_type": record.error_type,
                        "error": record.error_text,
                        "trace": record.trace,
                        "at": record.occurred_at.isoformat(),
                    }
                )
            )
        return 0
    finally:
        store.close()


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("dlq", help="list or re-drive a tenant's dead letters")
    cmd.set_defaults(handler=dlq)
    dlq_sub = cmd.add_subparsers(dest="dlq_command", required=True)
    for name in ("list", "redrive"):
        action = dlq_sub.add_parser(name)
        action.add_argument("--tenant", required=True)
        action.add_argument("--queue", required=True, help="the source queue (not DLQ.<queue>)")
        if name == "redrive":
            action.add_argument("--message-id", action="append", help="only these (repeatable)")

    cmd = sub.add_parser("errors", help="list a tenant's recorded failures")
    cmd.add_argument("--tenant", required=True)
    cmd.add_argument("--queue")
    cmd.add_argument("--message-id")
    cmd.add_argument("--outcome", choices=[o.value for o in FailureOutcome])
    cmd.add_argument("--limit", type=int, default=100)
    cmd.set_defaults(handler=errors)
