"""Where the AMQP 1.0 broker is, how to authenticate to it and how patient to be with it.

Read from an amqp:// or amqps:// URL (from_url), the BOOST_AMQP_* variables supplying what a URL
cannot carry (TLS files, timeouts).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from boost_tenancy.envvars import env_flag, env_float
from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.registry import TransportUrl

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 5672
DEFAULT_TLS_PORT: Final = 5671
_DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
_DEFAULT_CONFIRM_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpSettings:
    """Where the broker is, who the client is and how patient to be with it."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    tls: bool = False
    username: str | None = None
    """SASL PLAIN with username and password; neither: SASL ANONYMOUS."""
    password: str | None = dataclasses.field(default=None, repr=False)
    vhost: str | None = None
    """The open frame's hostname (RabbitMQ: 'vhost:NAME' selects a virtual host)."""
    ca_file: str | None = None
    """PEM file of the CAs that may sign the broker's certificate; None: the system's."""
    cert_file: str | None = None
    """PEM client certificate, for brokers that authenticate clients by certificate."""
    key_file: str | None = None
    key_password: str | None = dataclasses.field(default=None, repr=False)
    verify_host: bool = True
    """Check that the broker's certificate names host (off only for test certificates)."""
    connect_timeout_s: float = _DEFAULT_CONNECT_TIMEOUT_S
    """Limit on one connection attempt: TCP, TLS, SASL and the broker's open frame."""
    confirm_timeout_s: float = _DEFAULT_CONFIRM_TIMEOUT_S
    """How long a send, a commit or an attach waits for the broker's answer."""
    reconnect_wait_s: float = 30.0
    """How long an operation waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 5.0
    heartbeat_s: float = 10.0
    """The idle timeout the client asks for: a silent broker is noticed within twice this."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"AMQP port must be 1-65535, got {self.port}")
        # Written as ranges so NaN fails too; an infinite timeout cannot be waited on.
        for name in ("connect_timeout_s", "confirm_timeout_s", "heartbeat_s"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ConfigError(f"AMQP {name} must be a positive number, got {value}")
        if not 0 <= self.reconnect_wait_s < math.inf:
            raise ConfigError(f"AMQP reconnect_wait_s must be >= 0, got {self.reconnect_wait_s}")
        if not 0 < self.reconnect_initial_s <= self.reconnect_max_s < math.inf:
            raise ConfigError(
                "AMQP reconnect delays must satisfy 0 < reconnect_initial_s <= reconnect_max_s, "
                f"got {self.reconnect_initial_s} and {self.reconnect_max_s}"
            )
        if (self.username is None) != (self.password is None):
            raise ConfigError("set both the broker username and password, or neither")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("a client certificate needs its key: set both, or neither")
        tls_files = (self.ca_file, self.cert_file, self.key_file)
        if not self.tls and any(path is not None for path in tls_files):
            raise ConfigError("TLS files are given but the URL is not amqps://")
        for path in tls_files:
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"TLS file {path!r} does not exist")

    @property
    def url(self) -> str:
        """The address proton connects to; credentials travel by SASL, not in it."""
        return f"{'amqps' if self.tls else 'amqp'}://{self.host}:{self.port}"

    @classmethod
    def from_url(cls, url: TransportUrl, env: Mapping[str, str] | None = None) -> AmqpSettings:
        """Settings for amqp[s]://[user:password@]host[:port][/vhost].

        The environment (when given) supplies what a URL cannot carry: BOOST_AMQP_CA_FILE,
        BOOST_AMQP_CERT_FILE, BOOST_AMQP_KEY_FILE, BOOST_AMQP_KEY_PASSWORD,
        BOOST_AMQP_VERIFY_HOST, BOOST_AMQP_CONNECT_TIMEOUT_S and BOOST_AMQP_CONFIRM_TIMEOUT_S.
        """
        if url.query or url.fragment:
            raise ConfigError(f"AMQP URL {url.redacted!r} takes no query or fragment")
        vhost = url.path.removeprefix("/")
        if "/" in vhost:
            raise ConfigError(
                f"AMQP URL {url.redacted!r} has the path {url.path!r}; "
                "expected at most one segment, the virtual host"
            )
        tls = url.scheme == "amqps"
        changes: dict[str, Any] = {
            "tls": tls,
            "host": url.host or DEFAULT_HOST,
            "port": url.port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT),
            "vhost": vhost or None,
        }
        if url.username is not None or url.password is not None:
            changes["username"] = url.username or None
            changes["password"] = url.password or None
        if env is not None:
            changes.update(_from_env(env))
        try:
            return cls(**changes)
        except ConfigError as exc:  # the settings' own messages never carry the password
            raise ConfigError(f"AMQP URL {url.redacted!r}: {exc}") from exc


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for name, field in (
        ("BOOST_AMQP_CA_FILE", "ca_file"),
        ("BOOST_AMQP_CERT_FILE", "cert_file"),
        ("BOOST_AMQP_KEY_FILE", "key_file"),
        ("BOOST_AMQP_KEY_PASSWORD", "key_password"),
    ):
        value = env.get(name, "").strip()
        if value:
            changes[field] = value
    if env.get("BOOST_AMQP_VERIFY_HOST", "").strip():
        changes["verify_host"] = env_flag(env, "BOOST_AMQP_VERIFY_HOST")
    timeouts: tuple[tuple[str, str, float], ...] = (
        ("BOOST_AMQP_CONNECT_TIMEOUT_S", "connect_timeout_s", _DEFAULT_CONNECT_TIMEOUT_S),
        ("BOOST_AMQP_CONFIRM_TIMEOUT_S", "confirm_timeout_s", _DEFAULT_CONFIRM_TIMEOUT_S),
    )
    for name, attribute, default in timeouts:
        seconds = env_float(env, name, default)
        if not 0 < seconds < math.inf:
            raise ConfigError(f"{name} must be a positive number of seconds, got {env[name]!r}")
        changes[attribute] = seconds
    return changes
