"""The connection settings every transport shares: where the brokers are (one address or a
failover list), who the client is, and how patient to be; each protocol's settings extend them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.options import TlsSettings

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionSettings:
    """Where the broker is, who the client is and how patient to be with it, whatever the
    protocol (StompSettings, AmqpSettings). Validated on construction; a ConfigError names the
    field and never shows the password."""

    PROTOCOL: ClassVar[str] = "broker"
    """How the protocol is named in errors."""

    host: str = DEFAULT_HOST
    port: int = 0
    """Each protocol's settings give their own default."""
    alternates: tuple[tuple[str, int], ...] = ()
    """Further brokers (host, port) of a failover list, tried in turn after host:port."""
    tls: TlsSettings | None = None
    """TLS settings; None: a plain TCP connection."""
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    vhost: str | None = None
    """The virtual host the broker is asked for (STOMP's host header, AMQP's open hostname)."""
    connect_timeout_s: float = 5.0
    """Limit on one connection attempt: TCP, TLS and the broker's answer to the client's open."""
    reconnect_wait_s: float = 30.0
    """How long an operation waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    """The first pause between reconnection attempts; it doubles up to reconnect_max_s."""
    reconnect_max_s: float = 5.0

    def __post_init__(self) -> None:
        for _, port in self.addresses:
            if not 0 < port < 65536:
                raise ConfigError(f"{self.PROTOCOL} port must be 1-65535, got {port}")
        # Written as ranges so NaN fails too; an infinite timeout cannot be waited on.
        if not 0 < self.connect_timeout_s < math.inf:
            raise ConfigError(
                f"{self.PROTOCOL} timeouts must be positive: "
                f"connect_timeout_s={self.connect_timeout_s}"
            )
        if not 0 <= self.reconnect_wait_s < math.inf:
            raise ConfigError(
                f"{self.PROTOCOL} timeouts must be positive: "
                f"reconnect_wait_s={self.reconnect_wait_s} (0: fail at once)"
            )
        if not 0 < self.reconnect_initial_s <= self.reconnect_max_s < math.inf:
            # Zero would retry in a busy loop; a negative delay would end the reconnecting thread.
            raise ConfigError(
                f"{self.PROTOCOL} reconnect delays must satisfy 0 < reconnect_initial_s <= "
                f"reconnect_max_s, got {self.reconnect_initial_s} and {self.reconnect_max_s}"
            )
        if (self.username is None) != (self.password is None):
            raise ConfigError("set both the broker username and password, or neither")

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """Every broker to try, in order: host:port first, then the alternates."""
        return ((self.host, self.port), *self.alternates)


__all__ = ["DEFAULT_HOST", "ConnectionSettings"]
