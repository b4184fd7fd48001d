"""Where the STOMP broker is (one address or a failover list), whether to use TLS and how
patient to be with it.

Read from a stomp:// or stomp+ssl:// URL (from_url) and the BOOST_BROKER_* variables
(transports/options.py), or from BOOST_BROKER_URL itself (from_env).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from boost_tenancy.envvars import env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.endpoint import DEFAULT_HOST, ConnectionSettings
from boost_tenancy.transports.options import DEFAULT_URL, ENV_URL, ConnectOptions
from boost_tenancy.transports.registry import TransportUrl, parse_transport_url

DEFAULT_PORT: Final = 61613
DEFAULT_TLS_PORT: Final = 61612
"""The port of the stomp+ssl connector in ActiveMQ's own examples."""
TLS_SCHEMES: Final = ("stomp+ssl", "stomps")
"""stomp+ssl:// is the name the Classic and Artemis connectors use; stomps:// means the same."""
SCHEMES: Final = ("stomp", *TLS_SCHEMES)
DEFAULT_ARTEMIS_WINDOW_BYTES: Final = 64 * 1024
"""Bytes of Artemis consumer window per prefetched message: room for a JSON document of tens of
KiB. Measured on Artemis 2.44: 1 KiB messages with a 1 MiB window 7.4k msg/s, one at a time
1.3-2.1k msg/s."""
MAX_ARTEMIS_WINDOW_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class StompSettings(ConnectionSettings):
    """The connection settings (ConnectionSettings) with STOMP's own: receipts, heartbeats and
    Artemis's consumer window."""

    PROTOCOL: ClassVar[str] = "STOMP"

    port: int = DEFAULT_PORT
    heartbeat_ms: int = 10_000
    receipt_timeout_s: float = 30.0
    """How long a send, a commit or a subscription waits for the broker's receipt."""
    artemis_window_bytes: int = DEFAULT_ARTEMIS_WINDOW_BYTES
    """The expected size of one message on Artemis, in bytes: a subscription's consumer window
    (Artemis counts prefetch in bytes) is prefetch times this. Smaller messages are then more in
    flight, larger ones fewer, and one larger than the whole window still comes alone."""

    def __post_init__(self) -> None:
        ConnectionSettings.__post_init__(self)
        if not 0 < self.receipt_timeout_s < math.inf:
            raise ConfigError(
                f"STOMP timeouts must be positive: receipt_timeout_s={self.receipt_timeout_s}"
            )
        if self.heartbeat_ms <= 0:
            raise ConfigError(f"STOMP heartbeat_ms must be positive, got {self.heartbeat_ms}")
        if not 1 <= self.artemis_window_bytes <= MAX_ARTEMIS_WINDOW_BYTES:
            raise ConfigError(
                f"artemis_window_bytes must be 1-{MAX_ARTEMIS_WINDOW_BYTES} bytes per message, "
                f"got {self.artemis_window_bytes}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StompSettings:
        """Settings for BOOST_BROKER_URL (default stomp://127.0.0.1:61613) and the other
        BOOST_BROKER_* variables (transports/options.py); errors name the variable."""
        options = ConnectOptions.from_env(env)
        window = _window_from_env(env)
        try:
            url = parse_transport_url(env.get(ENV_URL, "").strip() or DEFAULT_URL)
            if url.scheme not in SCHEMES:
                raise ConfigError(f"{url.redacted!r} is not a STOMP URL ({', '.join(SCHEMES)})")
            return cls._from_url(url, options, window)
        except ConfigError as exc:
            raise ConfigError(f"{ENV_URL}: {exc}") from None

    @classmethod
    def from_url(cls, url: TransportUrl, env: Mapping[str, str] | None = None) -> StompSettings:
        """Settings for stomp://[user:password@]host[:port][,host2[:port2]...][/vhost], or
        stomp+ssl:// (stomps://) for TLS.

        More than one address is a failover list: the first is connected to first, and a
        reconnection moves on to the next after each failed attempt. The environment (when
        given) supplies what a URL cannot carry (ConnectOptions.from_env and
        BOOST_ARTEMIS_WINDOW_BYTES); without it those keep their defaults. A user in the URL
        names the credentials as a pair: its password is taken from the URL too (never half
        from the environment).
        """
        if env is None:
            return cls._from_url(url, ConnectOptions(), DEFAULT_ARTEMIS_WINDOW_BYTES)
        return cls._from_url(url, ConnectOptions.from_env(env), _window_from_env(env))

    @classmethod
    def _from_url(cls, url: TransportUrl, options: ConnectOptions, window: int) -> StompSettings:
        if url.query or url.fragment:
            raise ConfigError(f"STOMP URL {url.redacted!r} takes no query or fragment")
        vhost = url.path.removeprefix("/")
        if "/" in vhost:
            raise ConfigError(
                f"STOMP URL {url.redacted!r} has the path {url.path!r}; "
                "expected at most one segment, the virtual host"
            )
        tls = url.scheme in TLS_SCHEMES
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
                username=username,
                password=password,
                vhost=vhost or None,
                tls=options.tls_for(tls),
                heartbeat_ms=round(options.heartbeat_s * 1000),
                connect_timeout_s=options.connect_timeout_s,
                receipt_timeout_s=options.confirm_timeout_s,
                reconnect_wait_s=options.reconnect_wait_s,
                reconnect_initial_s=options.reconnect_initial_s,
                reconnect_max_s=options.reconnect_max_s,
                artemis_window_bytes=window,
            )
        except ConfigError as exc:  # the settings' own messages never carry the password
            raise ConfigError(f"STOMP URL {url.redacted!r}: {exc}") from exc


def _window_from_env(env: Mapping[str, str]) -> int:
    window = env_int(env, "BOOST_ARTEMIS_WINDOW_BYTES", DEFAULT_ARTEMIS_WINDOW_BYTES, minimum=1)
    if window > MAX_ARTEMIS_WINDOW_BYTES:
        raise ConfigError(
            f"BOOST_ARTEMIS_WINDOW_BYTES must be at most {MAX_ARTEMIS_WINDOW_BYTES} bytes per "
            f"message, got {window}"
        )
    return window
