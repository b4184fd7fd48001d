"""MessageTtl and the expiry values it produces: every tenant's default from BOOST_MESSAGE_TTL_S
(refused at start-up when negative, non-numeric, non-finite or too large, naming the variable),
per-tenant overrides in code, and the absolute expiry a message may carry."""

from __future__ import annotations

import math

import pytest

from boost_tenancy import Message, MessageTtl, TenantId
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.environment import message_ttl_from_env
from boost_tenancy.errors import ConfigError
from boost_tenancy.expiry import LATEST_EXPIRY_MS, check_expiry, now_ms, read_expiry
from boost_tenancy.messages import build_message
from boost_tenancy.quotas.ttl import MAX_TTL_S, TTL_VARIABLE

A, B = TenantId("org-A"), TenantId("org-B")
NOW = 1_795_000_000_000


def test_by_default_no_message_expires() -> None:
    ttl = MessageTtl()
    assert ttl.ttl_ms_of(A) is None
    assert ttl.expiry_of(A, NOW) is None
    assert not ttl.applies
    assert AppSettings.from_env({}).message_ttl == MessageTtl()


def test_the_default_applies_to_every_tenant_and_an_override_to_its_tenant_only() -> None:
    ttl = MessageTtl(default_s=30, per_tenant={B: 2.5})
    assert ttl.ttl_ms_of(A) == 30_000
    assert ttl.ttl_ms_of("org-B") == 2_500
    assert ttl.expiry_of(A, NOW) == NOW + 30_000
    assert ttl.expiry_of(B, NOW) == NOW + 2_500
    assert ttl.applies


def test_a_tenant_override_of_zero_means_its_messages_never_expire() -> None:
    ttl = MessageTtl(default_s=30).for_tenant(B, 0)
    assert ttl.ttl_ms_of(B) is None
    assert ttl.expiry_of(B, NOW) is None
    assert ttl.ttl_ms_of(A) == 30_000
    only_one = MessageTtl().for_tenant("org-A", 1)
    assert only_one.applies
    assert (only_one.ttl_ms_of(A), only_one.ttl_ms_of(B)) == (1_000, None)


def test_for_tenant_returns_a_new_value_and_a_callers_dict_cannot_change_it() -> None:
    overrides = {A: 5.0}
    ttl = MessageTtl(per_tenant=overrides)
    overrides[B] = 7.0
    changed = ttl.for_tenant(B, 7)
    assert ttl.ttl_ms_of(B) is None
    assert changed.ttl_ms_of(B) == 7_000
    assert changed.ttl_ms_of(A) == 5_000
    with pytest.raises(TypeError):
        ttl.per_tenant[B] = 1.0  # type: ignore[index]


def test_a_ttl_under_a_millisecond_still_expires() -> None:
    assert MessageTtl(default_s=0.0001).ttl_ms_of(A) == 1


def test_without_a_time_the_expiry_is_taken_from_the_wall_clock() -> None:
    before = now_ms()
    expiry = MessageTtl(default_s=60).expiry_of(A)
    assert expiry is not None
    assert before + 60_000 <= expiry <= now_ms() + 60_000


@pytest.mark.parametrize("seconds", [-1, -0.001, math.inf, math.nan, MAX_TTL_S + 1, True, "5"])
def test_an_invalid_default_or_override_is_refused(seconds: object) -> None:
    with pytest.raises(ConfigError, match=r"MessageTtl\.default_s"):
        MessageTtl(default_s=seconds)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"MessageTtl\.per_tenant\['org-A'\]"):
        MessageTtl(per_tenant={A: seconds})  # type: ignore[dict-item]


def test_an_override_for_an_invalid_tenant_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"MessageTtl\.per_tenant"):
        MessageTtl(per_tenant={"a b": 5})  # type: ignore[dict-item]


def test_boost_message_ttl_s_sets_every_tenants_default() -> None:
    settings = AppSettings.from_env({TTL_VARIABLE: "90"})
    assert settings.message_ttl == MessageTtl(default_s=90)
    assert AppSettings.from_env({TTL_VARIABLE: "0"}).message_ttl.applies is False
    assert message_ttl_from_env({TTL_VARIABLE: " 0.5 "}).ttl_ms_of(A) == 500


@pytest.mark.parametrize("raw", ["-1", "-0.5", "abc", "1s", "inf", "nan", "-inf", "1e12"])
def test_a_bad_boost_message_ttl_s_stops_start_up_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match=TTL_VARIABLE):
        AppSettings.from_env({TTL_VARIABLE: raw})


def test_a_message_carries_its_expiry_onto_the_wire() -> None:
    message = build_message(A, {"n": 1}, expires_at_ms=NOW)
    assert message.expires_at_ms == NOW
    assert message.to_wire().expires_at_ms == NOW
    assert build_message(A, "x").to_wire().expires_at_ms is None


@pytest.mark.parametrize("bad", [0, -5, LATEST_EXPIRY_MS + 1, 1.5, "123", True])
def test_a_message_with_an_impossible_expiry_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="expiry"):
        Message(tenant=A, body="x", expires_at_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        check_expiry(bad)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1795426852313", 1795426852313),
        (1795426852313, 1795426852313),
        ("0", None),
        (0, None),
        (-1, None),
        ("-1", None),
        ("", None),
        (None, None),
        ("12abc", None),
        ("\u0661\u0662", None),  # Arabic-Indic digits: not the ASCII digits a broker writes
        ("9" * 4000, None),
        (str(LATEST_EXPIRY_MS), LATEST_EXPIRY_MS),
        (str(LATEST_EXPIRY_MS + 1), None),
        (True, None),
    ],
)
def test_an_expiry_read_off_the_wire_is_a_valid_time_or_none(raw: object, expected: object) -> None:
    assert read_expiry(raw) == expected
