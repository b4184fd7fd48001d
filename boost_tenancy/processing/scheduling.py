"""Fair scheduling inside one process: a work queue that takes turns between tenants.

Deficit round robin over the tenants with pending items: no tenant's backlog holds every worker.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Mapping
from typing import Final, Generic, TypeVar

from boost_tenancy.errors import ConfigError
from boost_tenancy.tenancy import TenantId

T = TypeVar("T")

Weights = Mapping[TenantId, int] | Mapping[str, int] | Mapping[TenantId | str, int]
"""Items per turn by tenant; keys are parsed, so configuration may give plain strings."""

DEFAULT_WEIGHT = 1
"""Items a tenant may take per turn unless weighted otherwise."""


def parse_weights(weights: Weights) -> dict[TenantId, int]:
    """Validate tenant weights (configuration): valid tenant ids, integers of at least 1."""
    parsed: dict[TenantId, int] = {}
    for raw, weight in weights.items():
        tenant = TenantId.parse(raw)
        # bool is an int subclass; True as a weight is a configuration slip, not a weight of 1.
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ConfigError(
                f"weight of tenant {tenant.value!r} must be an integer, got {type(weight).__name__}"
            )
        if weight < 1:
            raise ConfigError(f"weight of tenant {tenant.value!r} must be at least 1, got {weight}")
        parsed[tenant] = weight
    return parsed


# Wake-up tokens: one _ITEM per pending item; _CLOSE once closed, passed from getter to getter.
_ITEM: Final = True
_CLOSE: Final = False


class _Lane(Generic[T]):
    """One tenant's pending items and what is left of its current turn."""

    __slots__ = ("credit", "items", "quantum", "tenant")

    def __init__(self, tenant: TenantId, quantum: int) -> None:
        self.tenant = tenant
        self.quantum = quantum
        self.credit = 0
        self.items: deque[T] = deque()


class FairWorkQueue(Generic[T]):
    """A thread-safe work queue that hands items out by deficit round robin over tenants.

    Every tenant with pending items is in a ring; the tenant at the head takes up to its weight
    (default 1) items, then goes to the back. Items cost one unit each, so a tenant never gets
    more than its weight in a row while another tenant has items pending, and under backlog the
    shares follow the weights. Within a tenant items stay in FIFO order. put and get are O(1).

    close() wakes every waiting get, and from then on get returns None; put is still accepted
    (the receiving thread must never fail), and what is left is the owner's to deal with.

    Waiting happens on a queue.SimpleQueue of tokens, one per pending item, rather than on a
    threading.Condition: its blocking get is in C, and with producers and consumers on separate
    threads a Condition cost about 18 times a plain SimpleQueue per message, against 5 to 9 times
    this way (see benchmarks/bench_scheduler.py). A get takes a token, then the fair turn's item
    under a plain lock; a token is put only after its item, so a taken token has an item behind it.
    """

    def __init__(self, weights: Weights | None = None) -> None:
        self._weights = parse_weights(weights or {})
        # Keyed by the id's text: str caches its hash, TenantId's dataclass __hash__ is Python code.
        self._lanes: dict[str, _Lane[T]] = {}
        self._ring: deque[_Lane[T]] = deque()
        self._lock = threading.Lock()
        self._tokens: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._size = 0
        self._closed = False

    def weight(self, tenant: TenantId) -> int:
        """Items tenant may take per turn."""
        return self._weights.get(tenant, DEFAULT_WEIGHT)

    def put(self, tenant: TenantId, item: T) -> None:
        """Queue item for tenant; never blocks (the bound is the broker's prefetch)."""
        with self._lock:
            lane = self._lanes.get(tenant.value)
            if lane is None:
                lane = _Lane(tenant, self._weights.get(tenant, DEFAULT_WEIGHT))
                self._lanes[tenant.value] = lane
                self._ring.append(lane)
            lane.items.append(item)
            self._size += 1
        self._tokens.put(_ITEM)

    def get(self, timeout: float) -> tuple[TenantId, T] | None:
        """The next item by fair turn, waiting up to timeout seconds; None on timeout or close."""
        if self._closed:
            return None
        try:
            token = self._tokens.get(timeout=timeout) if timeout > 0 else self._tokens.get(False)
        except queue.Empty:
            return None
        if token is _CLOSE:
            self._tokens.put(_CLOSE)  # passed on, so every other waiting get wakes as well
            return None
        with self._lock:
            if self._closed:
                return None
            lane = self._ring[0]
            if lane.credit == 0:
                lane.credit = lane.quantum
            item = lane.items.popleft()
            lane.credit -= 1
            self._size -= 1
            if not lane.items:
                # An idle tenant leaves the ring and forgets its turn: it cannot bank credit.
                self._ring.popleft()
                del self._lanes[lane.tenant.value]
            elif lane.credit == 0:
                self._ring.rotate(-1)
            return lane.tenant, item

    def close(self) -> None:
        """Wake every waiting get; get returns None from now on."""
        with self._lock:
            self._closed = True
        self._tokens.put(_CLOSE)

    @property
    def closed(self) -> bool:
        return self._closed

    def pending(self, tenant: TenantId) -> int:
        """Items of tenant waiting to be taken."""
        with self._lock:
            lane = self._lanes.get(tenant.value)
            return 0 if lane is None else len(lane.items)

    def __len__(self) -> int:
        return self._size


__all__ = ["DEFAULT_WEIGHT", "FairWorkQueue", "Weights", "parse_weights"]
