"""Publishing limits on an injected clock: PublishLimits validation and BOOST_PUBLISH_* variables,
and PublishGuard's size cap, rate buckets, overrides
per tenant, per queue and per tenant's queue, refusal counts and wire_size."""

from __future__ import annotations

import math

import pytest

from boost_tenancy import (
    ConfigError,
    MessageTooLargeError,
    PermanentError,
    PublishGuard,
    PublishLimits,
    PublishRateExceededError,
    PublishRefusedError,
    TenantId,
    TransientError,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.environment import publish_limits_from_env
from boost_tenancy.fairness import RatePolicy
from boost_tenancy.fairness.rates import DEFAULT_BURST_S
from boost_tenancy.messages import WireMessage
from boost_tenancy.quotas import wire_size
from boost_tenancy.quotas.limits import PUBLISH_VARIABLES, UNLIMITED_PUBLISHING
from tests.conftest import ManualClock as Clock

A = TenantId("org-A")
B = TenantId("org-B")


def msg(body: str | bytes = "x", **properties: str) -> WireMessage:
    return WireMessage(body=body, properties=properties)


def guarded(
    default: PublishLimits = UNLIMITED_PUBLISHING,
) -> tuple[PublishGuard, Clock, list[tuple[TenantId, str, str]]]:
    clock = Clock()
    told: list[tuple[TenantId, str, str]] = []
    guard = PublishGuard(
        default,
        clock=clock,
        on_refused=lambda tenant, queue, reason: told.append((tenant, queue, reason)),
    )
    return guard, clock, told


def admitted(guard: PublishGuard, tenant: TenantId, queue: str, body: str = "x") -> bool:
    try:
        guard.check(tenant, queue, [msg(body)])
    except PublishRateExceededError:
        return False
    return True


def count_admitted(guard: PublishGuard, tenant: TenantId, queue: str, limit: int = 100) -> int:
    """Publishes of one small message admitted in a row before the first refusal."""
    n = 0
    while n < limit and admitted(guard, tenant, queue):
        n += 1
    return n


# -- PublishLimits --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("messages_per_s", -1),
        ("bytes_per_s", -0.5),
        ("burst_s", -2),
        ("max_message_bytes", -1),
        ("messages_per_s", math.inf),
        ("bytes_per_s", math.nan),
        ("burst_s", -math.inf),
        ("messages_per_s", True),
        ("max_message_bytes", False),
        ("bytes_per_s", "10"),
        ("burst_s", None),
    ],
)
def test_limits_refuse_negative_non_finite_bool_and_non_numbers_naming_the_field(
    field: str, value: object
) -> None:
    with pytest.raises(ConfigError, match=rf"PublishLimits\.{field}\b"):
        PublishLimits(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1.5, 10.0, "10"])
def test_max_message_bytes_must_be_an_integer(value: object) -> None:
    with pytest.raises(ConfigError, match=r"max_message_bytes"):
        PublishLimits(max_message_bytes=value)  # type: ignore[arg-type]


def test_limits_default_to_unlimited_and_expose_their_policies() -> None:
    limits = PublishLimits()
    assert limits.unlimited and not limits.limits_rate
    assert limits == UNLIMITED_PUBLISHING
    assert limits.burst_s == DEFAULT_BURST_S
    assert PublishLimits(max_message_bytes=10).limits_rate is False
    assert PublishLimits(max_message_bytes=10).unlimited is False
    set_ = PublishLimits(messages_per_s=5, bytes_per_s=100, burst_s=2, max_message_bytes=64)
    assert set_.limits_rate and not set_.unlimited
    assert set_.messages == RatePolicy(rate_per_s=5, burst_s=2)
    assert set_.bytes.capacity == 200
    assert set_.messages.capacity == 10


# -- from the environment -------------------------------------------------------------------------
def test_from_env_defaults_to_unlimited() -> None:
    assert publish_limits_from_env({}) == UNLIMITED_PUBLISHING
    blank = dict.fromkeys(PUBLISH_VARIABLES, " ")
    assert publish_limits_from_env(blank) == UNLIMITED_PUBLISHING
    assert AppSettings.from_env({}).publish.unlimited


