"""quarantine (list a queue's quarantined messages, re-drive chosen ones to the tenant an
operator assigns them to)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import Subparsers, acting, connected, positive_int
from boost_tenancy.cli.output import (
    BODY_PREVIEW_CHARS,
    add_output_option,
    body_json,
    failure_json,
    table,
    wants_table,
)
from boost_tenancy.ops.quarantine import QuarantineAdmin, QuarantinedView
from boost_tenancy.resilience.error_store import open_error_store
from boost_tenancy.storage import redact_url
from boost_tenancy.tenancy import TenantId

QUARANTINE_COLUMNS: Final = (
    ("message_id", "message id"),
    ("cause", "cause"),
    ("tenant_property", "tenantUUID"),
    ("error", "error"),
    ("quarantined_at", "quarantined at"),
)
SHOWN_CHARS: Final = 4_096
"""The most of a body (characters of text, bytes otherwise) or of a tenantUUID property that
list prints."""


def _bounded(text: str) -> tuple[str, bool]:
    return (text[:SHOWN_CHARS], True) if len(text) > SHOWN_CHARS else (text, False)


def view_json(view: QuarantinedView, *, show_body: bool) -> str:
    """One line of JSON: ASCII only (json.dumps escapes the rest), so a hostile tenantUUID or
    body cannot reach the terminal as control sequences."""
    tenant_property, cut = (None, False)
    if view.tenant_property is not None:
        tenant_property, cut = _bounded(view.tenant_property)
    shown: dict[str, Any] = {
        "message_id": view.message_id,
        "quarantine_queue": view.quarantine_queue,
        "cause": view.cause.value,
        "tenant_property": tenant_property,
        "tenant_property_truncated": cut,
        "error_type": view.error_type,
        "error": view.error,
        "quarantined_at": None if view.quarantined_at is None else view.quarantined_at.isoformat(),
        "recorded_failures": [failure_json(f, with_tenant=True) for f in view.failures],
    }
    if show_body:
        shown.update(body_json(view.body))
    return json.dumps(shown, ensure_ascii=True)


def quarantine(args: argparse.Namespace, settings: AppSettings) -> int:
    store = open_error_store(settings.error_store_url)
    try:
        transport = connected(settings)
        try:
            admin = QuarantineAdmin(transport, store, routing=settings.routing)
            if args.quarantine_command == "list":
                views = admin.list(args.queue, tenant=args.tenant, limit=args.limit)
                if views and wants_table(args):
                    rows = [json.loads(view_json(view, show_body=False)) for view in views]
                    sys.stdout.write(table(rows, QUARANTINE_COLUMNS))
                else:
                    for view in views:
                        print(view_json(view, show_body=args.show_body))
                if not views:
                    print(
                        "boost-tenancy: no quarantined messages in "
                        f"{admin.quarantine_of(args.queue, args.tenant)} at "
                        f"{redact_url(settings.transport_url())}",
                        file=sys.stderr,
                    )
                if len(views) == args.limit:
                    print(
                        f"boost-tenancy: showed the first {args.limit}; more may wait (--limit)",
                        file=sys.stderr,
                    )
                return 0
            tenant = TenantId.parse(args.tenant)
            ids = admin.redrive(
                args.queue,
                tenant=tenant,
                message_ids=args.message_id,
                actor=acting(args.actor, settings),
                from_tenant=args.from_tenant,
                force=args.force,
            )
        finally:
            transport.close()
    finally:
        store.close()
    print(
        json.dumps(
            {
                "redriven": ids,
                "count": len(ids),
                "tenant": tenant.value,
                "queue": settings.routing.physical(args.queue, tenant),
            }
        )
    )
    return 0


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("quarantine", help=help_of("quarantine"))
    cmd.set_defaults(handler=quarantine)
    actions = cmd.add_subparsers(dest="quarantine_command", required=True)
    listing = actions.add_parser("list", help="show them; they stay quarantined")
    listing.add_argument("--queue", required=True, help="the logical queue")
    listing.add_argument(
        "--tenant", help="this tenant's queue's quarantine (default: the shared queue's)"
    )
    listing.add_argument("--limit", type=positive_int, default=100, help="at most this many (100)")
    add_output_option(listing)
    listing.add_argument(
        "--show-body",
        action="store_true",
        help=f"the bodies too, at most {BODY_PREVIEW_CHARS} characters each (bytes as base64)",
    )
    redrive = actions.add_parser(
        "redrive", help="assign messages to a tenant: stamped and sent to its queue"
    )
    redrive.add_argument("--queue", required=True, help="the logical queue")
    redrive.add_argument(
        "--message-id", action="append", required=True, help="one to re-drive (repeatable)"
    )
    redrive.add_argument("--tenant", required=True, help="the tenant they are assigned to")
    redrive.add_argument(
        "--from-tenant",
        help="read this tenant's queue's quarantine (default: the shared queue's)",
    )
    redrive.add_argument(
        "--force",
        action="store_true",
        help="also assign messages whose tenantUUID names another valid tenant",
    )
    redrive.add_argument("--actor", help="who re-drives (default: BOOST_ACTOR, else the user)")
