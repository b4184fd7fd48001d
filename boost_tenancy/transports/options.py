"""What every broker transport needs besides its addresses: credentials, TLS and the waits.

ConnectOptions declares each of them once; ConnectionSettings (endpoint.py) adds where the broker
is, and each protocol's settings extend that. Nothing here reads the environment: the
application layer reads the BOOST_BROKER_* variables into ConnectOptions
(application/environment.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import ClassVar, Final

from boost_tenancy.errors import ConfigError

DEFAULT_ARTEMIS_WINDOW_BYTES: Final = 64 * 1024
"""Bytes of Artemis consumer window per prefetched message: room for a JSON document of tens of
KiB. Measured on Artemis 2.44: 1 KiB messages with a 1 MiB window 7.4k msg/s, one at a time
1.3-2.1k msg/s."""
MAX_ARTEMIS_WINDOW_BYTES: Final = 16 * 1024 * 1024

_TLS_ONLY: Final = (
    "apply to TLS URLs only (stomp+ssl://, stomps://, amqps://); BOOST_BROKER_URL names a plain one"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSettings:
    """How a TLS connection checks the broker and, optionally, shows a client certificate."""

    ca_file: str | None = None
    """PEM file of the CAs that may sign the broker's certificate; None: the system's."""
    cert_file: str | None = None
    """PEM client certificate, for brokers that authenticate clients by certificate."""
    key_file: str | None = None
    key_password: str | None = dataclasses.field(default=None, repr=False)
    verify_host: bool = True
    """Check that the broker's certificate names the host connected to. Off, the certificate
    must still be signed by a trusted CA; only for test certificates."""

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("a client certificate needs its key: set both, or neither")
        if self.key_password is not None and self.key_file is None:
            raise ConfigError("a key password is given without a client key")
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"TLS file {path!r} does not exist")

    @property
    def is_default(self) -> bool:
        return self == TlsSettings()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectOptions:
    """Credentials, TLS and waits for a broker, whatever its protocol: what a URL cannot carry.
    Validated on construction; a ConfigError names the field and never shows the password."""

    PROTOCOL: ClassVar[str] = "broker"
    """How the protocol is named in errors."""

    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    tls: TlsSettings | None = None
    """Options: the TLS settings of TLS URLs (stomp+ssl://, stomps://, amqps://), None for the
    defaults (TlsSettings()). A connection's settings: None is a plain TCP connection."""
    connect_timeout_s: float = 5.0
    """Limit on one connection attempt: TCP, TLS and the broker's answer to the client's open."""
    confirm_timeout_s: float = 30.0
    """How long a send (STOMP receipt, AMQP disposition), a commit, a subscription or an attach
    waits for the broker's answer."""
    reconnect_wait_s: float = 30.0
    """How long an operation waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    """The first pause between reconnection attempts; it doubles up to reconnect_max_s."""
    reconnect_max_s: float = 5.0
    heartbeat_s: float = 10.0
    """Heartbeat interval (STOMP) or idle timeout (AMQP: a silent broker is noticed within
    twice this) asked of the broker."""
    artemis_window_bytes: int = DEFAULT_ARTEMIS_WINDOW_BYTES
    """The expected size of one message on Artemis over STOMP, in bytes: a subscription's
    consumer window (Artemis counts prefetch in bytes) is prefetch times this. Smaller messages
    are then more in flight, larger ones fewer, and one larger than the whole window still
    comes alone."""

    def __post_init__(self) -> None:
        # Written as ranges so NaN fails too; an infinite timeout cannot be waited on.
        for name in ("connect_timeout_s", "confirm_timeout_s"):
            if not 0 < getattr(self, name) < math.inf:
                raise ConfigError(
                    f"{self.PROTOCOL} timeouts must be positive: {name}={getattr(self, name)}"
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
        if not 0 < self.heartbeat_s < math.inf:
            raise ConfigError(
                f"{self.PROTOCOL} heartbeat_s must be a positive number, got {self.heartbeat_s}"
            )
        if not 1 <= self.artemis_window_bytes <= MAX_ARTEMIS_WINDOW_BYTES:
            raise ConfigError(
                f"artemis_window_bytes must be 1-{MAX_ARTEMIS_WINDOW_BYTES} bytes per message, "
                f"got {self.artemis_window_bytes}"
            )
        if (self.username is None) != (self.password is None):
            raise ConfigError("set both the broker username and password, or neither")

    def tls_for(self, url_has_tls: bool) -> TlsSettings | None:
        """The TLS settings of a connection by a URL with or without TLS; TLS settings given for
        a URL without it are refused (they would silently do nothing)."""
        if url_has_tls:
            return TlsSettings() if self.tls is None else self.tls
        if self.tls is not None and not self.tls.is_default:
            tls = self.tls
            given = [
                f"BOOST_BROKER_{name.upper()}"
                for name in ("ca_file", "cert_file", "key_file", "key_password")
                if getattr(tls, name) is not None
            ] + ([] if tls.verify_host else ["BOOST_BROKER_VERIFY_HOST"])
            raise ConfigError(f"{', '.join(given)} {_TLS_ONLY}")
        return None


__all__ = [
    "DEFAULT_ARTEMIS_WINDOW_BYTES",
    "MAX_ARTEMIS_WINDOW_BYTES",
    "ConnectOptions",
    "TlsSettings",
]
