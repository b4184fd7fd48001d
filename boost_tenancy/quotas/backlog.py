"""BrokerBacklog: how many messages a tenant's queue holds, read from the broker's own statistics
in the background, for the backlog quota (PublishLimits.max_queued_messages).

A publish never waits for the broker: queued() answers from what the last read found. The
queues read are those a publish asked about in the last idle_s; all of them are read in one
request every refresh_s. A tenant over its quota is refused until a read shows its queue below
it again, so the quota can be passed by what one process publishes within refresh_s (and by
every process of the deployment in that time): it bounds a backlog, not an exact count.

Fails open: with no figure (the broker gives no statistics, the queue is shared and so holds
every tenant's messages, or reads failed for longer than stale_s) there is no refusal, and the
failure is logged, since a quota that stalls every publish when the statistics go away would be
worse than one that lapses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, Protocol

import structlog

from boost_tenancy.lifecycle import Periodic
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Transport, queue_stats_reader

log = structlog.get_logger("boost_tenancy.quotas")

DEFAULT_REFRESH_S: Final = 5.0


class BacklogSource(Protocol):
    """Messages stored in tenant's queue of a logical queue as last read; None: unknown.
    refresh_s: how often it is read again (a refused publisher's Retry-After)."""

    @property
    def refresh_s(self) -> float: ...

    def queued(self, tenant: TenantId, queue: str) -> int | None: ...


class BrokerBacklog:
    """A BacklogSource reading the transport's queue_stats on a daemon thread."""

    def __init__(
        self,
        transport: Transport,
        routing: Routing,
        *,
        refresh_s: float = DEFAULT_REFRESH_S,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not refresh_s > 0:
            raise ValueError(f"refresh_s must be positive, got {refresh_s!r}")
        self._transport = transport
        self._routing = routing
        self._refresh_s = float(refresh_s)
        self._idle_s = float(idle_s)
        self._stale_s = 3 * self._refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._asked: dict[str, float] = {}
        """Physical queue -> when a publish last asked about it."""
        self._depth: dict[str, tuple[int, float]] = {}
        """Physical queue -> (messages stored, when read)."""
        self._reader = Periodic(self.refresh, interval_s=self._refresh_s, name="boost-backlog")
        self._told = False

    @property
    def refresh_s(self) -> float:
        return self._refresh_s

    def queued(self, tenant: TenantId, queue: str) -> int | None:
        if self._routing.topology(queue) is Topology.SHARED:
            return None  # a shared queue holds every tenant's messages: no figure of one
        physical = self._routing.physical(queue, tenant)
        now = self._clock()
        with self._lock:
            self._asked[physical] = now
            found = self._depth.get(physical)
        if found is None or now - found[1] > self._stale_s:
            return None
        return found[0]

    def start(self) -> None:
        self._reader.start()

    def close(self) -> None:
        self._reader.close()

    def refresh(self) -> None:
        """Read the depth of every queue asked about lately (the thread's step; tests call it)."""
        now = self._clock()
        with self._lock:
            for name in [q for q, at in self._asked.items() if now - at > self._idle_s]:
                del self._asked[name]
                self._depth.pop(name, None)
            names = sorted(self._asked)
        if not names:
            return
        try:
            reader = queue_stats_reader(self._transport)
        except Exception as exc:  # the broker gives none: the quota cannot be enforced
            if not self._told:
                self._told = True
                log.error("backlog_quota_not_enforced", reason=str(exc))
            return
        try:
            stats = reader.queue_stats(names)
        except Exception as exc:  # keep the last figures until they are stale, then fail open
            log.warning("backlog_read_failed", error_type=type(exc).__name__, error=str(exc))
            return
        read_at = self._clock()
        with self._lock:
            for name in names:
                found = stats.get(name)
                self._depth[name] = (0 if found is None else found.stored, read_at)


__all__ = ["DEFAULT_REFRESH_S", "BacklogSource", "BrokerBacklog"]
