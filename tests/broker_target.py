"""The broker the contract and integration suites run against: its flavour, its addresses, and
whether the suite manages it (the local ActiveMQ) or only uses it (an external broker).

Read from the environment (BrokerTarget.from_env) or from the Artemis container that
`pytest --artemis-container` starts (tests/artemis_container.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from proton import ProtonException
from proton.utils import BlockingConnection

from boost_tenancy.envvars import refuse_renamed, secret_from_env
from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.registry import parse_transport_url, redact_url
from boost_tenancy.transports.stomp import BrokerFlavour, StompSettings, StompTransport

FLAVOUR_ENV: Final = "BOOST_TEST_BROKER_FLAVOUR"
"""classic or artemis. Setting it says the broker is external: the suite uses it and never
starts, restarts or kills it. Unset, the broker is the project's local ActiveMQ Classic."""
URL_ENV: Final = "BOOST_BROKER_URL"
"""stomp://[user:password@]host:port of the broker under test: the variable the clients and the
local broker read too (one address; TLS URLs are for the tests that start their own broker)."""
OPENWIRE_PORT_ENV: Final = "BOOST_BROKER_OPENWIRE_PORT"
"""OpenWire port on the same host (the JMS tests); empty or `none` says the broker has none."""
AMQP_URL_ENV: Final = "BOOST_BROKER_AMQP_URL"
"""amqp://host:port of the broker's AMQP 1.0 acceptor; unset, no AMQP test runs."""
USER_ENV: Final = "BOOST_BROKER_USER"
PASSWORD_ENV: Final = "BOOST_BROKER_PASSWORD"

FLAVOURS: Final = {"classic": BrokerFlavour.CLASSIC, "artemis": BrokerFlavour.ARTEMIS}
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_STOMP_PORT: Final = 61613
DEFAULT_OPENWIRE_PORT: Final = 61616
_URL_SPECIAL: Final = "&=?#% "


class BrokerTargetError(ValueError):
    """The environment names no usable broker; the message says which variable is wrong."""


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip() or str(default)
    try:
        port = int(text)
    except ValueError:
        raise BrokerTargetError(f"{name} must be a port number, got {text!r}") from None
    if not 0 < port < 65536:
        raise BrokerTargetError(f"{name} must be 1-65535, got {port}")
    return port


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerTarget:
    """Where the broker under test is, which ActiveMQ it is, and what the suite may do with it."""

    flavour: str
    """classic or artemis: decides which flavour-specific tests run (the classic_only marker)."""
    host: str
    stomp_port: int
    openwire_port: int | None
    amqp_url: str | None
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    external: bool
    """True when the suite did not start the broker and must not restart or kill it; tests of the
    local broker manager (the local_broker marker) are then skipped."""
    origin: str
    """Where the target came from, for the report header and skip reasons."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BrokerTarget:
        declared = env.get(FLAVOUR_ENV, "").strip().lower()
        if declared and declared not in FLAVOURS:
            raise BrokerTargetError(
                f"{FLAVOUR_ENV} must be one of {', '.join(FLAVOURS)}, got {env[FLAVOUR_ENV]!r}"
            )
        openwire_text = env.get(OPENWIRE_PORT_ENV)
        # An external broker has the OpenWire port it is said to have, never the local
        # Classic's default: the JMS tests would test another broker than the declared one.
        openwire = (
            None
            if (openwire_text is None and declared)
            or (openwire_text is not None and openwire_text.strip().lower() in ("", "none"))
            else _port(env, OPENWIRE_PORT_ENV, DEFAULT_OPENWIRE_PORT)
        )
        try:
            refuse_renamed(env)
            url = parse_transport_url(env.get(URL_ENV, "").strip() or "stomp://")
            password = secret_from_env(env, PASSWORD_ENV)
        except ConfigError as exc:
            raise BrokerTargetError(str(exc)) from None
        if url.scheme != "stomp" or len(url.addresses) != 1:
            raise BrokerTargetError(
                f"{URL_ENV} must name one broker by stomp://host:port for the suite, "
                f"got {url.redacted!r}"
            )
        username = env.get(USER_ENV) or None
        if url.username is not None or url.password is not None:
            username, password = url.username or None, url.password or None
        if (username is None) != (password is None):
            raise BrokerTargetError(f"set both {USER_ENV} and {PASSWORD_ENV}, or neither")
        return cls(
            flavour=declared or "classic",
            host=url.host or DEFAULT_HOST,
            stomp_port=_port({URL_ENV: str(url.port or "")}, URL_ENV, DEFAULT_STOMP_PORT),
            openwire_port=openwire,
            amqp_url=env.get(AMQP_URL_ENV, "").strip() or None,
            username=username,
            password=password,
            external=bool(declared),
            origin=f"{FLAVOUR_ENV}={declared}" if declared else "the local broker (scripts/broker)",
        )

    @property
    def broker_flavour(self) -> BrokerFlavour:
        """The transport's name for the flavour, to compare with what CONNECTED says."""
        return FLAVOURS[self.flavour]

    def describe(self) -> str:
        openwire = f"OpenWire {self.openwire_port}" if self.openwire_port else "no OpenWire"
        amqp = self.amqp_url or "no AMQP"
        return (
            f"{self.flavour} broker, STOMP {self.host}:{self.stomp_port}, {openwire}, {amqp}; "
            f"{'external' if self.external else 'managed'}, from {self.origin}"
        )

    def stomp_settings(self, **overrides: Any) -> StompSettings:
        return StompSettings(
            host=self.host,
            port=self.stomp_port,
            username=self.username,
            password=self.password,
            **overrides,
        )

    @property
    def openwire_url(self) -> str | None:
        """The ActiveMQ JMS client's broker URL, credentials included as factory options."""
        if self.openwire_port is None:
            return None
        url = f"tcp://{self.host}:{self.openwire_port}"
        if self.username is not None and self.password is not None:
            login = (self.username, self.password)
            if any(char in value for value in login for char in _URL_SPECIAL):
                # The client reads options without unescaping them (a %26 failed with a
                # NullPointerException inside the client): refuse instead of guessing.
                raise BrokerTargetError(
                    f"{USER_ENV} and {PASSWORD_ENV} cannot contain any of {_URL_SPECIAL!r}: "
                    "the JMS client takes the login as options of its broker URL"
                )
            # ActiveMQConnectionFactory takes "jms."-prefixed URL options as its own properties.
            url += f"?jms.userName={self.username}&jms.password={self.password}"
        return url


