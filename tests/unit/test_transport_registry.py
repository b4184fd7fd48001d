"""Transports chosen by URL: stomp:// settings from the URL over the environment over the
defaults, clear errors that never show a password, and schemes registered from outside."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.errors import ConfigError
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports import registry
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import (
    TransportUrl,
    known_schemes,
    parse_transport_url,
    redact_url,
    register_transport,
)
from boost_tenancy.transports.stomp import StompSettings, StompTransport

SECRET = "s3cr:t/@pw"
"""A password with every character that needs percent-encoding in a URL's user part."""
ENCODED_SECRET = "s3cr%3At%2F%40pw"


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Schemes registered by a test are gone after it."""
    monkeypatch.setattr(registry, "_registered", {})
    yield


def settings_of(url: str, env: Mapping[str, str] | None = None) -> StompSettings:
    transport = open_transport(url, env)
    assert isinstance(transport, StompTransport)
    assert not transport.is_connected, "open_transport must not connect"
    return transport._settings


def test_a_bare_stomp_url_takes_the_default_host_and_port() -> None:
    settings = settings_of("stomp://")
    assert (settings.host, settings.port, settings.username, settings.vhost) == (
        "127.0.0.1",
        61613,
        None,
        None,
    )


def test_a_full_stomp_url_names_host_port_credentials_and_vhost() -> None:
    settings = settings_of(f"stomp://svc-user:{ENCODED_SECRET}@broker.example:61614/tenants")
    assert settings.host == "broker.example"
    assert settings.port == 61614
    assert settings.username == "svc-user"
    assert settings.password == SECRET
    assert settings.vhost == "tenants"


def test_an_ipv6_host_is_read_without_its_brackets() -> None:
    assert settings_of("stomp://[::1]:61615").host == "::1"


def test_the_environment_fills_what_the_url_does_not_name_and_the_url_wins() -> None:
    env = {
        "BOOST_BROKER_USER": "env-user",
        "BOOST_BROKER_PASSWORD": "env-pw",
        "BOOST_BROKER_CONNECT_TIMEOUT_S": "2.5",
    }
    only_env = settings_of("stomp://", env)
    assert (only_env.username, only_env.password) == ("env-user", "env-pw")
    assert only_env.connect_timeout_s == 2.5

    merged = settings_of("stomp://url-user:url-pw@url-host:7001/url-vhost", env)
    assert (merged.host, merged.port, merged.username, merged.password, merged.vhost) == (
        "url-host",
        7001,
        "url-user",
        "url-pw",
        "url-vhost",
    )
    assert merged.connect_timeout_s == 2.5, "a setting the URL cannot name comes from env"


def test_without_env_the_environment_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOST_BROKER_USER", "process-env-user")
    monkeypatch.setenv("BOOST_BROKER_PASSWORD", "process-env-pw")
    assert settings_of("stomp://").username is None


def test_a_user_in_the_url_brings_its_password_from_the_url_not_from_env() -> None:
    env = {"BOOST_BROKER_USER": "env-user", "BOOST_BROKER_PASSWORD": "env-pw"}
    with pytest.raises(ConfigError, match="username and password"):
        open_transport("stomp://url-user@host", env)


def test_a_comma_in_a_password_is_no_list() -> None:
    parsed = parse_transport_url("amqp://guest:a,b@h1:1,h2:2")
    assert (parsed.password, parsed.addresses) == ("a,b", (("h1", 1), ("h2", 2)))


def test_a_list_of_addresses_is_a_failover_list_in_order() -> None:
    settings = settings_of("stomp://u:p@live.example:61613,backup.example,[::1]:61615/vh")
    assert settings.addresses == (
        ("live.example", 61613),
        ("backup.example", 61613),
        ("::1", 61615),
    )
    assert (settings.host, settings.port, settings.vhost) == ("live.example", 61613, "vh")
    assert parse_transport_url("stomp://a:1,b:2").addresses == (("a", 1), ("b", 2))


@pytest.mark.parametrize("scheme", ["stomp+ssl", "stomps"])
def test_a_tls_scheme_turns_tls_on_with_its_own_default_port(scheme: str) -> None:
    settings = settings_of(f"{scheme}://broker.example")
    assert settings.tls is not None and settings.tls.verify_host
    assert settings.port == 61612
    assert settings_of("stomp://broker.example").tls is None


def test_the_artemis_window_comes_from_the_environment_beside_a_url() -> None:
    env = {"BOOST_ARTEMIS_WINDOW_BYTES": "2048"}
    assert settings_of("stomp://broker", env).artemis_window_bytes == 2048
    assert settings_of("stomp://broker").artemis_window_bytes == 64 * 1024


def test_the_scheme_is_case_insensitive() -> None:
    assert settings_of("STOMP://Broker.Example").host == "broker.example"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("mqtt://host", r"unknown transport scheme 'mqtt'; known: amqp, amqps, stomp, stomp\+ssl"),
        ("127.0.0.1:61613", r"malformed: expected scheme://"),
        ("", r"malformed"),
        ("stomp://host:notaport", r"malformed \(host or port\)"),
        ("stomp://host:70000", r"malformed \(host or port\)"),
        ("stomp://[::1", r"malformed \(host or port\)"),
        ("stomp://host:0", r"port must be 1-65535"),
        ("stomp://host/a/b", r"at most one segment"),
        ("stomp://host?heartbeat=1", r"no query or fragment"),
        ("stomp://host#x", r"no query or fragment"),
        ("stomp://ho st", r"blanks or controls"),
        ("stomp://host\n", r"blanks or controls"),
        ("stomp://user@host", r"username and password"),
        ("stomp://:pw@host", r"username and password"),
        ("stomp://a:1,,b:2", r"malformed \(host or port\)"),
        ("stomp://a:1,b:x", r"malformed \(host or port\)"),
        ("stomp://a:1,b:0", r"port must be 1-65535"),
        ("stomp://a,", r"malformed \(host or port\)"),
        # A raw '#' in the password leaves a port that cannot be: say what to encode.
        ("amqp://guest:s3cr#t@127.0.0.1:5672", r"\(host or port\): percent-encode '@', '/'"),
        ("amqp://127.0.0.1:5673,guest:guest@127.0.0.1:5672", r"login after the first address"),
    ],
)
def test_bad_urls_raise_config_error_naming_the_problem(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        open_transport(url)


@pytest.mark.parametrize(
    "url",
    [
        f"stomp://user:{SECRET}@host:notaport",
        f"stomp://user:{ENCODED_SECRET}@host:0",
        f"stomp://user:{ENCODED_SECRET}@host/a/b",
        f"stomp://user:{ENCODED_SECRET}@host?x=1",
        f"stomp://user:{ENCODED_SECRET}@[::1",
        f"stomp://user:{ENCODED_SECRET}@ho st",
        f"mqtt://user:{ENCODED_SECRET}@host",
        f"user:{ENCODED_SECRET}@host",
        f"nothing-but:{ENCODED_SECRET}",
    ],
)
def test_no_error_shows_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_transport(url)
    shown = "".join(
        str(error) for error in (caught.value, caught.value.__cause__, caught.value.__context__)
    )
    for secret in (SECRET, ENCODED_SECRET, "s3cr"):
        assert secret not in shown, shown


def test_a_parsed_url_never_shows_its_password_in_repr() -> None:
    parsed = parse_transport_url(f"stomp://user:{ENCODED_SECRET}@host")
    assert parsed.password == SECRET
    assert "s3cr" not in repr(parsed)
    assert parsed.redacted == "stomp://user:***@host"
    assert "s3cr" not in repr(settings_of(f"stomp://user:{ENCODED_SECRET}@host"))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("stomp://host:1/v", "stomp://host:1/v"),
        ("stomp://user@host", "stomp://user@host"),
        ("stomp://user:pw@host:1/v", "stomp://user:***@host:1/v"),
        ("stomp://user:p@w@host", "stomp://user:***@host"),
        ("user:pw@host", "***"),
        ("localhost:61613", "***"),
        ("localhost", "localhost"),
    ],
)
def test_redact_url_masks_only_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_registered_scheme_is_opened_with_the_parsed_url_and_options() -> None:
    broker = InMemoryBroker()
    seen: list[tuple[TransportUrl, ConnectOptions | None]] = []

    def factory(url: TransportUrl, options: ConnectOptions | None) -> Transport:
        seen.append((url, options))
        return InMemoryTransport(broker)

    register_transport("Memory+Test", factory)
    assert "memory+test" in known_schemes()
    options = ConnectOptions(connect_timeout_s=2.5)
    transport = registry.open_transport("memory+test://someone:p%40ss@here:99/path%20x", options)
    assert isinstance(transport, InMemoryTransport)
    [(url, given_options)] = seen
    assert given_options is options
    assert (url.scheme, url.username, url.password, url.host, url.port, url.path) == (
        "memory+test",
        "someone",
        "p@ss",
        "here",
        99,
        "/path x",
    )
    broker.close()


def test_a_registered_scheme_replaces_a_built_in_one() -> None:
    broker = InMemoryBroker()
    register_transport("stomp", lambda url, options: InMemoryTransport(broker))
    assert isinstance(open_transport("stomp://host"), InMemoryTransport)
    broker.close()


def test_unknown_scheme_errors_name_registered_schemes_too() -> None:
    register_transport("kafka", lambda url, options: StompTransport())
    with pytest.raises(ConfigError, match="known: amqp, amqps, kafka, stomp"):
        open_transport("mqtt://host")


@pytest.mark.parametrize("scheme", ["", "1abc", "a b", "stomp://", "ab_c"])
def test_a_scheme_that_is_no_url_scheme_cannot_be_registered(scheme: str) -> None:
    with pytest.raises(ConfigError, match="not a URL scheme"):
        register_transport(scheme, lambda url, options: StompTransport())


@pytest.mark.parametrize("url", ["stomp://user:12/cd@host", "stomp://user:12?ab@host"])
def test_a_password_with_a_raw_delimiter_is_refused_not_read_as_a_path(url: str) -> None:
    with pytest.raises(ConfigError, match="malformed") as caught:
        open_transport(url)
    assert "cd" not in str(caught.value)
    assert "ab" not in str(caught.value)
