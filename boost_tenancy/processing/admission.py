"""What stands between a subscription and the workers: an admission gate (the fairness gate is
the one the toolkit has, boost_tenancy.fairness.gate) and what it hands over."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Delivery


class Admitted(NamedTuple):
    """A delivery let through the gate: the slot it holds (None when exempt or expired), and
    whether it waited longer than the gate holds a delivery (the runner defers it)."""

    delivery: Delivery
    slot: str | None
    expired: bool = False


class AdmissionGate(Protocol):
    """Holds a tenant's deliveries while it is over its limits and hands the rest to the
    workers, each tenant's in order."""

    def start(
        self, admit: Callable[[TenantId, Admitted], None], *, logical: Callable[[str], str] = str
    ) -> None:
        """Start admitting; admit(tenant, admitted) hands a delivery to the workers. logical maps
        a broker queue to its logical queue."""
        ...

    def offer(self, tenant: TenantId, delivery: Delivery) -> None:
        """Queue a delivery for admission; never blocks (called on the receiving thread)."""
        ...

    def done(self, tenant: TenantId, slot: str | None) -> None:
        """The delivery holding slot is settled (or skipped): give the slot back."""
        ...

    def defer_delay_ms(self) -> int:
        """The delay of an expired delivery's deferral."""
        ...