def raw_connect_frame(settings: StompSettings) -> bytes:
    """The CONNECT frame a bare-socket STOMP client of the tests sends: with the suite's login
    where the broker requires one (the project's Artemis does, as in production)."""
    login = ""
    if settings.username is not None and settings.password is not None:
        login = f"login:{settings.username}\npasscode:{settings.password}\n"
    return f"CONNECT\naccept-version:1.2\nhost:localhost\n{login}\n\x00".encode()


def stomp_env(settings: StompSettings) -> dict[str, str]:
    """The BOOST_BROKER_* variables that point a worker process at the broker of settings."""
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    env = {URL_ENV: f"stomp://{host}:{settings.port}"}
    if settings.username is not None and settings.password is not None:
        env[USER_ENV] = settings.username
        env[PASSWORD_ENV] = settings.password
    return env


def connected_server(settings: StompSettings) -> tuple[str, BrokerFlavour]:
    """CONNECTED's server header and the flavour it names; raises BoostTenancyError (the
    transport's own, naming the broker) when no broker answers.

    A full handshake with the suite's credentials, not an open port: a broker out of memory
    still accepts TCP, and an Artemis that requires a login refuses an anonymous CONNECT.
    """
    transport = StompTransport(dataclasses.replace(settings, connect_timeout_s=3.0))
    transport.connect()
    try:
        return transport.server, transport.flavour
    finally:
        transport.close()


class AmqpHandshakeError(Exception):
    """No AMQP 1.0 handshake; the message shows the URL with its password masked."""


def amqp_server(url: str, timeout_s: float) -> str:
    """The product and version that the AMQP 1.0 peer at url announces in its open frame
    ("RabbitMQ 3.10.8"), after a full handshake (SASL login and open, then close); raises
    AmqpHandshakeError with the reason when there is none within timeout_s.

    A handshake, not an open port: RabbitMQ's AMQP 0-9-1 listener shares port 5672 and accepts
    TCP whether or not the rabbitmq_amqp1_0 plugin is enabled.
    """
    try:
        connection = BlockingConnection(url, timeout=timeout_s)
    except Exception as exc:  # proton's Timeout and ConnectionException, or a malformed URL
        reason = f"{type(exc).__name__}: {_masked(str(exc), url)}"
    else:
        try:
            properties = connection.conn.remote_properties or {}
            container = connection.conn.remote_container
        finally:
            # The handshake is what was asked; a peer slow to answer close does not undo it.
            with contextlib.suppress(ProtonException):
                connection.close()
        product = " ".join(
            str(properties[key]) for key in ("product", "version") if key in properties
        )
        return product or f"an AMQP 1.0 peer announcing no product (container {container!r})"
    # Raised outside the handler so that no context keeps proton's message, which shows the URL
    # with its password.
    raise AmqpHandshakeError(
        f"no AMQP 1.0 handshake with {redact_url(url)} within {timeout_s:g} s: {reason}"
    )


def amqp_handshake(url: str, timeout_s: float) -> str | None:
    """None when an AMQP 1.0 handshake with url succeeds within timeout_s, else the reason
    (password masked); see amqp_server."""
    try:
        amqp_server(url, timeout_s)
    except AmqpHandshakeError as exc:
        return str(exc)
    return None


def _masked(text: str, url: str) -> str:
    """text with url, and any other mention of its password, masked as redact_url does."""
    text = text.replace(url, redact_url(url))
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(f":{password}@", ":***@") if password else text
