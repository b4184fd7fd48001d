"""Retry policy: exponential backoff from an injected random source, capped, with bounded jitter;
invalid policies refused naming the field; should_retry gives exactly max_attempts deliveries."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.retry import RetryPolicy, compute_backoff


def never() -> float:
    return 0.0


def always() -> float:
    return 1.0


POLICY = RetryPolicy(max_attempts=10, base_delay_ms=1_000, max_delay_ms=60_000, jitter=0.2)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 1_000), (2, 2_000), (3, 4_000), (4, 8_000), (5, 16_000), (6, 32_000), (7, 60_000)],
)
def test_backoff_without_jitter_doubles_from_the_base_up_to_the_cap(
    attempt: int, expected: int
) -> None:
    assert compute_backoff(POLICY, attempt, never) == expected


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 1_200), (2, 2_400), (3, 4_800), (4, 9_600), (6, 38_400), (7, 60_000)],
)
def test_backoff_with_maximal_jitter_adds_the_jitter_fraction_under_the_cap(
    attempt: int, expected: int
) -> None:
    assert compute_backoff(POLICY, attempt, always) == expected


def test_jitter_never_lifts_the_delay_above_the_cap() -> None:
    """max_delay_ms is a hard ceiling: jitter spreads delays below it, never above."""
    for attempt in (7, 8, 20, 1_000):
        assert compute_backoff(POLICY, attempt, never) == POLICY.max_delay_ms
        assert compute_backoff(POLICY, attempt, always) == POLICY.max_delay_ms


def test_huge_attempt_numbers_stay_at_the_cap_without_overflow() -> None:
    assert compute_backoff(POLICY, 10**9, never) == POLICY.max_delay_ms


@pytest.mark.parametrize("attempt", [0, -5])
def test_attempt_below_one_waits_the_base_delay(attempt: int) -> None:
    assert compute_backoff(POLICY, attempt, never) == POLICY.base_delay_ms


def test_zero_jitter_ignores_the_random_source() -> None:
    policy = RetryPolicy(base_delay_ms=50, max_delay_ms=200, jitter=0.0)
    assert [compute_backoff(policy, a, always) for a in (1, 2, 3, 4)] == [50, 100, 200, 200]


def test_zero_base_delay_retries_at_once() -> None:
    policy = RetryPolicy(base_delay_ms=0, max_delay_ms=0, jitter=1.0)
    assert compute_backoff(policy, 5, always) == 0


def test_default_random_source_is_used_when_none_is_injected() -> None:
    delays = {compute_backoff(POLICY, 1) for _ in range(200)}
    assert all(1_000 <= delay <= 1_200 for delay in delays)
    assert len(delays) > 1, "jitter spreads the delays"


@given(
    base=st.integers(min_value=0, max_value=100_000),
    extra=st.integers(min_value=0, max_value=1_000_000),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    attempt=st.integers(min_value=1, max_value=200),
    rand=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_backoff_lies_between_the_capped_delay_and_the_jittered_delay_under_the_cap(
    base: int, extra: int, jitter: float, attempt: int, rand: float
) -> None:
    policy = RetryPolicy(base_delay_ms=base, max_delay_ms=base + extra, jitter=jitter)
    capped = min(policy.max_delay_ms, base * 2 ** min(attempt - 1, 32))
    delay = compute_backoff(policy, attempt, lambda: rand)
    assert capped <= delay <= min(policy.max_delay_ms, math.ceil(capped * (1 + jitter)))


# -- validation -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1, got 0"),
        ({"max_attempts": -3}, "max_attempts must be at least 1, got -3"),
        ({"base_delay_ms": -1}, "base_delay_ms"),
        ({"base_delay_ms": 10, "max_delay_ms": 9}, "base_delay_ms <= max_delay_ms, got 10 and 9"),
        ({"jitter": -0.1}, "jitter must be between 0 and 1, got -0.1"),
        ({"jitter": 1.5}, "jitter must be between 0 and 1, got 1.5"),
        ({"jitter": float("nan")}, "jitter must be between 0 and 1"),
    ],
)
def test_invalid_policy_is_refused_naming_the_field(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RetryPolicy(**fields)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_boundary_policies_are_accepted() -> None:
    RetryPolicy(max_attempts=1, base_delay_ms=0, max_delay_ms=0, jitter=0.0)
    RetryPolicy(base_delay_ms=5, max_delay_ms=5, jitter=1.0)


@pytest.mark.parametrize(("attempt", "expected"), [(1, True), (2, True), (3, False), (4, False)])
def test_should_retry_is_true_only_below_max_attempts(attempt: int, expected: bool) -> None:
    assert RetryPolicy(max_attempts=3).should_retry(attempt) is expected


def test_single_attempt_policy_never_retries() -> None:
    assert RetryPolicy(max_attempts=1).should_retry(1) is False
