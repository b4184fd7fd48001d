"""Retry policy: how many attempts a message gets, how long it waits between them, and the
middleware that turns a handler's exception into a retry or a dead letter.

compute_backoff is pure, with its random source injected, so tests need no sleeping.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from boost_tenancy.errors import (
    ConfigError,
    MessageDecodeError,
    PermanentError,
    PublishRateExceededError,
    TenantMismatchError,
)
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.middleware import Handler
from boost_tenancy.processing.outcomes import DeadLetter, Defer, Outcome, Retry
from boost_tenancy.processing.processor import HandlerContext
from boost_tenancy.resilience.dead_letter import DeadLetterReason
from boost_tenancy.resilience.failure import ErrorInfo

log = structlog.get_logger("boost_tenancy.resilience")


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


@dataclass(frozen=True, slots=True)
class RetryMiddleware:
    """Handler exceptions to outcomes: permanent -> dead letter, others -> retry up to the cap.

    A delivery past the cap is dead-lettered without calling the handler: only a broker that
    counts deliveries (native_delivery_count) gets there, when earlier deliveries ended with no
    outcome at all because the worker died or lost its connection during the handler. Without
    this a message that kills its worker would be redelivered for ever.
    """

    policy: RetryPolicy
    rand: Callable[[], float] | None = None

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome:
        if message.attempt > self.policy.max_attempts:
            return DeadLetter(
                error=ErrorInfo(
                    type="DeliveryLimitExceeded",
                    text=(
                        f"delivery {message.attempt} of a message allowed "
                        f"{self.policy.max_attempts}: the earlier deliveries ended without an "
                        "outcome (the worker died or lost its connection while handling it)"
                    ),
                ),
                reason=DeadLetterReason.EXHAUSTED,
            )
        try:
            return call_next(message, ctx)
        except BaseException as exc:  # SystemExit too: a handler must never end a worker
            return self.failed(exc, message.attempt)

    def failed(self, exc: BaseException, attempt: int) -> DeadLetter | Retry | Defer:
        """The outcome of an attempt that raised exc: dead letter, retry after a backoff, or,
        for a publish over its tenant's rate, deferral until the rate admits it again."""
        error = ErrorInfo.of(exc)
        if isinstance(exc, PermanentError | MessageDecodeError | TenantMismatchError):
            return DeadLetter(error=error, reason=DeadLetterReason.PERMANENT)
        if isinstance(exc, PublishRateExceededError):
            # Not the message's fault, and the bucket refills by itself: no attempt is counted,
            # so a tenant publishing at its limit never dead-letters its own inputs.
            return Defer(
                delay_ms=max(1, math.ceil(exc.retry_after_s * 1000)), reason="publish_rate"
            )
        if not isinstance(exc, Exception):
            log.critical("handler_raised_base_exception", error_type=error.type, error=error.text)
        if not self.policy.should_retry(attempt):
            return DeadLetter(error=error, reason=DeadLetterReason.EXHAUSTED)
        delay = (
            compute_backoff(self.policy, attempt)
            if self.rand is None
            else compute_backoff(self.policy, attempt, self.rand)
        )
        return Retry(error=error, delay_ms=delay)
