"""What every broker transport needs besides its addresses: credentials, TLS and the waits.

One set of BOOST_BROKER_* variables serves STOMP and AMQP alike (ConnectOptions.from_env); the
names used before it are refused with the name that replaced them (refuse_renamed).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from boost_tenancy.envvars import env_flag, env_float, unknown_variables
from boost_tenancy.errors import ConfigError

ENV_URL: Final = "BOOST_BROKER_URL"
DEFAULT_URL: Final = "stomp://127.0.0.1:61613"
"""The broker when BOOST_BROKER_URL is unset: the local broker of scripts/broker."""

RENAMED: Final[Mapping[str, str]] = {
    "BOOST_STOMP_HOST": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_STOMP_PORT": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_STOMP_VHOST": "BOOST_BROKER_URL (stomp://HOST:PORT/VHOST)",
    "BOOST_BROKER_HOST": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_BROKER_STOMP_PORT": "BOOST_BROKER_URL (stomp://HOST:PORT)",
    "BOOST_STOMP_USER": "BOOST_BROKER_USER",
    "BOOST_STOMP_PASSWORD": "BOOST_BROKER_PASSWORD or BOOST_BROKER_PASSWORD_FILE",
    "BOOST_STOMP_CONNECT_TIMEOUT_S": "BOOST_BROKER_CONNECT_TIMEOUT_S",
    "BOOST_AMQP_CONNECT_TIMEOUT_S": "BOOST_BROKER_CONNECT_TIMEOUT_S",
    "BOOST_AMQP_CONFIRM_TIMEOUT_S": "BOOST_BROKER_CONFIRM_TIMEOUT_S",
    "BOOST_AMQP_CA_FILE": "BOOST_BROKER_CA_FILE",
    "BOOST_AMQP_CERT_FILE": "BOOST_BROKER_CERT_FILE",
    "BOOST_AMQP_KEY_FILE": "BOOST_BROKER_KEY_FILE",
    "BOOST_AMQP_KEY_PASSWORD": "BOOST_BROKER_KEY_PASSWORD",
    "BOOST_AMQP_VERIFY_HOST": "BOOST_BROKER_VERIFY_HOST",
}
"""Variables of earlier versions and what replaced them. They are refused, not read: the local
broker and the clients once read different ones, and a client then silently used another broker
on the default port."""

_TLS_VARIABLES: Final = (
    "BOOST_BROKER_CA_FILE",
    "BOOST_BROKER_CERT_FILE",
    "BOOST_BROKER_KEY_FILE",
    "BOOST_BROKER_KEY_PASSWORD",
    "BOOST_BROKER_KEY_PASSWORD_FILE",
    "BOOST_BROKER_VERIFY_HOST",
)


def refuse_renamed(env: Mapping[str, str]) -> None:
    """ConfigError naming every variable of RENAMED that is set, and what replaced it, or every
    other BOOST_* variable that nothing reads, with the nearest known name: a mistyped variable
    is refused at start-up instead of silently leaving its setting at the default."""
    given = [name for name in RENAMED if env.get(name, "").strip()]
    if given:
        replaced = "; ".join(f"{name} -> {RENAMED[name]}" for name in given)
        raise ConfigError(
            f"no longer read, set its replacement instead (docs/configuration.md): {replaced}"
        )
    unknown = unknown_variables({k: v for k, v in env.items() if k not in RENAMED})
    if unknown:
        raise ConfigError(
            f"unknown variable{'s' if len(unknown) > 1 else ''}, read by nothing "
            f"(docs/configuration.md lists them): {'; '.join(unknown)}"
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


_DEFAULT_TLS: Final = TlsSettings()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectOptions:
    """Credentials, TLS and waits for a broker, whatever its protocol."""

    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    tls: TlsSettings = _DEFAULT_TLS
    """Used by TLS URLs (stomp+ssl://, stomps://, amqps://) only."""
    connect_timeout_s: float = 5.0
    """Limit on one connection attempt: TCP, TLS and the broker's answer to the client's open."""
    confirm_timeout_s: float = 30.0
    """How long a send (STOMP receipt, AMQP disposition), a commit or an attach waits."""
    reconnect_wait_s: float = 30.0
    """How long an operation waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    """The first pause between reconnection attempts; it doubles up to reconnect_max_s."""
    reconnect_max_s: float = 5.0
    heartbeat_s: float = 10.0
    """Heartbeat interval (STOMP) or idle timeout (AMQP) asked of the broker."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConnectOptions:
        """Read BOOST_BROKER_USER, _PASSWORD (or _PASSWORD_FILE), the TLS files, _VERIFY_HOST and
        the waits; errors name the variable and never show a secret."""
        refuse_renamed(env)
        username = env.get("BOOST_BROKER_USER", "").strip() or None
        password = secret_from_env(env, "BOOST_BROKER_PASSWORD")
        if (username is None) != (password is None):
            raise ConfigError(
                "set both BOOST_BROKER_USER and BOOST_BROKER_PASSWORD (or "
                "BOOST_BROKER_PASSWORD_FILE), or neither"
            )
        defaults = cls()
        initial = _seconds(env, "BOOST_BROKER_RECONNECT_INITIAL_S", defaults.reconnect_initial_s)
        maximum = _seconds(env, "BOOST_BROKER_RECONNECT_MAX_S", defaults.reconnect_max_s)
        if maximum < initial:
            raise ConfigError(
                f"BOOST_BROKER_RECONNECT_MAX_S ({maximum}) must not be less than "
                f"BOOST_BROKER_RECONNECT_INITIAL_S ({initial})"
            )
        return cls(
            username=username,
            password=password,
            tls=_tls_from_env(env),
            connect_timeout_s=_seconds(
                env, "BOOST_BROKER_CONNECT_TIMEOUT_S", defaults.connect_timeout_s
            ),
            confirm_timeout_s=_seconds(
                env, "BOOST_BROKER_CONFIRM_TIMEOUT_S", defaults.confirm_timeout_s
            ),
            reconnect_wait_s=_seconds(
                env, "BOOST_BROKER_RECONNECT_WAIT_S", defaults.reconnect_wait_s, zero=True
            ),
            reconnect_initial_s=initial,
            reconnect_max_s=maximum,
            heartbeat_s=_seconds(env, "BOOST_BROKER_HEARTBEAT_S", defaults.heartbeat_s),
        )

    def tls_for(self, url_has_tls: bool) -> TlsSettings | None:
        """The TLS settings of a connection by a URL with or without TLS; TLS settings given for
        a URL without it are refused (they would silently do nothing)."""
        if url_has_tls:
            return self.tls
        if not self.tls.is_default:
            raise ConfigError(
                f"{', '.join(_TLS_VARIABLES)} apply to TLS URLs only (stomp+ssl://, stomps://, "
                f"amqps://); {ENV_URL} names a plain one"
            )
        return None


def _tls_from_env(env: Mapping[str, str]) -> TlsSettings:
    paths = {
        field: env.get(name, "").strip() or None
        for name, field in (
            ("BOOST_BROKER_CA_FILE", "ca_file"),
            ("BOOST_BROKER_CERT_FILE", "cert_file"),
            ("BOOST_BROKER_KEY_FILE", "key_file"),
        )
    }
    verify_host = env_flag(env, "BOOST_BROKER_VERIFY_HOST", default=True)
    try:
        return TlsSettings(
            **paths,
            key_password=secret_from_env(env, "BOOST_BROKER_KEY_PASSWORD"),
            verify_host=verify_host,
        )
    except ConfigError as exc:
        raise ConfigError(
            f"{exc} (BOOST_BROKER_CA_FILE, BOOST_BROKER_CERT_FILE, BOOST_BROKER_KEY_FILE, "
            "BOOST_BROKER_KEY_PASSWORD)"
        ) from None


def secret_from_env(env: Mapping[str, str], name: str) -> str | None:
    """The secret in name, or in the file name_FILE names (one trailing newline dropped); None
    when neither is set. Errors name the variable and the file, never the secret.

    A file readable by others is accepted: container secrets (Docker, Kubernetes) are mounted
    0444/0644 by default, and who may read them is decided by the mount.
    """
    file_name = f"{name}_FILE"
    value = env.get(name, "")
    path = env.get(file_name, "").strip()
    if value and path:
        raise ConfigError(f"set {name} or {file_name}, not both")
    if not path:
        return value or None
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"{file_name}={path!r}: cannot read it: {reason}") from None
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise ConfigError(f"{file_name}={path!r} is empty")
    if "\n" in secret:
        raise ConfigError(f"{file_name}={path!r} holds more than one line")
    return secret


def _seconds(env: Mapping[str, str], name: str, default: float, *, zero: bool = False) -> float:
    """A wait in seconds: finite and positive (or zero where zero means "do not wait")."""
    seconds = env_float(env, name, default, minimum=-math.inf)
    if seconds < 0 or (seconds == 0 and not zero):
        need = "zero or a positive" if zero else "a positive"
        raise ConfigError(f"{name} must be {need} number of seconds, got {env[name]!r}")
    return seconds


__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "RENAMED",
    "ConnectOptions",
    "TlsSettings",
    "refuse_renamed",
    "secret_from_env",
]
