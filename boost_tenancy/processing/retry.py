"""Retry policy: how many attempts a message gets, how long it waits between them, and the
middleware that turns a handler's exception into a retry or a dead letter.

compute_backoff is pure, with its random source injected, so tests need no sleeping.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import structlog

from boost_tenancy.errors import (
    ConfigError,
    MessageDecodeError,
    ModelValidationError,
    PermanentError,
    PublishRateExceededError,
    TenantMismatchError,
    TransientError,
)
from boost_tenancy.messages import IncomingMessage
from boost_tenancy.processing.middleware import Handler
from boost_tenancy.processing.outcomes import DeadLetter, Defer, Outcome, Retry
from boost_tenancy.processing.processor import HandlerContext
from boost_tenancy.resilience.dead_letter import DeadLetterReason
from boost_tenancy.resilience.failure import ErrorInfo

log = structlog.get_logger("boost_tenancy.resilience")


ExceptionTypes = tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Up to max_attempts deliveries; exponential backoff between them, jittered, capped.

    Which failures are retried: a PermanentError (or a type of dead_letter_on) is dead-lettered
    at once; with retry_on empty every other exception is retried, else only a TransientError
    or a type of retry_on is, and any other exception is dead-lettered at once. A processor
    declares its own policy as TenantProcessor.retry_policy.
    """

    max_attempts: int = 5
    base_delay_ms: int = 1_000
    max_delay_ms: int = 60_000
    jitter: float = 0.2
    """Fraction of the delay added at random (0.2 = up to +20 %), so retries do not stampede."""
    retry_on: ExceptionTypes = ()
    """When not empty: the only exceptions retried, besides TransientError."""
    dead_letter_on: ExceptionTypes = ()
    """Exceptions dead-lettered at once, like PermanentError; they win over retry_on."""

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
        for name in ("retry_on", "dead_letter_on"):
            object.__setattr__(self, name, _exception_types(name, getattr(self, name)))

    def should_retry(self, attempt: int) -> bool:
        """Whether a message whose attempt-th delivery failed gets another one."""
        return attempt < self.max_attempts

    def is_permanent(self, exc: BaseException) -> bool:
        """Whether exc dead-letters its message at once, whatever attempts are left."""
        if isinstance(exc, PermanentError | MessageDecodeError | TenantMismatchError):
            return True
        if isinstance(exc, self.dead_letter_on):
            return True
        return bool(self.retry_on) and not isinstance(exc, (TransientError, *self.retry_on))


def _exception_types(name: str, value: object) -> ExceptionTypes:
    """value as a tuple of exception classes (one class alone is accepted)."""
    items = (value,) if isinstance(value, type) else value
    if not isinstance(items, tuple | list | frozenset | set):
        raise ConfigError(f"{name} must be a tuple of exception classes, got {value!r}")
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigError(f"{name} must hold exception classes only, got {item!r}")
    return tuple(items)


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
    name: ClassVar[str] = "retry"

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
        if isinstance(exc, PublishRateExceededError):
            # Not the message's fault, and the bucket refills by itself: no attempt is counted,
            # so a tenant publishing at its limit never dead-letters its own inputs.
            return Defer(
                delay_ms=max(1, math.ceil(exc.retry_after_s * 1000)), reason="publish_rate"
            )
        if isinstance(exc, ModelValidationError):  # the handler validating a part itself
            return DeadLetter(error=error, reason=DeadLetterReason.INVALID)
        if self.policy.is_permanent(exc):
            return DeadLetter(error=error, reason=DeadLetterReason.PERMANENT)
        if not isinstance(exc, Exception):
            log.critical("handler_raised_base_exception", error_type=error.type, error=error.text)
        if not self.policy.should_retry(attempt):
            return DeadLetter(error=error, reason=DeadLetterReason.EXHAUSTED)
        return Retry(error=error, delay_ms=self.delay_ms(exc, attempt))

    def delay_ms(self, exc: BaseException, attempt: int) -> int:
        """The wait before the next attempt: the error's retry_after_ms when it gives one,
        bounded by the policy's max_delay_ms, else the policy's backoff."""
        asked = exc.retry_after_ms if isinstance(exc, TransientError) else None
        if asked is not None:
            return min(self.policy.max_delay_ms, math.ceil(asked))
        if self.rand is None:
            return compute_backoff(self.policy, attempt)
        return compute_backoff(self.policy, attempt, self.rand)


def policy_for(processor: object, default: RetryPolicy) -> RetryPolicy:
    """The retry policy of a processor: its retry_policy when it declares one, else default."""
    declared = getattr(processor, "retry_policy", None)
    if declared is None:
        return default
    if not isinstance(declared, RetryPolicy):
        raise ConfigError(
            f"{type(processor).__name__}.retry_policy must be a RetryPolicy (or None for the "
            f"settings' BOOST_MAX_ATTEMPTS and BOOST_RETRY_*), got {declared!r}"
        )
    return declared
