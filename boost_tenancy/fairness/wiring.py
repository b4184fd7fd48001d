"""What an entry point adds to a runner for fairness: the gate (on unless BOOST_FAIRNESS=off),
the accounting observer and the metrics server, built from AppSettings (config.py) and closed
together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from boost_tenancy.fairness.accounting import Accounting, AccountingServer, Event
from boost_tenancy.fairness.gate import FairnessGate
from boost_tenancy.fairness.settings import FairnessSettings, build_fairness
from boost_tenancy.processing.settle import DispatchObserver
from boost_tenancy.quotas.guard import PublishGuard
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.tenancy import TenantId


@dataclass(frozen=True, slots=True, kw_only=True)
class FairnessWiring:
    """The gate and observers for ProcessorRunner, and the metrics server to start with it."""

    observers: tuple[DispatchObserver, ...]
    accounting: Accounting
    server: AccountingServer | None
    gate: FairnessGate | None = None

    @classmethod
    def build(
        cls,
        fairness: FairnessSettings | None,
        *,
        workers: int,
        metrics_port: int = 0,
        metrics_tenant_label: bool = False,
    ) -> FairnessWiring:
        """The gate when fairness is given, accounting always, a metrics server on a port."""
        accounting = Accounting()
        gate: FairnessGate | None = None
        if fairness is not None:

            def on_event(tenant: TenantId, event: str) -> None:
                # The gate names only accounting's events; record() checks at run time.
                accounting.record(tenant, cast(Event, event))

            gate = build_fairness(fairness, workers=workers, on_event=on_event)
        server = (
            AccountingServer(accounting, port=metrics_port, tenant_label=metrics_tenant_label)
            if metrics_port
            else None
        )
        return cls(observers=(accounting,), accounting=accounting, server=server, gate=gate)

    def publish_guard(self, limits: PublishLimits) -> PublishGuard:
        """A PublishGuard with limits as every tenant's default, its refusals counted in the
        accounting (publish_refused_rate, publish_refused_size)."""

        def on_refused(tenant: TenantId, queue: str, reason: str) -> None:
            self.accounting.record(tenant, cast(Event, f"publish_refused_{reason}"))

        return PublishGuard(limits, on_refused=on_refused)

    def close(self) -> None:
        """Stop the metrics server and close what the gate holds (tier store, Redis)."""
        if self.server is not None:
            self.server.stop()
        if self.gate is not None:
            self.gate.close()
