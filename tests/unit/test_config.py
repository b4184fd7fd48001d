"""Settings from BOOST_* variables: documented defaults; a ConfigError names each bad variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from boost_tenancy.application.config import AppSettings, default_error_store
from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.transports.stomp import StompSettings


def test_defaults_apply_when_nothing_is_set() -> None:
    settings = AppSettings.from_env({"HOME": "/home/ops"})
    assert settings.broker_url == "stomp://127.0.0.1:61613"
    assert settings.stomp is not None
    assert (settings.stomp.host, settings.stomp.port) == ("127.0.0.1", 61613)
    assert (settings.stomp.username, settings.stomp.password, settings.stomp.vhost) == (
        None,
        None,
        None,
    )
    assert settings.runner.workers == 4
    assert settings.runner.prefetch == 10
    assert settings.runner.shutdown_grace_s == 30.0
    assert settings.runner.event_loop.stall_s == 10.0
    retry = settings.runner.dispatch.retry
    assert (retry.max_attempts, retry.base_delay_ms, retry.max_delay_ms) == (5, 1_000, 60_000)
    assert (
        settings.error_store_url == "sqlite:////home/ops/.local/state/boost-tenancy/errors.sqlite3"
    )
    assert settings.log_format == "console"
    assert settings.log_level == "INFO"


def test_blank_numbers_fall_back_to_the_defaults() -> None:
    settings = AppSettings.from_env({"BOOST_WORKERS": "", "BOOST_MAX_ATTEMPTS": "  "})
    assert settings.runner.workers == 4
    assert settings.runner.dispatch.retry.max_attempts == 5


def test_every_variable_is_read() -> None:
    settings = AppSettings.from_env(
        {
            "BOOST_BROKER_URL": "stomp://mq.internal:61614/boost",
            "BOOST_BROKER_USER": "svc",
            "BOOST_BROKER_PASSWORD": "secret",
            "BOOST_MAX_ATTEMPTS": "2",
            "BOOST_RETRY_BASE_MS": "50",
            "BOOST_RETRY_MAX_MS": "400",
            "BOOST_WORKERS": "8",
            "BOOST_PREFETCH": "1",
            "BOOST_SHUTDOWN_GRACE_S": "2.5",
            "BOOST_LOOP_STALL_S": "0.5",
            "BOOST_ERROR_STORE": "sqlite:////tmp/e.sqlite3",
            "BOOST_LOG_FORMAT": "json",
            "BOOST_LOG_LEVEL": "DEBUG",
        }
    )
    stomp = settings.stomp
    assert stomp is not None
    assert (stomp.host, stomp.port, stomp.username, stomp.password, stomp.vhost) == (
        "mq.internal",
        61614,
        "svc",
        "secret",
        "boost",
    )
    retry = settings.runner.dispatch.retry
    assert (retry.max_attempts, retry.base_delay_ms, retry.max_delay_ms) == (2, 50, 400)
    assert (settings.runner.workers, settings.runner.prefetch) == (8, 1)
    assert settings.runner.shutdown_grace_s == 2.5
    assert settings.runner.event_loop.stall_s == 0.5
    assert settings.error_store_url == "sqlite:////tmp/e.sqlite3"
    assert (settings.log_format, settings.log_level) == ("json", "DEBUG")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BOOST_MAX_ATTEMPTS": "0"}, "BOOST_MAX_ATTEMPTS must be at least 1, got 0"),
        ({"BOOST_MAX_ATTEMPTS": "three"}, "BOOST_MAX_ATTEMPTS must be an integer, got 'three'"),
        ({"BOOST_WORKERS": "x"}, "BOOST_WORKERS must be an integer, got 'x'"),
        ({"BOOST_WORKERS": "0"}, "BOOST_WORKERS must be at least 1, got 0"),
        ({"BOOST_WORKERS": "2.5"}, "BOOST_WORKERS must be an integer, got '2.5'"),
        ({"BOOST_PREFETCH": "0"}, "BOOST_PREFETCH must be at least 1, got 0"),
        ({"BOOST_RETRY_BASE_MS": "-1"}, "BOOST_RETRY_BASE_MS must be at least 0, got -1"),
        ({"BOOST_RETRY_MAX_MS": "soon"}, "BOOST_RETRY_MAX_MS must be an integer, got 'soon'"),
        ({"BOOST_SHUTDOWN_GRACE_S": "-1"}, "BOOST_SHUTDOWN_GRACE_S must be at least 0.0"),
        ({"BOOST_SHUTDOWN_GRACE_S": "soon"}, "BOOST_SHUTDOWN_GRACE_S must be a number"),
        ({"BOOST_LOOP_STALL_S": "0"}, "BOOST_LOOP_STALL_S must be at least 0.1"),
        ({"BOOST_LOOP_STALL_S": "inf"}, "BOOST_LOOP_STALL_S must be a finite number"),
        ({"BOOST_BROKER_URL": "stomp://h:abc"}, "BOOST_BROKER_URL: transport URL 'stomp://h:abc'"),
        ({"BOOST_LOG_FORMAT": "xml"}, "BOOST_LOG_FORMAT must be 'console' or 'json', got 'xml'"),
        ({"BOOST_LOG_FORMAT": ""}, "BOOST_LOG_FORMAT must be 'console' or 'json', got ''"),
    ],
)
def test_bad_value_is_refused_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AppSettings.from_env(env)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"BOOST_BROKER_URL": "stomp://h:99999"}, "BOOST_BROKER_URL"),
        ({"BOOST_BROKER_URL": "stomp://h:0"}, "BOOST_BROKER_URL"),
        ({"BOOST_RETRY_BASE_MS": "5000", "BOOST_RETRY_MAX_MS": "10"}, "BOOST_RETRY_MAX_MS"),
    ],
)
def test_out_of_range_value_is_refused_naming_the_variable(
    env: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        AppSettings.from_env(env)
    assert variable in str(caught.value)


@pytest.mark.parametrize("port", ["99999", "65536", "0", "-1"])
def test_port_outside_the_tcp_range_is_refused(port: str) -> None:
    with pytest.raises(ConfigError, match="BOOST_BROKER_URL"):
        AppSettings.from_env({"BOOST_BROKER_URL": f"stomp://h:{port}"})


@pytest.mark.parametrize(
    "env",
    [
        {"BOOST_BROKER_USER": "svc"},
        {"BOOST_BROKER_PASSWORD": "secret"},
        {"BOOST_BROKER_USER": "svc", "BOOST_BROKER_PASSWORD": ""},
    ],
)
def test_username_without_password_or_the_reverse_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="set both BOOST_BROKER_USER and BOOST_BROKER_PASSWORD"):
        AppSettings.from_env(env)


def test_stomp_settings_refuse_a_username_without_a_password() -> None:
    with pytest.raises(ConfigError, match="username and password"):
        StompSettings(username="svc")
    with pytest.raises(ConfigError, match="username and password"):
        StompSettings(password="secret")
    assert StompSettings(username="svc", password="secret").username == "svc"


@pytest.mark.parametrize(
    "fields", [{"confirm_timeout_s": 0.0}, {"confirm_timeout_s": -1.0}, {"reconnect_wait_s": -1.0}]
)
def test_stomp_settings_refuse_non_positive_timeouts(fields: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="STOMP timeouts must be positive"):
        StompSettings(**fields)  # type: ignore[arg-type]


def test_unknown_log_level_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="BOOST_LOG_LEVEL"):
        AppSettings.from_env({"BOOST_LOG_LEVEL": "verbose"})


# -- the default error store -----------------------------------------------------------------------
def test_the_default_error_store_is_under_xdg_state_home_whatever_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"XDG_STATE_HOME": "/srv/state", "HOME": "/home/ops"}
    first = AppSettings.from_env(env).error_store_url
    monkeypatch.chdir(tmp_path)
    assert AppSettings.from_env(env).error_store_url == first
    assert first == "sqlite:////srv/state/boost-tenancy/errors.sqlite3"


def test_the_default_error_store_falls_back_to_local_state_in_home() -> None:
    # A relative XDG_STATE_HOME is ignored (XDG base directory specification).
    for env in ({"HOME": "/home/ops"}, {"HOME": "/home/ops", "XDG_STATE_HOME": "state"}):
        assert default_error_store(env) == (
            "sqlite:////home/ops/.local/state/boost-tenancy/errors.sqlite3"
        )


def test_boost_error_store_overrides_the_default() -> None:
    env = {"HOME": "/home/ops", "BOOST_ERROR_STORE": "postgresql://db/errors"}
    assert AppSettings.from_env(env).error_store_url == "postgresql://db/errors"


def test_a_relative_home_without_xdg_state_home_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match="set BOOST_ERROR_STORE"):
        default_error_store({"HOME": "relative"})


# -- durations ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "variable",
    ["BOOST_SHUTDOWN_GRACE_S", "BOOST_RATE_BURST_S", "BOOST_FAIRNESS_HOLD_S"],
)
@pytest.mark.parametrize("raw", ["inf", "nan", "-1", "1e300", "86401"])
def test_a_duration_beyond_a_day_infinite_nan_or_negative_is_refused_naming_it(
    variable: str, raw: str
) -> None:
    """1e300 passes a finiteness check but overflows the wait it becomes (at SIGTERM, for the
    grace period): every duration in seconds stops at a day."""
    with pytest.raises(ConfigError, match=variable):
        AppSettings.from_env({variable: raw})


def test_a_usage_flush_beyond_a_day_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="BOOST_USAGE_FLUSH_S must be at most 86400"):
        AppSettings.from_env({"BOOST_USAGE_FLUSH_S": "1e300", "BOOST_USAGE_STORE": "sqlite:///u"})


def test_a_day_is_still_a_valid_grace_period() -> None:
    settings = AppSettings.from_env({"BOOST_SHUTDOWN_GRACE_S": "86400"})
    assert settings.runner.shutdown_grace_s == 86400.0


def test_runner_settings_refuse_a_grace_period_that_would_overflow_the_wait() -> None:
    with pytest.raises(ConfigError, match="shutdown_grace_s"):
        RunnerSettings(shutdown_grace_s=1e300)
