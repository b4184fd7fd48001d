"""Settings from BOOST_* variables: documented defaults; a ConfigError names each bad variable."""

from __future__ import annotations

import pytest

from boost_tenancy.config import DEFAULT_ERROR_STORE, AppSettings
from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.stomp import StompSettings


def test_defaults_apply_when_nothing_is_set() -> None:
    settings = AppSettings.from_env({})
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
    retry = settings.runner.dispatch.retry
    assert (retry.max_attempts, retry.base_delay_ms, retry.max_delay_ms) == (5, 1_000, 60_000)
    assert settings.error_store_url == DEFAULT_ERROR_STORE
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
    "fields", [{"receipt_timeout_s": 0.0}, {"receipt_timeout_s": -1.0}, {"reconnect_wait_s": -1.0}]
)
def test_stomp_settings_refuse_non_positive_timeouts(fields: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="STOMP timeouts must be positive"):
        StompSettings(**fields)  # type: ignore[arg-type]


def test_unknown_log_level_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="BOOST_LOG_LEVEL"):
        AppSettings.from_env({"BOOST_LOG_LEVEL": "verbose"})
