"""Prometheus gauges of queue statistics (ops.stats rows), in the text exposition format the
accounting counters use: rendered from rows (queue_gauges), or served by a metrics server from
rows read in the background (QueueGauges).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.accounting import escape_label_value
from boost_tenancy.lifecycle import Periodic
from boost_tenancy.ops.stats import COUNTS, QueueRow, TenantStats
from boost_tenancy.routing import DEFAULT_ROUTING, Routing, check_logical_queue
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Transport, queue_stats_reader

log = structlog.get_logger("boost_tenancy.ops.stats_metrics")

DEFAULT_REFRESH_S: Final = 15.0
"""How often QueueGauges reads the broker unless told: a common Prometheus scrape interval."""
STALE_AFTER: Final = 3
"""Rows older than this many refresh intervals are not served: stale figures are worse than none."""

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


class QueueGauges:
    """A metrics source (MetricsSource of fairness/accounting_server.py, for AccountingServer and
    metrics_server(sources=...)): tenants' queue statistics as the gauges of queue_gauges.

    The rows are read on a daemon thread of its own, one statistics request to the broker every
    refresh_s seconds (the first at start), never on a scrape nor on a message's path; a scrape
    renders the last rows read. Rows older than STALE_AFTER times refresh_s are not served, nor is
    anything before the first read: a scrape then gets no gauge at all. A failed read is logged
    once per outage (queue_gauges_read_failed, then queue_gauges_read_recovered) and the thread
    goes on. Each pass reads up to four broker queues per tenant and queue (ops.stats).
    """

    def __init__(
        self,
        transport: Transport,
        tenants: Sequence[TenantId | str],
        queues: Sequence[str],
        *,
        routing: Routing = DEFAULT_ROUTING,
        refresh_s: float = DEFAULT_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not refresh_s > 0:
            raise ConfigError(f"QueueGauges refresh_s must be positive, got {refresh_s!r}")
        # Checked here, so a bad name stops the caller rather than every pass of the thread.
        self._tenants = tuple(TenantId.parse(tenant) for tenant in tenants)
        self._queues = tuple(check_logical_queue(queue) for queue in queues)
        self._transport = transport
        self._stats = TenantStats(transport, routing=routing)
        self._refresh_s = float(refresh_s)
        self._clock = clock
        self._last: tuple[tuple[QueueRow, ...], float] | None = None
        """The rows of the last successful read and when it ended; replaced whole, so a scrape
        on another thread reads one pass or the other, never a mix."""
        self._failing = False
        self._reader = Periodic(
            self.refresh, interval_s=self._refresh_s, name="boost-queue-gauges", at_start=True
        )

    @property
    def refresh_s(self) -> float:
        return self._refresh_s

    @property
    def stale_s(self) -> float:
        """How old the rows may be and still be served."""
        return STALE_AFTER * self._refresh_s

    def start(self) -> None:
        """Start reading; the transport must be connected (its capabilities come from the
        broker). A transport whose capabilities declare no queue_statistics raises
        QueueStatsUnavailableError, and nothing is started."""
        queue_stats_reader(self._transport)
        self._reader.start()

    def close(self) -> None:
        """Stop reading."""
        self._reader.close()

    def refresh(self) -> bool:
        """Read every (tenant, queue) row now: the thread's step, which tests call. False when
        the read failed; the rows read before are served until they are stale."""
        try:
            rows = self._stats.rows_for(self._tenants, self._queues)
        except Exception as exc:  # any failure: the gauges go on, and go stale, never stop
            if not self._failing:
                self._failing = True
                log.warning(
                    "queue_gauges_read_failed",
                    error_type=type(exc).__name__,
                    error=str(exc),
                    served_for_s=self.stale_s,
                )
            return False
        self._last = (tuple(rows), self._clock())
        if self._failing:
            self._failing = False
            log.info("queue_gauges_read_recovered")
        return True

    def rows(self) -> tuple[QueueRow, ...]:
        """The rows last read while they are fresh; none before a read or once stale."""
        last = self._last
        if last is None or self._clock() - last[1] > self.stale_s:
            return ()
        return last[0]

    def prometheus(self, *, tenant_label: bool = False) -> str:
        """The gauges of the fresh rows (queue_gauges); empty text when there are none."""
        rows = self.rows()
        return queue_gauges(rows, tenant_label=tenant_label) if rows else ""

    def __call__(self, tenant_label: bool) -> str:
        """MetricsSource: what AccountingServer adds to /metrics, with its tenant label flag."""
        return self.prometheus(tenant_label=tenant_label)


__all__ = ["DEFAULT_REFRESH_S", "GAUGES", "STALE_AFTER", "QueueGauges", "queue_gauges"]
