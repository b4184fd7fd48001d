"""Per-tenant request budgets of the IntegrationsServer: requests in flight at once and requests
per minute, so one tenant's clients cannot take every worker thread or every database query
(seed 004's query-cost guard). Over either, a request is answered 429 with Retry-After before any
work is done.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from boost_tenancy import TenantId
from boost_tenancy.envvars import env_int
from boost_tenancy.fairness import RatePolicy, TokenBucketLimiter

DEFAULT_IN_FLIGHT: Final = 8
DEFAULT_PER_MINUTE: Final = 600
IN_FLIGHT_RETRY_S: Final = 1.0
"""What a refusal for requests in flight tells the client to wait: one request's time, roughly."""

Refusal = Literal["in_flight", "per_minute"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestBudgets:
    """A tenant's requests in flight at once and per minute; 0 means unlimited."""

    in_flight: int = DEFAULT_IN_FLIGHT
    per_minute: int = DEFAULT_PER_MINUTE

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RequestBudgets:
        """BOOST_HTTP_TENANT_IN_FLIGHT and BOOST_HTTP_TENANT_REQUESTS_PER_MIN; a negative or
        non-numeric value stops start-up naming the variable."""
        return cls(
            in_flight=env_int(env, "BOOST_HTTP_TENANT_IN_FLIGHT", DEFAULT_IN_FLIGHT, minimum=0),
            per_minute=env_int(
                env, "BOOST_HTTP_TENANT_REQUESTS_PER_MIN", DEFAULT_PER_MINUTE, minimum=0
            ),
        )

    @property
    def enforcing(self) -> bool:
        return bool(self.in_flight or self.per_minute)


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a request was refused and how long until the same request would be admitted."""

    reason: Refusal
    retry_after_s: float

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))


class RequestBudget:
    """Enforces RequestBudgets per tenant; enter before the work, leave after it."""

    def __init__(
        self, budgets: RequestBudgets, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budgets = budgets
        # A minute's worth of requests as the bucket, refilled evenly over the minute.
        per_minute = RatePolicy(rate_per_s=budgets.per_minute / 60.0, burst_s=60.0)
        self._minute = TokenBucketLimiter(per_minute, clock=clock)
        self._lock = threading.Lock()
        self._in_flight: dict[TenantId, int] = {}
        self._admitted: dict[TenantId, int] = {}
        self._refused: dict[tuple[TenantId, Refusal], int] = {}

    def enter(self, tenant: TenantId) -> Refused | None:
        """Admit one request of tenant (counted in flight until leave), or say why not."""
        limit = self.budgets.in_flight
        with self._lock:
            if limit and self._in_flight.get(tenant, 0) >= limit:
                return self._refuse(tenant, Refused("in_flight", IN_FLIGHT_RETRY_S))
            self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1
        # Outside the lock: the limiter has its own. A refusal gives the slot back.
        admission = self._minute.take(tenant)
        with self._lock:
            if not admission.admitted:
                self._release(tenant)
                return self._refuse(tenant, Refused("per_minute", admission.retry_after_s))
            self._admitted[tenant] = self._admitted.get(tenant, 0) + 1
        return None

    def leave(self, tenant: TenantId) -> None:
        """A request admitted by enter has ended, whatever its outcome."""
        with self._lock:
            self._release(tenant)

    def usage(self, tenant: TenantId) -> dict[str, object]:
        """What this server counted for tenant since it started."""
        with self._lock:
            return {
                "inFlight": self._in_flight.get(tenant, 0),
                "admitted": self._admitted.get(tenant, 0),
                "refusedInFlight": self._refused.get((tenant, "in_flight"), 0),
                "refusedPerMinute": self._refused.get((tenant, "per_minute"), 0),
            }

    def _release(self, tenant: TenantId) -> None:
        # Called with the lock held.
        left = self._in_flight.get(tenant, 0) - 1
        if left > 0:
            self._in_flight[tenant] = left
        else:
            self._in_flight.pop(tenant, None)

    def _refuse(self, tenant: TenantId, refused: Refused) -> Refused:
        # Called with the lock held.
        key = (tenant, refused.reason)
        self._refused[key] = self._refused.get(key, 0) + 1
        return refused


__all__ = ["Refused", "RequestBudget", "RequestBudgets"]
