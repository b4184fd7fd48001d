"""Per-tenant accounting of every delivery's fate, so nothing a fairness limit does is silent:
counters per tenant, read as a tenant's own JSON view or as Prometheus text."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Final, Literal, get_args

import structlog

from boost_tenancy.tenancy import TenantId

log = structlog.get_logger("boost_tenancy.fairness.accounting")

UNKNOWN_TENANT: Final = "_unknown"
"""How a message with no valid tenant is reported; never a valid TenantId, so never a collision."""

OUTCOMES: Final = (
    "processed",
    "deferred",
    "retried",
    "dead_lettered",
    "quarantined",
    "stale",
    "unsettled",
)
"""Dispatcher outcomes (DispatchObserver.on_outcome), one per delivery handled."""

HOLD_REASONS: Final = ("rate", "concurrency")
"""Why the fairness gate held a tenant's next delivery."""

PUBLISH_REFUSALS: Final = ("rate", "size", "backlog")
"""Why a tenant's publish was refused (quotas.PublishGuard)."""

Event = Literal[
    "admitted",
    "held_rate",
    "held_concurrency",
    "expired",
    "publish_refused_rate",
    "publish_refused_size",
    "publish_refused_backlog",
]
"""What the fairness gate and the publishing limits (quotas/) record; the dispatcher does not
see these."""

EVENTS: Final[tuple[Event, ...]] = get_args(Event)

# One slot per counter, in this order, in each tenant's list.
_SLOTS: Final = (*OUTCOMES, *EVENTS)
_INDEX: Final = {name: index for index, name in enumerate(_SLOTS)}
_OUTCOME_INDEX: Final = {name: _INDEX[name] for name in OUTCOMES}

_HELP: Final = {
    "processed": "handled and acknowledged",
    "deferred": "held at the fairness gate past its hold time and re-sent, no attempt counted",
    "retried": "failed attempts scheduled for another attempt",
    "dead_lettered": "moved to the dead-letter queue",
    "quarantined": "tenancy violations moved to the quarantine queue",
    "stale": "skipped because their connection was gone (the broker redelivers them)",
    "unsettled": "left unacknowledged after the broker refused even their raw dead letter",
}


