"""Where the AMQP 1.0 broker is (one address or a failover list), how to authenticate to it and
how patient to be with it.

Read from an amqp:// or amqps:// URL and the options a URL cannot carry (from_url, shared with
every protocol: transports/endpoint.py); the application layer reads both from the environment
(application/environment.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from proton import SSLDomain

from boost_tenancy.transports.endpoint import ConnectionSettings

DEFAULT_PORT: Final = 5672
DEFAULT_TLS_PORT: Final = 5671


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpSettings(ConnectionSettings):
    """The connection settings (ConnectionSettings) of an AMQP broker. Credentials mean SASL
    PLAIN (neither: SASL ANONYMOUS); the vhost is the open frame's hostname (RabbitMQ:
    'vhost:NAME' selects a virtual host); connect_timeout_s covers SASL too; heartbeat_s is the
    idle timeout the client asks for."""

    PROTOCOL: ClassVar[str] = "AMQP"
    DEFAULT_PORT: ClassVar[int] = DEFAULT_PORT
    DEFAULT_TLS_PORT: ClassVar[int] = DEFAULT_TLS_PORT
    TLS_SCHEMES: ClassVar[tuple[str, ...]] = ("amqps",)

    port: int = DEFAULT_PORT

    @property
    def url(self) -> str:
        """The first address proton connects to; credentials travel by SASL, not in it."""
        return self.url_of(0)

    def login_options(self) -> dict[str, Any]:
        """What proton's connect takes to log in as the transport does (raw proton clients
        beside it, the benchmarks' among them, pass the same): the heartbeat, SASL PLAIN with
        credentials or ANONYMOUS without, and the virtual host as the open frame's hostname.
        RabbitMQ takes it as "vhost:NAME" and ignores a bare name (measured on 3.10: "novhost"
        reached the default virtual host, "vhost:novhost" was refused for want of
        permissions)."""
        return {
            "heartbeat": self.heartbeat_s,
            "user": self.username,
            "password": self.password,
            "allowed_mechs": "PLAIN" if self.username is not None else "ANONYMOUS",
            "allow_insecure_mechs": True,
            "virtual_host": None if self.vhost is None else f"vhost:{self.vhost}",
        }

    def ssl_domain(self) -> SSLDomain | None:
        """proton's TLS client domain for these settings (None without TLS): the CA trusted,
        the client certificate where one is set, and the peer's name checked unless
        verify_host is off (VERIFY_PEER checks the chain only)."""
        tls = self.tls
        if tls is None:
            return None
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if tls.ca_file is not None:
            domain.set_trusted_ca_db(tls.ca_file)
        if tls.cert_file is not None and tls.key_file is not None:
            domain.set_credentials(tls.cert_file, tls.key_file, tls.key_password)
        mode = SSLDomain.VERIFY_PEER_NAME if tls.verify_host else SSLDomain.VERIFY_PEER
        domain.set_peer_authentication(mode, tls.ca_file)
        return domain

    def url_of(self, index: int) -> str:
        """The address of the index-th broker of the list."""
        host, port = self.addresses[index]
        shown = f"[{host}]" if ":" in host else host
        return f"{'amqps' if self.tls is not None else 'amqp'}://{shown}:{port}"


__all__ = ["DEFAULT_PORT", "DEFAULT_TLS_PORT", "AmqpSettings"]