@pytest.mark.parametrize(
    ("variable", "raw", "field", "expected"),
    [
        ("BOOST_PUBLISH_RATE_PER_S", "2.5", "messages_per_s", 2.5),
        ("BOOST_PUBLISH_BYTES_PER_S", "4096", "bytes_per_s", 4096.0),
        ("BOOST_PUBLISH_BURST_S", "3", "burst_s", 3.0),
        ("BOOST_MAX_MESSAGE_BYTES", "65536", "max_message_bytes", 65536),
    ],
)
def test_from_env_reads_each_variable(variable: str, raw: str, field: str, expected: float) -> None:
    limits = publish_limits_from_env({variable: raw})
    assert getattr(limits, field) == expected
    others = {f for f in ("messages_per_s", "bytes_per_s", "max_message_bytes") if f != field}
    assert all(getattr(limits, f) == 0 for f in others)
    assert getattr(AppSettings.from_env({variable: raw}).publish, field) == expected


def test_app_settings_carry_every_publish_variable() -> None:
    settings = AppSettings.from_env(
        {
            "BOOST_PUBLISH_RATE_PER_S": "7",
            "BOOST_PUBLISH_BYTES_PER_S": "1000",
            "BOOST_PUBLISH_BURST_S": "2",
            "BOOST_MAX_MESSAGE_BYTES": "512",
        }
    )
    assert settings.publish == PublishLimits(
        messages_per_s=7, bytes_per_s=1000, burst_s=2, max_message_bytes=512
    )


@pytest.mark.parametrize("variable", PUBLISH_VARIABLES)
@pytest.mark.parametrize("raw", ["-1", "fast", "nan", "inf"])
def test_from_env_refuses_bad_values_naming_the_variable(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        publish_limits_from_env({variable: raw})
    with pytest.raises(ConfigError, match=variable):
        AppSettings.from_env({variable: raw})


def test_max_message_bytes_from_env_must_be_whole() -> None:
    with pytest.raises(ConfigError, match="BOOST_MAX_MESSAGE_BYTES"):
        publish_limits_from_env({"BOOST_MAX_MESSAGE_BYTES": "1.5"})


# -- PublishGuard: every bucket or none -----------------------------------------------------------
def test_a_publish_refused_for_its_bytes_takes_no_message_token() -> None:
    # Messages: capacity 10, 0.1 a second; bytes: capacity 10,000, 100 a second.
    guard, clock, _ = guarded(PublishLimits(messages_per_s=0.1, bytes_per_s=100, burst_s=100))
    guard.check(A, "out", [msg("x" * 10_000)])  # 9 messages left, no bytes
    with pytest.raises(PublishRateExceededError) as refused:
        guard.check(A, "out", [msg("x" * 10)])
    assert refused.value.retry_after_s == pytest.approx(0.1)  # 10 bytes at 100/s
    clock.advance(1)  # 100 bytes back, a tenth of a message
    assert count_admitted(guard, A, "out") == 9, "the refused publish took no message token"


# -- PublishGuard: size ---------------------------------------------------------------------------
def test_a_message_over_the_size_cap_is_refused_before_any_bucket() -> None:
    guard, _, told = guarded(PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=10))
    with pytest.raises(MessageTooLargeError) as refused:
        guard.check(A, "out", [msg("x" * 11)])
    error = refused.value
    assert isinstance(error, PublishRefusedError) and isinstance(error, PermanentError)
    assert not isinstance(error, TransientError)
    assert (error.tenant, error.queue, error.reason, error.retry_after_s) == (
        "org-A",
        "out",
        "size",
        0,
    )
    assert "11 bytes" in str(error) and "10 bytes" in str(error)
    assert guard.refused() == {(A, "size"): 1}
    assert told == [(A, "out", "size")]
    # The bucket (capacity 1) is still full: the refused message took nothing.
    guard.check(A, "out", [msg("x" * 10)])  # exactly the cap fits
    assert not admitted(guard, A, "out")


def test_the_size_cap_counts_properties_and_the_largest_message_of_a_batch() -> None:
    guard, _, _ = guarded(PublishLimits(max_message_bytes=10))
    guard.check(A, "out", [msg("12345", k="1234")])  # 5 + 1 + 4 = 10
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "out", [msg("12345", k="12345")])  # 11
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "out", [msg("small"), msg("x" * 11), msg("small")])
    assert guard.refused() == {(A, "size"): 2}


# -- PublishGuard: rates --------------------------------------------------------------------------
def test_over_the_rate_is_refused_with_a_retry_after_and_admitted_after_it() -> None:
    guard, clock, told = guarded(PublishLimits(messages_per_s=2, burst_s=1))  # capacity 2
    guard.check(A, "out", [msg()])
    guard.check(A, "out", [msg()])
    with pytest.raises(PublishRateExceededError) as refused:
        guard.check(A, "out", [msg()])
    error = refused.value
    assert isinstance(error, TransientError) and isinstance(error, PublishRefusedError)
    assert (error.tenant, error.queue, error.reason) == ("org-A", "out", "rate")
    assert error.retry_after_s > 0
    assert error.retry_after_s == pytest.approx(0.5)
    assert "2 messages/s" in str(error)
    clock.advance(error.retry_after_s - 0.01)
    assert not admitted(guard, A, "out")
    clock.advance(0.01)
    assert admitted(guard, A, "out")
    assert guard.refused() == {(A, "rate"): 2}
    assert told == [(A, "out", "rate")] * 2


