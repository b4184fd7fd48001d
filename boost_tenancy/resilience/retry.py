"""Retry policy: how many attempts a message gets and how long it waits between them.

compute_backoff is pure, with its random source injected, so tests need no sleeping.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from boost_tenancy.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Up to max_attempts deliveries; exponential backoff between them, jittered, capped."""

    max_attempts: int = 5
    base_delay_ms: int = 1_000
    max_delay_ms: int = 60_000
    jitter: float = 0.2
    """Fraction of the delay added at random (0.2 = up to +20 %), so retries do not stampede."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay_ms < 0 or self.max_delay_ms < self.base_delay_ms:
            raise ConfigError(
                f"need 0 <= base_delay_ms <= max_delay_ms, got {self.base_delay_ms} "
                f"and {self.max_delay_ms}"
            )
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError(f"jitter must be between 0 and 1, got {self.jitter}")

    def should_retry(self, attempt: int) -> bool:
        """Whether a message whose attempt-th delivery failed gets another one."""
        return attempt < self.max_attempts


def compute_backoff(
    policy: RetryPolicy, attempt: int, rand: Callable[[], float] = random.random
) -> int:
    """Delay in ms before attempt+1: base * 2^(attempt-1) plus jitter, never above max_delay_ms."""
    exponent = max(0, attempt - 1)
    delay = policy.base_delay_ms * (2 ** min(exponent, 32)) * (1.0 + policy.jitter * rand())
    return int(min(policy.max_delay_ms, delay))
