"""A circuit breaker for a remote limit store: after a failure, calls fail fast for a cool-down.

The transitions are pure functions of a frozen state and an injected clock; CircuitBreaker
applies them under a lock for the many worker threads that share one store.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, ParamSpec, TypeVar

import structlog

from boost_tenancy.errors import BoostTenancyError, ConfigError

log = structlog.get_logger("boost_tenancy.fairness")

DEFAULT_COOLDOWN_S: Final = 5.0
DEFAULT_MAX_COOLDOWN_S: Final = 30.0
DEFAULT_GROWTH: Final = 2.0

P = ParamSpec("P")
T = TypeVar("T")


class CircuitOpenError(BoostTenancyError):
    """The store is known to be unreachable: the call was refused without touching it.

    Callers treat it like the store's own connection errors (the fairness middleware fails
    open on both); it only arrives sooner.
    """

    def __init__(self, name: str, cause: str, probe_in_s: float) -> None:
        self.name = name
        self.cause = cause
        self.probe_in_s = probe_in_s
        probe = f"next probe in {probe_in_s:.1f} s" if probe_in_s > 0 else "a probe is under way"
        super().__init__(f"{name} unavailable ({cause}); calls fail fast, {probe}")


class Phase(enum.Enum):
    CLOSED = "closed"
    """Calls go through."""
    OPEN = "open"
    """Calls fail fast until retry_at."""
    HALF_OPEN = "half_open"
    """One probe is in flight; every other call fails fast until it settles."""


class Decision(enum.Enum):
    CALL = "call"
    PROBE = "probe"
    FAIL_FAST = "fail_fast"


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerPolicy:
    """How long calls fail fast: cooldown_s after the first failure, times growth after each
    failed probe, never more than max_cooldown_s.

    The cap bounds how long limits stay off after the store is back; growth spares a store that
    stays down from a probe (and a worker blocked for the socket timeout) every few seconds.
    """

    cooldown_s: float = DEFAULT_COOLDOWN_S
    max_cooldown_s: float = DEFAULT_MAX_COOLDOWN_S
    growth: float = DEFAULT_GROWTH

    def __post_init__(self) -> None:
        for name in ("cooldown_s", "max_cooldown_s", "growth"):
            value: object = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not math.isfinite(value)
            ):
                raise ConfigError(f"BreakerPolicy.{name} must be a finite number, got {value!r}")
        if self.cooldown_s <= 0:
            raise ConfigError(f"BreakerPolicy.cooldown_s must be positive, got {self.cooldown_s}")
        if self.max_cooldown_s < self.cooldown_s:
            raise ConfigError(
                f"BreakerPolicy.max_cooldown_s ({self.max_cooldown_s}) must be at least "
                f"cooldown_s ({self.cooldown_s})"
            )
        if self.growth < 1:
            raise ConfigError(f"BreakerPolicy.growth must be at least 1, got {self.growth}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerState:
    phase: Phase = Phase.CLOSED
    retry_at: float = 0.0
    """While OPEN: when the next call becomes the probe."""
    cooldown_s: float = 0.0
    """The cool-down that set retry_at; the next one grows from it."""


CLOSED: Final = BreakerState()


def admit(state: BreakerState, now: float) -> tuple[BreakerState, Decision]:
    """Whether a call starting now goes through, probes, or fails fast."""
    if state.phase is Phase.CLOSED:
        return state, Decision.CALL
    if state.phase is Phase.OPEN and now >= state.retry_at:
        return replace(state, phase=Phase.HALF_OPEN), Decision.PROBE
    return state, Decision.FAIL_FAST


def settle(
    state: BreakerState, policy: BreakerPolicy, now: float, *, probe: bool, reachable: bool
) -> BreakerState:
    """The state after a call that went through ends; reachable=False means it failed.

    Only the probe leaves HALF_OPEN. A call admitted while CLOSED that ends after the breaker
    opened changes nothing: its failure is the same outage, and its success predates the probe.
    """
    if probe:
        if state.phase is not Phase.HALF_OPEN:
            return state
        if reachable:
            return CLOSED
        cooldown = min(policy.max_cooldown_s, state.cooldown_s * policy.growth)
        return BreakerState(phase=Phase.OPEN, retry_at=now + cooldown, cooldown_s=cooldown)
    if not reachable and state.phase is Phase.CLOSED:
        return BreakerState(
            phase=Phase.OPEN, retry_at=now + policy.cooldown_s, cooldown_s=policy.cooldown_s
        )
    return state


def abandon(state: BreakerState, now: float) -> BreakerState:
    """The probe ended without an answer either way (interrupted): the next call probes."""
    if state.phase is not Phase.HALF_OPEN:
        return state
    return replace(state, phase=Phase.OPEN, retry_at=now)


class CircuitBreaker:
    """Guards calls to one store shared by many threads (thread-safe).

    Closed: calls go through. One call raising one of `failures` (the store unreachable or
    timing out) opens it: for the cool-down every call raises CircuitOpenError at once, without
    I/O. Then exactly one call is let through as a probe: if it answers the breaker closes,
    else it opens again for a longer cool-down. Any other exception means the store answered,
    and passes through unchanged. Logs once per state change, never per call.
    """

    def __init__(
        self,
        name: str,
        *,
        failures: tuple[type[BaseException], ...] = (OSError,),
        policy: BreakerPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not failures:
            raise ConfigError("a circuit breaker needs at least one failure type")
        self.name = name
        self._failures = failures
        self._policy = policy if policy is not None else BreakerPolicy()
        self._clock = clock
        self._state = CLOSED
        self._lock = threading.Lock()
        self._cause = ""
        self._opened_at = 0.0
        self._failed_fast = 0

    @property
    def policy(self) -> BreakerPolicy:
        return self._policy

    @property
    def phase(self) -> Phase:
        with self._lock:
            return self._state.phase

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """fn(*args, **kwargs) unless the breaker is open (then CircuitOpenError, fn not run)."""
        refused: CircuitOpenError | None = None
        with self._lock:
            now = self._clock()
            self._state, decision = admit(self._state, now)
            if decision is Decision.FAIL_FAST:
                self._failed_fast += 1
                wait_s = max(0.0, self._state.retry_at - now)
                refused = CircuitOpenError(self.name, self._cause, wait_s)
        if refused is not None:
            raise refused
        probe = decision is Decision.PROBE
        try:
            result = fn(*args, **kwargs)
        except self._failures as exc:
            self._settle(probe=probe, error=exc)
            raise
        except Exception:
            self._settle(probe=probe, error=None)
            raise
        except BaseException:
            if probe:
                with self._lock:
                    self._state = abandon(self._state, self._clock())
            raise
        self._settle(probe=probe, error=None)
        return result

    def _settle(self, *, probe: bool, error: BaseException | None) -> None:
        with self._lock:
            before = self._state
            now = self._clock()
            after = settle(before, self._policy, now, probe=probe, reachable=error is None)
            self._state = after
            if after == before:
                return
            failed_fast = self._failed_fast
            if before.phase is Phase.CLOSED:
                self._cause = f"{type(error).__name__}: {error}"
                self._opened_at = now
                self._failed_fast = 0
            elif after.phase is Phase.OPEN and error is not None:
                self._cause = f"{type(error).__name__}: {error}"
            open_for_s = now - self._opened_at
        # Logged outside the lock: a slow log sink must not hold up every worker.
        if before.phase is Phase.CLOSED:
            log.warning(
                "fairness_circuit_opened",
                circuit=self.name,
                error_type=type(error).__name__,
                error=str(error),
                cooldown_s=after.cooldown_s,
            )
        elif after.phase is Phase.OPEN:
            log.info(
                "fairness_circuit_probe_failed",
                circuit=self.name,
                error_type=type(error).__name__,
                error=str(error),
                cooldown_s=after.cooldown_s,
                open_for_s=round(open_for_s, 3),
            )
        else:
            log.info(
                "fairness_circuit_closed",
                circuit=self.name,
                open_for_s=round(open_for_s, 3),
                failed_fast=failed_fast,
            )


__all__ = [
    "DEFAULT_COOLDOWN_S",
    "DEFAULT_GROWTH",
    "DEFAULT_MAX_COOLDOWN_S",
    "BreakerPolicy",
    "BreakerState",
    "CircuitBreaker",
    "CircuitOpenError",
    "Decision",
    "Phase",
    "abandon",
    "admit",
    "settle",
]
