"""Prometheus gauges of queue statistics (ops.stats rows), in the text exposition format the
accounting counters use, for a service's own /metrics or a textfile collector.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from boost_tenancy.fairness.accounting import escape_label_value
from boost_tenancy.ops.stats import COUNTS, QueueRow

GAUGES: Final = {
    "depth": "Messages waiting on a tenant's queue, not delivered to a consumer yet.",
    "in_flight": "Messages delivered to a consumer of a tenant's queue and not acknowledged yet.",
    "scheduled": "Delayed retries the broker holds for a tenant's queue (where it counts them).",
    "dead_lettered": "Messages on a tenant's dead-letter queue (DLQ.<broker queue>).",
    "quarantined": "Messages on a tenant's quarantine queue (DLQ.<broker queue>.quarantine).",
    "parked": "Messages of a tenant parked off a shared queue (parked.<tenant>.<queue>).",
}
"""One gauge per count, named boost_tenancy_queue_<count>."""


def queue_gauges(rows: Iterable[QueueRow], *, tenant_label: bool = False) -> str:
    """Prometheus text exposition (0.0.4) of the rows' counts, labelled by logical queue.

    Without tenant_label each queue's counts are summed across the rows' tenants: a tenant label
    multiplies the series by the number of tenants, so it is an opt-in for deployments that can
    afford it (as for the accounting counters). A count the broker cannot tell (None) is left
    out, never reported as 0; a queue none of whose rows has it gets no sample.
    """
    taken = list(rows)
    lines: list[str] = []
    for name in COUNTS:
        samples = _samples(taken, name, tenant_label=tenant_label)
        metric = f"boost_tenancy_queue_{name}"
        lines.append(f"# HELP {metric} {GAUGES[name]}")
        lines.append(f"# TYPE {metric} gauge")
        lines.extend(f"{metric}{labels} {value}" for labels, value in samples)
    return "\n".join(lines) + "\n"


def _samples(rows: Sequence[QueueRow], name: str, *, tenant_label: bool) -> list[tuple[str, int]]:
    sums: dict[tuple[str, str], int] = {}
    for row in rows:
        value = row.counts()[name]
        if value is None:
            continue
        key = (row.tenant.value if tenant_label else "", row.queue)
        sums[key] = sums.get(key, 0) + value
    return [(_labels(tenant, queue), value) for (tenant, queue), value in sorted(sums.items())]


def _labels(tenant: str, queue: str) -> str:
    pairs = ([("tenant", tenant)] if tenant else []) + [("queue", queue)]
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


__all__ = ["GAUGES", "queue_gauges"]