def test_the_bytes_rate_counts_what_the_messages_weigh() -> None:
    guard, clock, _ = guarded(PublishLimits(bytes_per_s=10, burst_s=1))  # 10 bytes at once
    guard.check(A, "out", [msg("x" * 8)])
    with pytest.raises(PublishRateExceededError) as refused:
        guard.check(A, "out", [msg("x" * 8)])  # 2 left, 8 needed: 0.6 s
    assert refused.value.retry_after_s == pytest.approx(0.6)
    guard.check(A, "out", [msg("x"), msg("y")])  # 2 bytes still fit: the refusal took none
    clock.advance(0.8)
    guard.check(A, "out", [msg("x" * 8)])


def test_a_batch_is_admitted_or_refused_whole() -> None:
    guard, _, _ = guarded(PublishLimits(messages_per_s=3, burst_s=1))
    guard.check(A, "out", [msg(), msg()])
    with pytest.raises(PublishRateExceededError):
        guard.check(A, "out", [msg(), msg()])  # 1 left, 2 needed (within the capacity)
    assert count_admitted(guard, A, "out") == 1


def test_the_tenant_bucket_spans_queues_and_tenants_are_apart() -> None:
    guard, _, _ = guarded(PublishLimits(messages_per_s=2, burst_s=1))
    guard.check(A, "one", [msg()])
    guard.check(A, "two", [msg()])
    assert not admitted(guard, A, "three")
    assert count_admitted(guard, B, "one") == 2
    assert guard.refused() == {(A, "rate"): 1, (B, "rate"): 1}


# -- overrides ------------------------------------------------------------------------------------
def test_a_tenant_override_beats_the_default() -> None:
    guard, _, _ = guarded(PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=100))
    guard.set_limits(PublishLimits(messages_per_s=5, burst_s=1, max_message_bytes=10), tenant=A)
    assert guard.limits_for(A).messages_per_s == 5
    assert guard.limits_for(B).messages_per_s == 1
    assert count_admitted(guard, A, "out") == 5
    assert count_admitted(guard, B, "out") == 1
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "out", [msg("x" * 20)])
    guard.check(TenantId("org-C"), "out", [msg("x" * 20)])  # the default's cap is 100


def test_queue_limits_add_a_bucket_for_that_queue_only() -> None:
    guard, _, _ = guarded(PublishLimits(messages_per_s=10, burst_s=1))  # tenant-wide: 10
    guard.set_limits(PublishLimits(messages_per_s=2, burst_s=1), queue="hot")
    assert count_admitted(guard, A, "hot") == 2
    # The queue's bucket is besides the tenant's: the 2 on hot came out of A's 10 as well.
    assert count_admitted(guard, A, "cold") == 8
    assert count_admitted(guard, B, "hot") == 2, "every tenant has its own bucket for the queue"
    assert guard.limits_for(A, "hot").messages_per_s == 2
    assert guard.limits_for(A, "cold").messages_per_s == 10


def test_a_queue_limit_alone_does_not_limit_other_queues() -> None:
    guard, _, _ = guarded()  # unlimited by default
    guard.set_limits(PublishLimits(messages_per_s=1, burst_s=1), queue="hot")
    assert count_admitted(guard, A, "hot") == 1
    assert count_admitted(guard, A, "cold") == 100


def test_a_tenants_queue_limit_applies_to_that_tenant_alone() -> None:
    guard, _, _ = guarded()
    guard.set_limits(
        PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=5), tenant=A, queue="hot"
    )
    assert count_admitted(guard, A, "hot") == 1
    assert count_admitted(guard, B, "hot") == 100
    assert count_admitted(guard, A, "cold") == 100
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "hot", [msg("x" * 6)])
    guard.check(B, "hot", [msg("x" * 6)])
    guard.check(A, "cold", [msg("x" * 6)])


