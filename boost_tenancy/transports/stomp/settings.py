"""Where the STOMP broker is and how patient to be with it.

Read from BOOST_STOMP_* variables at the edge (from_env) or from a stomp:// URL (from_url).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from boost_tenancy.envvars import env_float, env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.registry import TransportUrl

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 61613
_DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
DEFAULT_ARTEMIS_WINDOW_BYTES: Final = 64 * 1024
"""Bytes of Artemis consumer window per prefetched message: room for a JSON document of tens of
KiB. Measured on Artemis 2.44: 1 KiB messages with a 1 MiB window 7.4k msg/s, one at a time
1.3-2.1k msg/s."""
MAX_ARTEMIS_WINDOW_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class StompSettings:
    """Where the broker is and how patient to be with it."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    vhost: str | None = None
    heartbeat_ms: int = 10_000
    connect_timeout_s: float = _DEFAULT_CONNECT_TIMEOUT_S
    """Limit on one connection attempt: the TCP connect plus the wait for CONNECTED."""
    receipt_timeout_s: float = 30.0
    reconnect_wait_s: float = 30.0
    """How long a send waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 5.0
    artemis_window_bytes: int = DEFAULT_ARTEMIS_WINDOW_BYTES
    """The expected size of one message on Artemis, in bytes: a subscription's consumer window
    (Artemis counts prefetch in bytes) is prefetch times this. Smaller messages are then more in
    flight, larger ones fewer, and one larger than the whole window still comes alone."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"STOMP port must be 1-65535, got {self.port}")
        if self.receipt_timeout_s <= 0 or self.reconnect_wait_s < 0:
            raise ConfigError("STOMP timeouts must be positive")
        # Written as a range so NaN fails too; an infinite timeout cannot be waited on.
        if not 0 < self.connect_timeout_s < math.inf:
            raise ConfigError(
                f"STOMP timeouts must be positive: connect_timeout_s={self.connect_timeout_s}"
            )
        if not 0 < self.reconnect_initial_s <= self.reconnect_max_s < math.inf:
            # Zero would retry in a busy loop; a negative delay would end the reconnecting thread.
            raise ConfigError(
                "STOMP reconnect delays must satisfy 0 < reconnect_initial_s <= reconnect_max_s, "
                f"got {self.reconnect_initial_s} and {self.reconnect_max_s}"
            )
        if (self.username is None) != (self.password is None):
            raise ConfigError("set both the broker username and password, or neither")
        if not 1 <= self.artemis_window_bytes <= MAX_ARTEMIS_WINDOW_BYTES:
            raise ConfigError(
                f"artemis_window_bytes must be 1-{MAX_ARTEMIS_WINDOW_BYTES} bytes per message, "
                f"got {self.artemis_window_bytes}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StompSettings:
        """Read BOOST_STOMP_HOST, _PORT, _USER, _PASSWORD, _VHOST, _CONNECT_TIMEOUT_S and
        BOOST_ARTEMIS_WINDOW_BYTES; errors name the variable."""
        port_text = env.get("BOOST_STOMP_PORT", str(DEFAULT_PORT))
        try:
            port = int(port_text)
        except ValueError as exc:
            raise ConfigError(f"BOOST_STOMP_PORT must be a number, got {port_text!r}") from exc
        if not 0 < port < 65536:
            raise ConfigError(f"BOOST_STOMP_PORT must be 1-65535, got {port}")
        if bool(env.get("BOOST_STOMP_USER")) != bool(env.get("BOOST_STOMP_PASSWORD")):
            raise ConfigError("set both BOOST_STOMP_USER and BOOST_STOMP_PASSWORD, or neither")
        connect_timeout_s = env_float(
            env, "BOOST_STOMP_CONNECT_TIMEOUT_S", _DEFAULT_CONNECT_TIMEOUT_S
        )
        if not 0 < connect_timeout_s < math.inf:
            raise ConfigError(
                "BOOST_STOMP_CONNECT_TIMEOUT_S must be a positive number of seconds, "
                f"got {env['BOOST_STOMP_CONNECT_TIMEOUT_S']!r}"
            )
        window = env_int(env, "BOOST_ARTEMIS_WINDOW_BYTES", DEFAULT_ARTEMIS_WINDOW_BYTES, minimum=1)
        if window > MAX_ARTEMIS_WINDOW_BYTES:
            raise ConfigError(
                f"BOOST_ARTEMIS_WINDOW_BYTES must be at most {MAX_ARTEMIS_WINDOW_BYTES} bytes per "
                f"message, got {window}"
            )
        return cls(
            host=env.get("BOOST_STOMP_HOST", DEFAULT_HOST),
            port=port,
            username=env.get("BOOST_STOMP_USER") or None,
            password=env.get("BOOST_STOMP_PASSWORD") or None,
            vhost=env.get("BOOST_STOMP_VHOST") or None,
            connect_timeout_s=connect_timeout_s,
            artemis_window_bytes=window,
        )

    @classmethod
    def from_url(cls, url: TransportUrl, env: Mapping[str, str] | None = None) -> StompSettings:
        """Settings for stomp://[user:password@]host[:port][/vhost].

        What the URL names wins; everything else comes from from_env(env) when env is given,
        else from the defaults. A user in the URL names the credentials as a pair: its password
        is taken from the URL too (never half from the environment).
        """
        if url.query or url.fragment:
            raise ConfigError(f"STOMP URL {url.redacted!r} takes no query or fragment")
        vhost = url.path.removeprefix("/")
        if "/" in vhost:
            raise ConfigError(
                f"STOMP URL {url.redacted!r} has the path {url.path!r}; "
                "expected at most one segment, the virtual host"
            )
        changes: dict[str, Any] = {}
        if url.host:
            changes["host"] = url.host
        if url.port is not None:
            changes["port"] = url.port
        if url.username is not None or url.password is not None:
            changes["username"] = url.username or None
            changes["password"] = url.password or None
        if vhost:
            changes["vhost"] = vhost
        base = cls.from_env(env) if env is not None else cls()
        try:
            return dataclasses.replace(base, **changes)
        except ConfigError as exc:  # the settings' own messages never carry the password
            raise ConfigError(f"STOMP URL {url.redacted!r}: {exc}") from exc
