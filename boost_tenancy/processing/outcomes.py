"""The outcomes a delivery can end in: one value per decision, carried out by the dispatcher.

Middleware and the handler's wrapper return one of these; nothing is done on the broker until
the dispatcher carries it out (processing/settle.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from boost_tenancy.frozen import fast_init
from boost_tenancy.resilience.dead_letter import DeadLetterReason
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.transports.base import Outgoing


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """Handled: send what the handler published, then acknowledge."""

    outputs: tuple[Outgoing, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Failed, may succeed later: record, then redeliver after delay_ms as the next attempt."""

    error: ErrorInfo
    delay_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """Cannot be handled: record, then move to the dead-letter queue."""

    error: ErrorInfo
    reason: DeadLetterReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Defer:
    """Not now (a fairness limit): redeliver after delay_ms without counting an attempt."""

    delay_ms: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantine:
    """A message of a tenant other than its subscription's (by property or body): never handled,
    recorded and moved to the quarantine queue."""

    error: ErrorInfo
    claimed: str | None
    """The tenant the message claims, as received (may be missing or invalid)."""


Outcome = Ack | Retry | DeadLetter | Defer | Quarantine


__all__ = ["Ack", "DeadLetter", "Defer", "Outcome", "Quarantine", "Retry"]
