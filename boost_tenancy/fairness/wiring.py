"""What an entry point adds to a runner for fairness: the middleware (opt-in), the accounting
observer and the metrics server, built from AppSettings (config.py) and closed together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from boost_tenancy.fairness.accounting import Accounting, AccountingServer, Event
from boost_tenancy.fairness.middleware import (
    FairnessMiddleware,
    FairnessSettings,
    build_fairness,
)
from boost_tenancy.processing.middleware import Middleware
from boost_tenancy.processing.settle import DispatchObserver
from boost_tenancy.tenancy import TenantId


@dataclass(frozen=True, slots=True, kw_only=True)
class FairnessWiring:
    """Middleware and observers for ProcessorRunner, and the metrics server to start with it."""

    middleware: tuple[Middleware, ...]
    observers: tuple[DispatchObserver, ...]
    accounting: Accounting
    server: AccountingServer | None
    limits: FairnessMiddleware | None = None

    @classmethod
    def build(
        cls,
        fairness: FairnessSettings | None,
        *,
        metrics_port: int = 0,
        metrics_tenant_label: bool = False,
    ) -> FairnessWiring:
        """Limits when fairness is given, accounting always, a metrics server on a port."""
        accounting = Accounting()
        limits: FairnessMiddleware | None = None
        if fairness is not None:

            def on_event(tenant: TenantId, event: str) -> None:
                # The middleware names only accounting's events; record() checks at run time.
                accounting.record(tenant, cast(Event, event))

            limits = build_fairness(fairness, on_event=on_event)
        server = (
            AccountingServer(accounting, port=metrics_port, tenant_label=metrics_tenant_label)
            if metrics_port
            else None
        )
        return cls(
            middleware=() if limits is None else (limits,),
            observers=(accounting,),
            accounting=accounting,
            server=server,
            limits=limits,
        )

    def close(self) -> None:
        """Stop the metrics server and close what the limits hold (tier store, Redis)."""
        if self.server is not None:
            self.server.stop()
        if self.limits is not None:
            self.limits.close()
