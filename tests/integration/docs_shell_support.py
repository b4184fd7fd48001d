"""What a page of the user guide takes as given, made on the broker the environment names
(tests/integration/test_docs_shell.py runs it beside the page's commands).

    python -m tests.integration.docs_shell_support quarantine cmd.document.process [--tenant T]
        quarantines one message of the queue and prints its message id: the page's ID. Without
        --tenant a message without tenantUUID on the shared queue, quarantined by the tenant
        router; with it, a message on T's own queue claiming another tenant, quarantined by T's
        runner.
    python -m tests.integration.docs_shell_support settings
        reads the environment as a runner does: its settings and the transport its broker URL
        names (not connected); exit 1 with the error when either is refused.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from boost_tenancy import HandlerContext, IncomingMessage, ProcessorRunner, TenantProcessor
from boost_tenancy.application import AppSettings, open_broker
from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.quarantine import QuarantineAdmin
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Transport

WAIT_S = 60.0
CLAIMED = "org-someone-else"
"""The tenant a message on another tenant's queue claims."""


def _untouched(queue: str) -> TenantProcessor:
    """A runner's processor of queue that never gets a message: the runner quarantines it first."""

    class Untouched(TenantProcessor):
        queues = (queue,)

        def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
            raise AssertionError(f"{message.message_id} reached the handler")

    return Untouched()


def _connected(settings: AppSettings) -> Transport:
    transport = open_broker(settings, os.environ)
    transport.connect()
    return transport


def _quarantined_id(admin: QuarantineAdmin, queue: str, tenant: str | None, marker: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for view in admin.list(queue, tenant=tenant, idle_s=1.0):
            body = view.body if isinstance(view.body, str) else view.body.decode(errors="replace")
            if marker in body:
                return view.message_id
        time.sleep(0.5)
    raise SystemExit(f"no message of {queue} was quarantined within {WAIT_S:.0f} s")


def quarantine_one(queue: str, tenant: str | None) -> str:
    """The id of a message of queue quarantined as the module's docstring says."""
    marker = uuid.uuid4().hex
    body = f'{{"marker": "{marker}"}}'
    settings = AppSettings.from_env(os.environ)
    with tempfile.TemporaryDirectory() as scratch:
        store = SQLiteErrorStore(Path(scratch) / "errors.sqlite3")
        transport = _connected(settings)
        stop: Callable[[], object]
        try:
            if tenant is None:
                transport.send(queue, WireMessage(body=body, properties={}))
                router = TenantRouter(
                    transport, [queue], error_store=store, routing=settings.routing
                )
                router.start()
                stop = router.stop
            else:
                own_queue = settings.routing.physical(queue, TenantId(tenant))
                transport.send(
                    own_queue, WireMessage(body=body, properties={TENANT_PROPERTY: CLAIMED})
                )
                runner = ProcessorRunner(
                    _untouched(queue),
                    open_broker(settings, os.environ),
                    [TenantId(tenant)],
                    error_store=store,
                    routing=settings.routing,
                    route_shared=False,
                )
                runner.start()
                stop = runner.stop
            try:
                return _quarantined_id(QuarantineAdmin(transport, store), queue, tenant, marker)
            finally:
                stop()
        finally:
            transport.close()
            store.close()


def check_settings() -> None:
    """The environment's settings and broker URL, refused as a runner would refuse them."""
    try:
        open_broker(AppSettings.from_env(os.environ), os.environ)
    except ConfigError as exc:
        raise SystemExit(f"refused: {exc}") from exc


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.docs_shell_support")
    commands = parser.add_subparsers(dest="command", required=True)
    quarantine = commands.add_parser("quarantine")
    quarantine.add_argument("queue")
    quarantine.add_argument("--tenant")
    commands.add_parser("settings")
    args = parser.parse_args()
    if args.command == "quarantine":
        print(quarantine_one(args.queue, args.tenant))
    else:
        check_settings()


if __name__ == "__main__":
    main()
