"""What the fairness gate's tests share: its decisions counted, and what it admits, in order."""

from __future__ import annotations

import queue as queue_mod
import threading
from collections import Counter

from boost_tenancy.fairness import Admitted
from boost_tenancy.tenancy import TenantId


class Events:
    """The gate's decisions, counted per (tenant, event)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, tenant: TenantId, event: str) -> None:
        with self._lock:
            self.counts[(tenant.value, event)] += 1

    def of(self, tenant: TenantId, event: str) -> int:
        with self._lock:
            return self.counts[(tenant.value, event)]


class Admissions:
    """What the gate hands to the workers, in order."""

    def __init__(self) -> None:
        self.queue: queue_mod.SimpleQueue[tuple[TenantId, Admitted]] = queue_mod.SimpleQueue()

    def __call__(self, tenant: TenantId, admitted: Admitted) -> None:
        self.queue.put((tenant, admitted))

    def next(self, timeout: float = 5.0) -> tuple[TenantId, Admitted]:
        return self.queue.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            self.queue.get(timeout=seconds)
        except queue_mod.Empty:
            return True
        return False
