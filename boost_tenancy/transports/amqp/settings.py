"""Where the AMQP 1.0 broker is (one address or a failover list), how to authenticate to it and
how patient to be with it.

Read from an amqp:// or amqps:// URL (from_url), the BOOST_BROKER_* variables
(transports/options.py) supplying what a URL cannot carry (TLS files, credentials from a file,
the waits).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.options import ConnectOptions, TlsSettings
from boost_tenancy.transports.registry import TransportUrl

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 5672
DEFAULT_TLS_PORT: Final = 5671


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpSettings:
    """Where the broker is, who the client is and how patient to be with it."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    alternates: tuple[tuple[str, int], ...] = ()
    """Further brokers (host, port) of a failover list, tried in turn after host:port."""
    tls: TlsSettings | None = None
    """TLS settings (amqps://); None: a plain TCP connection."""
    username: str | None = None
    """SASL PLAIN with username and password; neither: SASL ANONYMOUS."""
    password: str | None = dataclasses.field(default=None, repr=False)
    vhost: str | None = None
    """The open frame's hostname (RabbitMQ: 'vhost:NAME' selects a virtual host)."""
    connect_timeout_s: float = 5.0
    """Limit on one connection attempt: TCP, TLS, SASL and the broker's open frame."""
    confirm_timeout_s: float = 30.0
    """How long a send, a commit or an attach waits for the broker's answer."""
    reconnect_wait_s: float = 30.0
    """How long an operation waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 5.0
    heartbeat_s: float = 10.0
    """The idle timeout the client asks for: a silent broker is noticed within twice this."""

    def __post_init__(self) -> None:
        for _, port in self.addresses:
            if not 0 < port < 65536:
                raise ConfigError(f"AMQP port must be 1-65535, got {port}")
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

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """Every broker to try, in order: host:port first, then the alternates."""
        return ((self.host, self.port), *self.alternates)

    @property
    def url(self) -> str:
        """The first address proton connects to; credentials travel by SASL, not in it."""
        return self.url_of(0)

    def url_of(self, index: int) -> str:
        """The address of the index-th broker of the list."""
        host, port = self.addresses[index]
        shown = f"[{host}]" if ":" in host else host
        return f"{'amqps' if self.tls is not None else 'amqp'}://{shown}:{port}"

    @classmethod
    def from_url(cls, url: TransportUrl, env: Mapping[str, str] | None = None) -> AmqpSettings:
        """Settings for amqp[s]://[user:password@]host[:port][,host2[:port2]...][/vhost].

        More than one address is a failover list, tried in turn on reconnection. The
        environment (when given) supplies what a URL cannot carry (ConnectOptions.from_env);
        without it those keep their defaults.
        """
        if url.query or url.fragment:
            raise ConfigError(f"AMQP URL {url.redacted!r} takes no query or fragment")
        vhost = url.path.removeprefix("/")
        if "/" in vhost:
            raise ConfigError(
                f"AMQP URL {url.redacted!r} has the path {url.path!r}; "
                "expected at most one segment, the virtual host"
            )
        options = ConnectOptions.from_env(env) if env is not None else ConnectOptions()
        tls = url.scheme == "amqps"
        default_port = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
        addresses = [
            (host or DEFAULT_HOST, default_port if port is None else port)
            for host, port in url.addresses or ((None, None),)
        ]
        username, password = options.username, options.password
        if url.username is not None or url.password is not None:
            username, password = url.username or None, url.password or None
        try:
            return cls(
                host=addresses[0][0],
                port=addresses[0][1],
                alternates=tuple(addresses[1:]),
                tls=options.tls_for(tls),
                username=username,
                password=password,
                vhost=vhost or None,
                connect_timeout_s=options.connect_timeout_s,
                confirm_timeout_s=options.confirm_timeout_s,
                reconnect_wait_s=options.reconnect_wait_s,
                reconnect_initial_s=options.reconnect_initial_s,
                reconnect_max_s=options.reconnect_max_s,
                heartbeat_s=options.heartbeat_s,
            )
        except ConfigError as exc:  # the settings' own messages never carry the password
            raise ConfigError(f"AMQP URL {url.redacted!r}: {exc}") from exc
