"""A processor's own retry policy (TenantProcessor.retry_policy): its attempts, backoff and the
exceptions it retries or dead-letters at once, over the settings'; TransientError's
retry_after_ms as the delay of that retry, bounded by the policy's maximum."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from boost_tenancy import (
    ConfigError,
    HandlerContext,
    IncomingMessage,
    PermanentError,
    PublishRateExceededError,
    RetryPolicy,
    TenantProcessor,
    TenantProducer,
    TransientError,
)
from boost_tenancy.processing.outcomes import DeadLetter, Defer, Retry
from boost_tenancy.processing.retry import RetryMiddleware, policy_for
from boost_tenancy.resilience.dead_letter import DeadLetterReason
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.harness import TEST_SETTINGS, RunningProcessor, error_store_in


class ServiceDownError(Exception):
    pass


class BadInputError(Exception):
    pass


STRICT = RetryPolicy(
    max_attempts=4,
    base_delay_ms=100,
    max_delay_ms=5_000,
    jitter=0.0,
    retry_on=(ServiceDownError,),
    dead_letter_on=(BadInputError,),
)


# -- which exceptions are retried ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (ServiceDownError("x"), Retry),
        (TransientError("x"), Retry),
        (BadInputError("x"), DeadLetter),
        (KeyError("not in retry_on"), DeadLetter),
        (PermanentError("x"), DeadLetter),
    ],
)
def test_with_retry_on_only_those_and_transient_errors_are_retried(
    exc: Exception, outcome: type
) -> None:
    decided = RetryMiddleware(STRICT).failed(exc, attempt=1)
    assert type(decided) is outcome
    if isinstance(decided, DeadLetter):
        assert decided.reason is DeadLetterReason.PERMANENT


def test_without_retry_on_every_exception_but_dead_letter_on_is_retried() -> None:
    policy = RetryPolicy(dead_letter_on=(BadInputError,))
    middleware = RetryMiddleware(policy, rand=lambda: 0.0)
    assert isinstance(middleware.failed(KeyError("k"), attempt=1), Retry)
    assert isinstance(middleware.failed(BadInputError("b"), attempt=1), DeadLetter)


def test_dead_letter_on_wins_over_retry_on() -> None:
    class BothError(ServiceDownError, BadInputError):
        pass

    assert STRICT.is_permanent(BothError())


def test_a_publish_over_its_rate_is_deferred_even_when_retry_on_leaves_it_out() -> None:
    policy = RetryPolicy(retry_on=(ServiceDownError,), dead_letter_on=(TransientError,))
    refused = PublishRateExceededError("org-a", "q", "over", retry_after_s=0.5)
    assert RetryMiddleware(policy).failed(refused, attempt=1) == Defer(
        delay_ms=500, reason="publish_rate"
    )


@pytest.mark.parametrize("bad", [("not a type",), (int,), "ServiceDownError", 3])
def test_exception_lists_that_are_not_exception_classes_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="retry_on"):
        RetryPolicy(retry_on=bad)  # type: ignore[arg-type]  # the mistake under test


def test_a_single_exception_class_is_taken_as_a_list_of_one() -> None:
    assert RetryPolicy(retry_on=ServiceDownError).retry_on == (ServiceDownError,)  # type: ignore[arg-type]


# -- retry_after_ms --------------------------------------------------------------------------------
def test_retry_after_ms_is_the_delay_of_that_retry() -> None:
    decided = RetryMiddleware(STRICT).failed(TransientError("busy", retry_after_ms=1_234), 1)
    assert decided == Retry(error=decided.error, delay_ms=1_234)  # type: ignore[union-attr]


def test_retry_after_ms_is_bounded_by_the_policys_maximum() -> None:
    decided = RetryMiddleware(STRICT).failed(TransientError("busy", retry_after_ms=10**9), 1)
    assert isinstance(decided, Retry)
    assert decided.delay_ms == STRICT.max_delay_ms


def test_retry_after_ms_still_counts_the_attempt() -> None:
    """The last attempt dead-letters, whatever delay the error asked for."""
    decided = RetryMiddleware(STRICT).failed(TransientError("busy", retry_after_ms=10), 4)
    assert isinstance(decided, DeadLetter)
    assert decided.reason is DeadLetterReason.EXHAUSTED


def test_without_retry_after_ms_the_backoff_applies() -> None:
    decided = RetryMiddleware(STRICT).failed(TransientError("busy"), attempt=3)
    assert isinstance(decided, Retry)
    assert decided.delay_ms == 400  # 100 * 2^2, no jitter


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "10", True])
def test_a_retry_after_that_is_no_duration_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match="retry_after_ms"):
        TransientError("x", retry_after_ms=bad)  # type: ignore[arg-type]


# -- the processor's policy over the settings' -----------------------------------------------------
class TwoAttempts(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("jobs",)
    retry_policy = RetryPolicy(max_attempts=2, base_delay_ms=5, max_delay_ms=5, jitter=0.0)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise ServiceDownError(f"attempt {ctx.attempt}")


class DeadOnBadInputError(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("jobs",)
    retry_policy = RetryPolicy(base_delay_ms=5, max_delay_ms=5, dead_letter_on=(BadInputError,))

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise BadInputError("no such customer")


class SettingsPolicy(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("jobs",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise ServiceDownError(f"attempt {ctx.attempt}")


def outcomes_of(processor: TenantProcessor, tmp_path: Path) -> list[str]:
    broker = InMemoryBroker()
    store = error_store_in(tmp_path)
    sender = InMemoryTransport(broker)
    sender.connect()
    try:
        with RunningProcessor(processor, ["org-a"], broker=broker, error_store=store) as run:
            TenantProducer(sender).send("jobs", "org-a", {"n": 1})
            run.wait_handled(1)
            assert len(run.dead_letters("jobs", "org-a")) == 1
            return [s.outcome for s in run.settled]
    finally:
        sender.close()
        store.close()
        broker.close()


def test_a_processors_max_attempts_replaces_the_settings(tmp_path: Path) -> None:
    assert TEST_SETTINGS.dispatch.retry.max_attempts == 3
    assert outcomes_of(TwoAttempts(), tmp_path) == ["retried", "dead_lettered"]


def test_without_a_policy_of_its_own_a_processor_gets_the_settings(tmp_path: Path) -> None:
    assert outcomes_of(SettingsPolicy(), tmp_path) == ["retried", "retried", "dead_lettered"]


def test_a_processors_dead_letter_on_skips_the_retries(tmp_path: Path) -> None:
    assert outcomes_of(DeadOnBadInputError(), tmp_path) == ["dead_lettered"]


def test_a_retry_policy_that_is_not_a_retry_policy_is_refused_before_any_message(
    tmp_path: Path,
) -> None:
    class Wrong(SettingsPolicy):
        retry_policy = "max_attempts=2"  # type: ignore[assignment]  # the mistake under test

    with pytest.raises(ConfigError, match=r"Wrong.retry_policy must be a RetryPolicy"):
        policy_for(Wrong(), RetryPolicy())
    broker, store = InMemoryBroker(), error_store_in(tmp_path)
    try:
        with pytest.raises(ConfigError, match="retry_policy"):
            RunningProcessor(Wrong(), ["org-a"], broker=broker, error_store=store)
    finally:
        store.close()
        broker.close()
