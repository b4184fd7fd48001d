"""Where the AMQP 1.0 broker is (one address or a failover list), how to authenticate to it and
how patient to be with it.

Read from an amqp:// or amqps:// URL (from_url), the BOOST_BROKER_* variables
(transports/options.py) supplying what a URL cannot carry (TLS files, credentials from a file,
the waits).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.endpoint import DEFAULT_HOST, ConnectionSettings
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import TransportUrl

DEFAULT_PORT: Final = 5672
DEFAULT_TLS_PORT: Final = 5671


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpSettings(ConnectionSettings):
    """The connection settings (ConnectionSettings) with AMQP's own. Credentials mean SASL PLAIN
    (neither: SASL ANONYMOUS); the vhost is the open frame's hostname (RabbitMQ: 'vhost:NAME'
    selects a virtual host); connect_timeout_s covers SASL too."""

    PROTOCOL: ClassVar[str] = "AMQP"

    port: int = DEFAULT_PORT
    confirm_timeout_s: float = 30.0
    """How long a send, a commit or an attach waits for the broker's answer."""
    heartbeat_s: float = 10.0
    """The idle timeout the client asks for: a silent broker is noticed within twice this."""

    def __post_init__(self) -> None:
        ConnectionSettings.__post_init__(self)
        # Written as ranges so NaN fails too; an infinite timeout cannot be waited on.
        for name in ("confirm_timeout_s", "heartbeat_s"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ConfigError(f"AMQP {name} must be a positive number, got {value}")

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
