"""The connection settings every transport shares: where the brokers are (one address or a
failover list) beside the options of options.py (who the client is, TLS, how patient to be);
each protocol's settings extend them, and one function reads them all from a URL (from_url)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Self

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.options import ConnectOptions
from boost_tenancy.transports.registry import TransportUrl

DEFAULT_HOST = "127.0.0.1"

_OPTION_FIELDS = tuple(field.name for field in dataclasses.fields(ConnectOptions))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionSettings(ConnectOptions):
    """Where the broker is, beside the options (ConnectOptions: credentials, TLS, waits), whatever
    the protocol (StompSettings, AmqpSettings). Validated on construction; a ConfigError names
    the field and never shows the password."""

    DEFAULT_PORT: ClassVar[int] = 0
    """The port of an address that names none; each protocol's settings give their own."""
    DEFAULT_TLS_PORT: ClassVar[int] = 0
    TLS_SCHEMES: ClassVar[tuple[str, ...]] = ()
    """The URL schemes that mean TLS."""

    host: str = DEFAULT_HOST
    port: int = 0
    """Each protocol's settings give their own default."""
    alternates: tuple[tuple[str, int], ...] = ()
    """Further brokers (host, port) of a failover list, tried in turn after host:port."""
    vhost: str | None = None
    """The virtual host the broker is asked for (STOMP's host header, AMQP's open hostname)."""

    def __post_init__(self) -> None:
        for _, port in self.addresses:
            if not 0 < port < 65536:
                raise ConfigError(f"{self.PROTOCOL} port must be 1-65535, got {port}")
        ConnectOptions.__post_init__(self)

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """Every broker to try, in order: host:port first, then the alternates."""
        return ((self.host, self.port), *self.alternates)

    @classmethod
    def from_url(cls, url: TransportUrl, options: ConnectOptions | None = None) -> Self:
        """Settings for scheme://[user:password@]host[:port][,host2[:port2]...][/vhost], the one
        reading of a URL every protocol's settings share.

        More than one address is a failover list: the first is connected to first, and a
        reconnection moves on to the next after each failed attempt. options (when given)
        supply what a URL cannot carry; without them those keep their defaults. A user in the
        URL names the credentials as a pair: its password is taken from the URL too (never half
        from the options).
        """
        if url.query or url.fragment:
            raise ConfigError(f"{cls.PROTOCOL} URL {url.redacted!r} takes no query or fragment")
        vhost = url.path.removeprefix("/")
        if "/" in vhost:
            raise ConfigError(
                f"{cls.PROTOCOL} URL {url.redacted!r} has the path {url.path!r}; "
                "expected at most one segment, the virtual host"
            )
        given = ConnectOptions() if options is None else options
        tls = url.scheme in cls.TLS_SCHEMES
        default_port = cls.DEFAULT_TLS_PORT if tls else cls.DEFAULT_PORT
        addresses = [
            (host or DEFAULT_HOST, default_port if port is None else port)
            for host, port in url.addresses or ((None, None),)
        ]
        fields = {name: getattr(given, name) for name in _OPTION_FIELDS}
        if url.username is not None or url.password is not None:
            fields.update(username=url.username or None, password=url.password or None)
        try:
            fields["tls"] = given.tls_for(tls)
            return cls(
                **fields,
                host=addresses[0][0],
                port=addresses[0][1],
                alternates=tuple(addresses[1:]),
                vhost=vhost or None,
            )
        except ConfigError as exc:  # the settings' own messages never carry the password
            raise ConfigError(f"{cls.PROTOCOL} URL {url.redacted!r}: {exc}") from exc


__all__ = ["DEFAULT_HOST", "ConnectionSettings"]
