"""dlq (list or re-drive a tenant's dead letters) and errors (its recorded failures)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import TENANT_HELP, Subparsers, connected, positive_int
from boost_tenancy.cli.output import (
    BODY_PREVIEW_CHARS,
    add_output_option,
    body_json,
    failure_json,
    table,
    wants_table,
)
from boost_tenancy.errors import DeadLettersNotFoundError
from boost_tenancy.ops.dead_letters import DeadLetterAdmin, DeadLetterView
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import FailureOutcome, open_error_store
from boost_tenancy.storage import redact_url
from boost_tenancy.tenancy import TenantId


def view_json(view: DeadLetterView, *, show_body: bool = False) -> str:
    """One dead letter as one line of JSON (ASCII only); its body only with show_body."""
    shown: dict[str, Any] = {
        "message_id": view.message_id,
        "tenant": view.tenant.value,
        "original_queue": view.original_queue,
        "reason": view.reason,
        "attempts": view.attempts,
        "error_type": view.error_type,
        "error": view.error,
        "recorded_failures": [failure_json(f) for f in view.failures],
    }
    if show_body:
        shown.update(body_json(view.body))
    return json.dumps(shown)


DEAD_LETTER_COLUMNS: Final = (
    ("message_id", "message id"),
    ("reason", "reason"),
    ("attempts", "attempts"),
    ("error_type", "error type"),
    ("error", "error"),
)
FAILURE_COLUMNS: Final = (
    ("at", "at"),
    ("queue", "queue"),
    ("message_id", "message id"),
    ("attempt", "attempt"),
    ("outcome", "outcome"),
    ("error_type", "error type"),
    ("error", "error"),
)


def _store_note(settings: AppSettings) -> str:
    return f"the error store {redact_url(settings.error_store_url)} (BOOST_ERROR_STORE)"


def dlq(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    store = open_error_store(settings.error_store_url)
    try:
        transport = connected(settings)
        try:
            admin = DeadLetterAdmin(transport, store, routing=settings.routing)
            if args.dlq_command == "list":
                views = admin.list(tenant, args.queue, limit=args.limit)
                if views and wants_table(args):
                    rows = [json.loads(view_json(view)) for view in views]
                    sys.stdout.write(table(rows, DEAD_LETTER_COLUMNS))
                else:
                    for view in views:
                        print(view_json(view, show_body=args.show_body))
                if not views:
                    queue = dead_letter_queue(settings.routing.physical(args.queue, tenant))
                    print(
                        f"boost-tenancy: no dead letters of tenant {tenant.value} in {queue} "
                        f"at {redact_url(settings.transport_url())}; their failures are read from "
                        f"{_store_note(settings)}",
                        file=sys.stderr,
                    )
                return 0
            try:
                ids = admin.redrive(tenant, args.queue, message_ids=args.message_id or None)
            except DeadLettersNotFoundError as exc:
                print(f"boost-tenancy: error: {exc}", file=sys.stderr)
                return 1
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
        records = store.failures(
            tenant=TenantId.parse(args.tenant),
            queue=args.queue,
            message_id=args.message_id,
            outcome=outcome,
            limit=args.limit,
        )
        rows = [
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
            for record in records
        ]
        if rows and wants_table(args):
            sys.stdout.write(table(rows, FAILURE_COLUMNS))
        else:
            for row in rows:
                print(json.dumps(row))
        if not records:
            # A store other than the runners' (another BOOST_ERROR_STORE) reports nothing too.
            print(f"boost-tenancy: no failures found in {_store_note(settings)}", file=sys.stderr)
        return 0
    finally:
        store.close()


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("dlq", help=help_of("dlq"))
    cmd.set_defaults(handler=dlq)
    dlq_sub = cmd.add_subparsers(dest="dlq_command", required=True)
    for name in ("list", "redrive"):
        action = dlq_sub.add_parser(name)
        action.add_argument("--tenant", required=True, help=TENANT_HELP)
        action.add_argument("--queue", required=True, help="the source queue (not DLQ.<queue>)")
        if name == "list":
            action.add_argument(
                "--limit", type=positive_int, default=100, help="dead letters shown (oldest first)"
            )
            action.add_argument(
                "--show-body",
                action="store_true",
                help=f"add each body (its first {BODY_PREVIEW_CHARS} characters; base64 for "
                "binary ones; JSON output only); hidden by default, bodies may hold personal data",
            )
            add_output_option(action)
        if name == "redrive":
            action.add_argument(
                "--message-id",
                action="append",
                help="only these (repeatable); an id not found moves nothing and exits 1",
            )

    cmd = sub.add_parser("errors", help=help_of("errors"))
    cmd.add_argument("--tenant", required=True, help=TENANT_HELP)
    cmd.add_argument("--queue", help="only failures of this logical queue")
    cmd.add_argument("--message-id", help="only the failures of this message")
    cmd.add_argument(
        "--outcome",
        choices=[o.value for o in FailureOutcome],
        help="only failures that ended so",
    )
    cmd.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many, newest first (100)"
    )
    add_output_option(cmd)
    cmd.set_defaults(handler=errors)