def test_clear_limits_restores_the_default() -> None:
    guard, _, _ = guarded(PublishLimits(messages_per_s=1, burst_s=1))
    guard.set_limits(PublishLimits(messages_per_s=5, burst_s=1), tenant=A)
    assert count_admitted(guard, A, "out") == 5
    guard.clear_limits(tenant=A)
    assert guard.limits_for(A).messages_per_s == 1
    guard.set_limits(PublishLimits(messages_per_s=3, burst_s=1), tenant=B)
    guard.clear_limits(tenant=B)
    assert count_admitted(guard, B, "out") == 1, "B is back to the default's capacity of 1"
    guard.clear_limits(tenant=B)  # clearing what is not set is no error


def test_clear_limits_of_a_queue_removes_its_bucket() -> None:
    guard, _, _ = guarded()
    guard.set_limits(PublishLimits(messages_per_s=1, burst_s=1), queue="hot")
    assert count_admitted(guard, A, "hot") == 1
    guard.clear_limits(tenant=None, queue="hot")
    assert count_admitted(guard, A, "hot") == 100


def test_the_default_can_be_replaced_but_not_cleared() -> None:
    guard, _, _ = guarded(PublishLimits(messages_per_s=1, burst_s=1))
    with pytest.raises(ValueError, match="default"):
        guard.clear_limits(tenant=None)
    assert count_admitted(guard, A, "out") == 1
    guard.set_limits(PublishLimits(messages_per_s=3, burst_s=1))
    assert count_admitted(guard, B, "out") == 3
    with pytest.raises(TypeError):
        guard.set_limits(RatePolicy(rate_per_s=1))  # type: ignore[arg-type]


# -- the unlimited fast path and the refusal hook -------------------------------------------------
def test_an_unlimited_guard_never_reaches_the_buckets() -> None:
    guard = PublishGuard(clock=Clock())
    for _ in range(50):
        guard.check(A, "out", [msg("x" * 10_000)])
    assert guard.bucket_count() == 0
    assert guard.refused() == {}
    # Limited, then unlimited again: the fast path comes back.
    guard.set_limits(PublishLimits(messages_per_s=1), tenant=A)
    guard.check(A, "out", [msg()])
    assert guard.bucket_count() == 1
    guard.clear_limits(tenant=A)
    guard.check(A, "out", [msg()])
    assert guard.bucket_count() == 0


def test_an_empty_publish_takes_nothing() -> None:
    guard = PublishGuard(PublishLimits(messages_per_s=1, burst_s=1), clock=Clock())
    guard.check(A, "out", [])
    assert guard.bucket_count() == 0
    assert count_admitted(guard, A, "out") == 1


def test_on_refused_is_told_tenant_queue_and_reason() -> None:
    guard, _, told = guarded(PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=4))
    guard.check(A, "q1", [msg("abc")])
    with pytest.raises(PublishRateExceededError):
        guard.check(A, "q2", [msg("abc")])
    with pytest.raises(MessageTooLargeError):
        guard.check(B, "q3", [msg("abcde")])
    assert told == [(A, "q2", "rate"), (B, "q3", "size")]
    assert guard.refused() == {(A, "rate"): 1, (B, "size"): 1}


# -- wire_size ------------------------------------------------------------------------------------
def test_wire_size_counts_utf8_bytes_of_the_body() -> None:
    assert wire_size(msg("hello")) == 5
    assert wire_size(msg("héllo")) == 6
    assert wire_size(msg("€")) == 3
    assert wire_size(msg("🙂")) == 4
    assert wire_size(msg(b"\x00\x01\xff")) == 3
    assert wire_size(msg("")) == 0


def test_wire_size_counts_property_names_and_values() -> None:
    assert wire_size(msg("ab", kind="x", tenantUUID="org-A")) == 2 + 4 + 1 + 10 + 5


def test_wire_size_counts_utf8_bytes_of_property_values() -> None:
    assert wire_size(msg("", note="é")) == len("note") + 2
    assert wire_size(msg("", note="€" * 100)) == len("note") + 300


def test_a_queue_limit_does_not_lift_the_tenant_size_cap_and_the_smaller_cap_applies() -> None:
    guard, _, _ = guarded(PublishLimits(max_message_bytes=100))
    guard.set_limits(PublishLimits(messages_per_s=10), queue="q1")  # a rate, no cap of its own
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "q1", [msg("x" * 500)])
    guard.set_limits(PublishLimits(max_message_bytes=300), tenant=A)
    guard.set_limits(PublishLimits(max_message_bytes=200), queue="q2")
    guard.check(A, "q2", [msg("x" * 200)])
    with pytest.raises(MessageTooLargeError):
        guard.check(A, "q2", [msg("x" * 250)])  # under the tenant's 300, over the queue's 200
    guard.check(A, "q3", [msg("x" * 300)])