class Accounting:
    """Thread-safe per-tenant counters; a DispatchObserver, and record() for the middleware.
    AccountingServer (accounting_server.py) serves them.

    Definitions (a tenant's snapshot; each counter counts deliveries, not distinct messages):

    - processed: handled and acknowledged (the dispatcher's processed outcome).
    - retried: failed attempts that were scheduled for another attempt.
    - dead_lettered: messages moved to DLQ.<queue> (permanent, undecodable or out of attempts).
    - failed: retried + dead_lettered, derived when read; failed handling attempts.
    - deferred: the dispatcher's deferred outcome, and only that: deliveries re-sent without an
      attempt counted. The fairness gate defers only a delivery held past its hold time
      (`expired` counts those decisions); a tenant over its limit is held, not re-sent.
    - admitted: deliveries the fairness gate let through to the workers.
    - held_rate, held_concurrency: times the gate held a tenant's next delivery back, by the
      limit that held it (once per delivery and reason, however long it waits).
    - quarantined: tenancy violations, under the tenant the message claimed when that is a valid
      id, else under None, reported as "_unknown".
    - publish_refused_rate, publish_refused_size: publishes refused by the tenant's publishing
      limits (quotas/): over its messages/s or bytes/s, or a message over its maximum size.
    - stale: deliveries skipped because their connection was gone; the broker redelivers them.
    - unsettled: deliveries left unacknowledged because the broker refused even their raw dead
      letter (docs/resilience.md); they come back when the connection ends.

    processed + dead_lettered + quarantined is the number of messages that reached an end.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[TenantId | None, list[int]] = {}

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        """DispatchObserver: count one outcome; never raises."""
        index = _OUTCOME_INDEX.get(outcome)
        if index is None:
            # The observer must not raise; an outcome added to the dispatcher later is logged
            # rather than dropped without a trace.
            log.warning("accounting_unknown_outcome", outcome=outcome, queue=queue)
            return
        self._add(tenant, index, 1)

    def record(self, tenant: TenantId | None, event: Event, n: int = 1) -> None:
        """Count n fairness gate events (EVENTS)."""
        if event not in EVENTS:
            raise ValueError(f"unknown accounting event {event!r}; expected one of {EVENTS}")
        if n < 0:
            raise ValueError(f"an event count cannot be negative, got {n}")
        self._add(tenant, _INDEX[event], n)

    def _add(self, tenant: TenantId | None, index: int, n: int) -> None:
        with self._lock:
            counts = self._counts.get(tenant)
            if counts is None:
                counts = self._counts[tenant] = [0] * len(_SLOTS)
            counts[index] += n

    # -- reading ---------------------------------------------------------------------------------
    def snapshot(self, tenant: TenantId | str | None) -> dict[str, int]:
        """One tenant's counters, JSON-ready; zeros for a tenant never seen."""
        key = None if tenant is None else TenantId.parse(tenant)
        with self._lock:
            counts = list(self._counts.get(key, ()))
        return _view(counts or [0] * len(_SLOTS))

    def snapshot_all(self) -> dict[str, dict[str, int]]:
        """Every tenant seen, keyed by tenant id ("_unknown" for None), sorted."""
        with self._lock:
            copied = [(_label(t), list(c)) for t, c in self._counts.items()]
        return {label: _view(counts) for label, counts in sorted(copied)}

    def prometheus(self, *, tenant_label: bool = False) -> str:
        """Prometheus text exposition (0.0.4) of the counters.

        Without tenant_label every series is summed across tenants: a tenant label multiplies
        the series by the number of tenants, so it is an opt-in for deployments that can afford it.
        """
        with self._lock:
            rows = sorted((_label(t), list(c)) for t, c in self._counts.items())
        if not tenant_label:
            totals = [sum(column) for column in zip(*(c for _, c in rows), strict=True)]
            rows = [("", totals or [0] * len(_SLOTS))]
        lines: list[str] = []
        _family(
            lines,
            "boost_tenancy_messages_total",
            "Deliveries by outcome: " + "; ".join(f"{k} = {v}" for k, v in _HELP.items()) + ".",
            (
                (_labels(tenant, outcome=outcome), counts[_INDEX[outcome]])
                for outcome in OUTCOMES
                for tenant, counts in rows
            ),
        )
        _family(
            lines,
            "boost_tenancy_admitted_total",
            "Deliveries the fairness gate let through to the workers.",
            ((_labels(tenant), counts[_INDEX["admitted"]]) for tenant, counts in rows),
        )
        _family(
            lines,
            "boost_tenancy_held_total",
            "Times the fairness gate held a tenant's next delivery back, by the limit that held it "
            "(held unacknowledged, not re-sent).",
            (
                (_labels(tenant, reason=reason), counts[_INDEX[f"held_{reason}"]])
                for reason in HOLD_REASONS
                for tenant, counts in rows
            ),
        )
        _family(
            lines,
            "boost_tenancy_publish_refused_total",
            "Publishes refused by a tenant's publishing limits, by the limit: rate (messages/s or "
            "bytes/s), size (maximum message size) or backlog (the tenant's queue at its quota); "
            "nothing of them was sent.",
            (
                (_labels(tenant, reason=reason), counts[_INDEX[f"publish_refused_{reason}"]])
                for reason in PUBLISH_REFUSALS
                for tenant, counts in rows
            ),
        )
        return "\n".join(lines) + "\n"


def _label(tenant: TenantId | None) -> str:
    return UNKNOWN_TENANT if tenant is None else tenant.value


def _view(counts: list[int]) -> dict[str, int]:
    def get(name: str) -> int:
        return counts[_INDEX[name]]

    return {
        "admitted": get("admitted"),
        "deferred": get("deferred"),
        "held_rate": get("held_rate"),
        "held_concurrency": get("held_concurrency"),
        "expired": get("expired"),
        "processed": get("processed"),
        "failed": get("retried") + get("dead_lettered"),
        "retried": get("retried"),
        "dead_lettered": get("dead_lettered"),
        "quarantined": get("quarantined"),
        "stale": get("stale"),
        "unsettled": get("unsettled"),
        "publish_refused_rate": get("publish_refused_rate"),
        "publish_refused_size": get("publish_refused_size"),
        "publish_refused_backlog": get("publish_refused_backlog"),
    }


def escape_label_value(value: str) -> str:
    """Escape a label value for the text exposition format: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(tenant: str, **labels: str) -> str:
    """The {...} part; tenant "" means no tenant label."""
    pairs = ([("tenant", tenant)] if tenant else []) + list(labels.items())
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


def _family(
    lines: list[str], name: str, help_text: str, samples: Iterable[tuple[str, int]]
) -> None:
    # HELP text escapes only backslash and newline (the exposition format's rule for HELP).
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    lines.append(f"# HELP {name} {escaped}")
    lines.append(f"# TYPE {name} counter")
    lines.extend(f"{name}{labels} {value}" for labels, value in samples)


__all__ = [
    "EVENTS",
    "HOLD_REASONS",
    "OUTCOMES",
    "UNKNOWN_TENANT",
    "Accounting",
    "Event",
    "escape_label_value",
]
