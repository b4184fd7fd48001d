"""One set of BOOST_BROKER_* variables for every protocol: credentials (from a file too), TLS,
the waits, each validated with an error naming the variable and never showing a secret; the
names used before are refused naming their replacement; a failover list of addresses is tried
in order, at connect and on reconnection."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.environment import connect_options_from_env, stomp_settings_from_env
from boost_tenancy.envvars import RENAMED
from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.amqp import AmqpSettings, AmqpTransport
from boost_tenancy.transports.options import ConnectOptions, TlsSettings
from boost_tenancy.transports.registry import parse_transport_url
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import wait_until
from tests.unit.test_stomp_connect import Peer, closes_promptly

SECRET = "pa55-w0rd-never-shown"
WAITS = (
    "BOOST_BROKER_CONNECT_TIMEOUT_S",
    "BOOST_BROKER_CONFIRM_TIMEOUT_S",
    "BOOST_BROKER_RECONNECT_INITIAL_S",
    "BOOST_BROKER_RECONNECT_MAX_S",
    "BOOST_BROKER_HEARTBEAT_S",
)


# -- the waits ------------------------------------------------------------------------------------
def test_every_wait_is_read_and_reaches_both_protocols() -> None:
    env = {
        "BOOST_BROKER_CONNECT_TIMEOUT_S": "2.5",
        "BOOST_BROKER_CONFIRM_TIMEOUT_S": "12",
        "BOOST_BROKER_RECONNECT_WAIT_S": "0",
        "BOOST_BROKER_RECONNECT_INITIAL_S": "0.5",
        "BOOST_BROKER_RECONNECT_MAX_S": "20",
        "BOOST_BROKER_HEARTBEAT_S": "4",
    }
    stomp = stomp_settings_from_env(env)
    assert (
        stomp.connect_timeout_s,
        stomp.receipt_timeout_s,
        stomp.reconnect_wait_s,
        stomp.reconnect_initial_s,
        stomp.reconnect_max_s,
        stomp.heartbeat_ms,
    ) == (2.5, 12.0, 0.0, 0.5, 20.0, 4000)
    amqp = AmqpSettings.from_url(parse_transport_url("amqp://h"), connect_options_from_env(env))
    assert (
        amqp.connect_timeout_s,
        amqp.confirm_timeout_s,
        amqp.reconnect_wait_s,
        amqp.reconnect_initial_s,
        amqp.reconnect_max_s,
        amqp.heartbeat_s,
    ) == (2.5, 12.0, 0.0, 0.5, 20.0, 4.0)


def test_the_defaults_apply_when_nothing_is_set() -> None:
    options = connect_options_from_env({})
    assert options == ConnectOptions()
    assert (options.connect_timeout_s, options.confirm_timeout_s) == (5.0, 30.0)
    assert (options.reconnect_initial_s, options.reconnect_max_s) == (0.2, 5.0)


@pytest.mark.parametrize("variable", WAITS)
@pytest.mark.parametrize("raw", ["-1", "0", "nan", "inf", "-inf", "soon"])
def test_a_wait_that_cannot_be_waited_on_stops_start_up_naming_it(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        AppSettings.from_env({variable: raw})


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "soon"])
def test_reconnect_wait_may_be_zero_but_not_negative_or_endless(raw: str) -> None:
    assert connect_options_from_env({"BOOST_BROKER_RECONNECT_WAIT_S": "0"}).reconnect_wait_s == 0
    with pytest.raises(ConfigError, match="BOOST_BROKER_RECONNECT_WAIT_S"):
        connect_options_from_env({"BOOST_BROKER_RECONNECT_WAIT_S": raw})


def test_a_maximum_backoff_below_the_initial_one_names_both() -> None:
    env = {"BOOST_BROKER_RECONNECT_INITIAL_S": "3", "BOOST_BROKER_RECONNECT_MAX_S": "1"}
    with pytest.raises(ConfigError, match=r"RECONNECT_MAX_S.*RECONNECT_INITIAL_S"):
        connect_options_from_env(env)


# -- credentials ----------------------------------------------------------------------------------
def test_the_password_is_read_from_a_file_without_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text(f"{SECRET}\n")
    env = {"BOOST_BROKER_USER": "svc", "BOOST_BROKER_PASSWORD_FILE": str(path)}
    settings = stomp_settings_from_env(env)
    assert (settings.username, settings.password) == ("svc", SECRET)
    amqp = AmqpSettings.from_url(parse_transport_url("amqp://h"), connect_options_from_env(env))
    assert (amqp.username, amqp.password) == ("svc", SECRET)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read it"), ("", "is empty"), ("\n", "is empty"), ("a\nb\n", "one line")],
)
def test_an_unusable_password_file_is_named(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "password"
    if content is not None:
        path.write_text(content)
    env = {"BOOST_BROKER_USER": "svc", "BOOST_BROKER_PASSWORD_FILE": str(path)}
    with pytest.raises(ConfigError, match=f"BOOST_BROKER_PASSWORD_FILE=.*{problem}"):
        AppSettings.from_env(env)


def test_a_password_and_a_password_file_together_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text(SECRET)
    env = {
        "BOOST_BROKER_USER": "svc",
        "BOOST_BROKER_PASSWORD": "other",
        "BOOST_BROKER_PASSWORD_FILE": str(path),
    }
    with pytest.raises(ConfigError, match="BOOST_BROKER_PASSWORD or BOOST_BROKER_PASSWORD_FILE"):
        connect_options_from_env(env)


def test_a_password_never_shows_in_settings_errors_or_logs(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text(SECRET)
    env = {
        "BOOST_BROKER_URL": f"stomp://127.0.0.1:{_closed_port()}",
        "BOOST_BROKER_USER": "svc",
        "BOOST_BROKER_PASSWORD_FILE": str(path),
    }
    settings = AppSettings.from_env(env)
    assert SECRET not in repr(settings)
    with pytest.raises(ConfigError) as caught:
        AppSettings.from_env({**env, "BOOST_BROKER_URL": "stomp://127.0.0.1:0"})
    assert SECRET not in str(caught.value)
    assert settings.stomp is not None
    transport = StompTransport(settings.stomp)
    with structlog.testing.capture_logs() as logs, pytest.raises(Exception) as failed:
        transport.connect()
    assert SECRET not in str(failed.value)
    assert SECRET not in repr(logs)


# -- TLS ------------------------------------------------------------------------------------------
def test_tls_settings_come_from_the_shared_variables(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / name for name in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_text("pem")
    env = {
        "BOOST_BROKER_CA_FILE": str(ca),
        "BOOST_BROKER_CERT_FILE": str(cert),
        "BOOST_BROKER_KEY_FILE": str(key),
        "BOOST_BROKER_KEY_PASSWORD": SECRET,
        "BOOST_BROKER_VERIFY_HOST": "off",
    }
    expected = TlsSettings(
        ca_file=str(ca),
        cert_file=str(cert),
        key_file=str(key),
        key_password=SECRET,
        verify_host=False,
    )
    assert stomp_settings_from_env({**env, "BOOST_BROKER_URL": "stomp+ssl://h"}).tls == expected
    options = connect_options_from_env(env)
    assert AmqpSettings.from_url(parse_transport_url("amqps://h"), options).tls == expected
    assert SECRET not in repr(expected)


def test_the_host_name_check_is_on_unless_turned_off() -> None:
    settings = stomp_settings_from_env({"BOOST_BROKER_URL": "stomps://h"})
    assert settings.tls is not None and settings.tls.verify_host
    with pytest.raises(ConfigError, match="BOOST_BROKER_VERIFY_HOST"):
        stomp_settings_from_env({"BOOST_BROKER_URL": "stomps://h", "BOOST_BROKER_VERIFY_HOST": "?"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"BOOST_BROKER_CA_FILE": "/nonexistent/ca.pem"},
            "BOOST_BROKER_CA_FILE names '/nonexistent/ca.pem', which is no file",
        ),
        (
            {"BOOST_BROKER_CERT_FILE": "/etc/hostname"},
            "a client certificate needs its key: set both, or neither (BOOST_BROKER_CERT_FILE)",
        ),
        (
            {"BOOST_BROKER_KEY_PASSWORD": "x"},
            "a key password is given without a client key (BOOST_BROKER_KEY_PASSWORD)",
        ),
    ],
)
def test_unusable_tls_files_are_refused_naming_the_variables_set(
    env: dict[str, str], message: str
) -> None:
    """The variables that were set, not every TLS variable there is."""
    with pytest.raises(ConfigError) as caught:
        stomp_settings_from_env({**env, "BOOST_BROKER_URL": "stomp+ssl://h"})
    assert str(caught.value) == message


def test_tls_settings_with_a_plain_url_are_refused_rather_than_ignored() -> None:
    env = {"BOOST_BROKER_URL": "stomp://h", "BOOST_BROKER_VERIFY_HOST": "off"}
    with pytest.raises(ConfigError) as caught:
        AppSettings.from_env(env)
    assert ": BOOST_BROKER_VERIFY_HOST apply to TLS URLs only" in str(caught.value)


# -- the names used before ------------------------------------------------------------------------
@pytest.mark.parametrize("old", sorted(RENAMED))
def test_every_old_variable_stops_start_up_naming_its_replacement(old: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AppSettings.from_env({old: "1"})
    assert f"{old} -> {RENAMED[old]}" in str(caught.value)


def test_the_url_names_the_protocol_and_an_amqp_url_has_no_stomp_settings() -> None:
    settings = AppSettings.from_env({"BOOST_BROKER_URL": "amqp://h:5672"})
    assert settings.stomp is None
    assert settings.transport_url() == "amqp://h:5672"
    with pytest.raises(ConfigError, match="BOOST_BROKER_URL: 'amqp://h:5672' is not a STOMP URL"):
        stomp_settings_from_env({"BOOST_BROKER_URL": "amqp://h:5672"})


# -- failover -------------------------------------------------------------------------------------
def test_an_amqp_failover_list_keeps_its_order_and_default_ports() -> None:
    settings = AmqpSettings.from_url(parse_transport_url("amqps://a,b:5673,[::1]"))
    assert settings.addresses == (("a", 5671), ("b", 5673), ("::1", 5671))
    assert [settings.url_of(i) for i in range(3)] == [
        "amqps://a:5671",
        "amqps://b:5673",
        "amqps://[::1]:5671",
    ]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def backup() -> Iterator[Peer]:
    running = Peer("connected")
    yield running
    running.stop()


def test_connect_goes_on_to_the_next_address_when_the_first_is_down(backup: Peer) -> None:
    down = _closed_port()
    settings = stomp_settings_from_env(
        {"BOOST_BROKER_URL": f"stomp://127.0.0.1:{down},127.0.0.1:{backup.port}"}
    )
    transport = StompTransport(settings)
    transport.connect()
    try:
        assert transport._connection.where == f"127.0.0.1:{backup.port}"
        assert len(backup.accepted) == 1
    finally:
        assert closes_promptly(transport)


def test_connect_fails_naming_every_address_when_none_answers() -> None:
    first, second = _closed_port(), _closed_port()
    settings = StompSettings(port=first, alternates=(("127.0.0.1", second),), connect_timeout_s=1.0)
    transport = StompTransport(settings)
    with pytest.raises(Exception, match=rf"failover list.*:{first}.*:{second}"):
        transport.connect()
    assert closes_promptly(transport)


def test_a_lost_connection_moves_on_to_the_next_address(backup: Peer) -> None:
    """The first broker accepts once and then closes every connection: the reconnection tries
    it once more, then moves to the backup and stays there."""
    live = Peer("once")
    try:
        settings = StompSettings(
            port=live.port,
            alternates=(("127.0.0.1", backup.port),),
            reconnect_initial_s=0.05,
            reconnect_max_s=0.2,
        )
        transport = StompTransport(settings)
        transport.connect()
        assert transport._connection.where == f"127.0.0.1:{live.port}"
        assert wait_until(lambda: len(backup.accepted) == 1, 15), "never moved to the backup"
        assert wait_until(lambda: transport.is_connected, 15)
        assert transport._connection.where == f"127.0.0.1:{backup.port}"
        assert closes_promptly(transport)
    finally:
        live.stop()


def test_the_process_environment_is_not_read_by_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, "BOOST_BROKER_URL", "stomp://elsewhere:1")
    assert StompSettings().host == "127.0.0.1"
    assert stomp_settings_from_env({}).host == "127.0.0.1"


@pytest.mark.amqp_broker
def test_amqp_connect_goes_on_to_the_next_address(amqp_url: str) -> None:
    """A real AMQP 1.0 broker second in the list, after an address nothing listens on."""
    scheme, _, rest = amqp_url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    failover = f"{scheme}://{userinfo}{at}127.0.0.1:{_closed_port()},{hosts}"
    transport = open_transport(failover, {"BOOST_BROKER_CONNECT_TIMEOUT_S": "3"})
    assert isinstance(transport, AmqpTransport)
    transport.connect()
    try:
        assert transport.is_connected
        assert transport._engine.url.endswith(hosts.partition("/")[0])
    finally:
        transport.close()
