"""HandlingMetrics: how long handlers take and how many run now, per queue (and, opt-in, per
tenant), as a middleware that renders Prometheus text.

Measured around the handler and every middleware inside it (the retry decision included), from
the moment the dispatcher hands the message over to the outcome: the time a tenant's message
holds a worker. The queue label is the logical queue; the tenant label multiplies the series by
the number of tenants, so it follows the accounting's opt-in (BOOST_METRICS_TENANT_LABEL).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from boost_tenancy.fairness.accounting import escape_label_value
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.middleware import Handler, Middleware
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.processor import HandlerContext

DEFAULT_BUCKETS: Final = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Upper bounds in seconds (Prometheus' default buckets, with 1 ms and 30 s added)."""


class _Series:
    __slots__ = ("buckets", "count", "in_flight", "total")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size  # per bucket, not cumulative; summed when rendered
        self.count = 0
        self.total = 0.0
        self.in_flight = 0


class HandlingMetrics(Middleware):
    """A consume Middleware, "handling_metrics": put it first (outermost) in
    ProcessorRunner(middleware=...)."""

    name = "handling_metrics"

    def __init__(
        self,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[0] <= 0 or len(set(bounds)) != len(bounds):
            raise ValueError(f"buckets must be distinct positive numbers, got {list(buckets)!r}")
        self._bounds = tuple(bounds)
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}

    def consume(self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler) -> Outcome:
        key = (ctx.tenant.value, ctx.queue)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series(len(self._bounds) + 1)
            series.in_flight += 1
        started = self._clock()
        try:
            return call_next(message, ctx)
        finally:
            elapsed = self._clock() - started
            slot = bisect.bisect_left(self._bounds, elapsed)
            with self._lock:
                series.in_flight -= 1
                series.count += 1
                series.total += elapsed
                series.buckets[slot] += 1

    def in_flight(self, tenant: str, queue: str) -> int:
        """Handlers of tenant's queue running now."""
        with self._lock:
            series = self._series.get((tenant, queue))
            return 0 if series is None else series.in_flight

    def prometheus(self, *, tenant_label: bool = False) -> str:
        """boost_tenancy_handling_seconds (histogram) and boost_tenancy_in_flight (gauge)."""
        rows: dict[tuple[str, str], tuple[list[int], int, float, int]] = {}
        with self._lock:
            for (tenant, queue), s in self._series.items():
                key = (tenant if tenant_label else "", queue)
                buckets, count, total, running = rows.get(key, ([0] * len(s.buckets), 0, 0.0, 0))
                merged = [a + b for a, b in zip(buckets, s.buckets, strict=True)]
                rows[key] = (merged, count + s.count, total + s.total, running + s.in_flight)
        name = "boost_tenancy_handling_seconds"
        lines = [
            f"# HELP {name} Time from the dispatcher handing a message over to its outcome "
            "(handler and middleware), by logical queue.",
            f"# TYPE {name} histogram",
        ]
        for (tenant, queue), (buckets, count, total, _) in sorted(rows.items()):
            cumulative = 0
            for bound, n in zip((*self._bounds, float("inf")), buckets, strict=True):
                cumulative += n
                le = "+Inf" if bound == float("inf") else f"{bound:g}"
                lines.append(f"{name}_bucket{_labels(tenant, queue, le=le)} {cumulative}")
            lines.append(f"{name}_sum{_labels(tenant, queue)} {total:.6f}")
            lines.append(f"{name}_count{_labels(tenant, queue)} {count}")
        gauge = "boost_tenancy_in_flight"
        lines += [
            f"# HELP {gauge} Messages being handled now, by logical queue.",
            f"# TYPE {gauge} gauge",
        ]
        lines.extend(
            f"{gauge}{_labels(tenant, queue)} {running}"
            for (tenant, queue), (_, _, _, running) in sorted(rows.items())
        )
        return "\n".join(lines) + "\n"


def _labels(tenant: str, queue: str, **extra: str) -> str:
    pairs = ([("tenant", tenant)] if tenant else []) + [("queue", queue), *extra.items()]
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


__all__ = ["DEFAULT_BUCKETS", "HandlingMetrics"]
