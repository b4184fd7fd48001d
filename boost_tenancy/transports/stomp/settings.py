"""Where the STOMP broker is (one address or a failover list), whether to use TLS and how
patient to be with it.

Read from a stomp:// or stomp+ssl:// URL and the options a URL cannot carry (from_url, shared
with every protocol: transports/endpoint.py); the application layer reads both from the
environment (application/environment.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.endpoint import ConnectionSettings

DEFAULT_PORT: Final = 61613
DEFAULT_TLS_PORT: Final = 61612
"""The port of the stomp+ssl connector in ActiveMQ's own examples."""
TLS_SCHEMES: Final = ("stomp+ssl", "stomps")
"""stomp+ssl:// is the name the Classic and Artemis connectors use; stomps:// means the same."""
SCHEMES: Final = ("stomp", *TLS_SCHEMES)


@dataclass(frozen=True, slots=True, kw_only=True)
class StompSettings(ConnectionSettings):
    """The connection settings (ConnectionSettings) of a STOMP broker: its default ports and
    TLS schemes, and STOMP's names for two shared options (heartbeat_ms, receipt_timeout_s)."""

    PROTOCOL: ClassVar[str] = "STOMP"
    DEFAULT_PORT: ClassVar[int] = DEFAULT_PORT
    DEFAULT_TLS_PORT: ClassVar[int] = DEFAULT_TLS_PORT
    TLS_SCHEMES: ClassVar[tuple[str, ...]] = TLS_SCHEMES

    port: int = DEFAULT_PORT
    subscriptions_per_connection: int | None = None
    """The most subscriptions one connection carries before the transport opens another for
    more; None: the broker's own figure (Artemis: 500, Classic: no limit; stomp/subscriptions.py
    says why)."""

    def __post_init__(self) -> None:
        ConnectionSettings.__post_init__(self)
        if self.subscriptions_per_connection is not None and self.subscriptions_per_connection < 1:
            raise ConfigError(
                "STOMP subscriptions_per_connection must be at least 1, got "
                f"{self.subscriptions_per_connection}"
            )
        if self.heartbeat_ms <= 0:
            raise ConfigError(
                f"STOMP heartbeat_s must be at least a millisecond, got {self.heartbeat_s}"
            )

    @property
    def heartbeat_ms(self) -> int:
        """heartbeat_s in STOMP's unit, the heart-beat header's milliseconds."""
        return round(self.heartbeat_s * 1000)

    @property
    def receipt_timeout_s(self) -> float:
        """confirm_timeout_s: how long a send, a commit or a subscription waits for the
        broker's receipt."""
        return self.confirm_timeout_s


__all__ = ["DEFAULT_PORT", "DEFAULT_TLS_PORT", "SCHEMES", "TLS_SCHEMES", "StompSettings"]
