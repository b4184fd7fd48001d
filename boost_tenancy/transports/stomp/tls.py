"""TLS on a STOMP connection: the broker's certificate checked by stomp.py, its host name too
unless verify_host is off, and the deprecation warning that choice brings silenced."""

from __future__ import annotations

import contextlib
import ssl
import warnings
from collections.abc import Iterator
from typing import Any

from boost_tenancy.transports.options import TlsSettings


def use_tls(conn: Any, address: tuple[str, int], tls: TlsSettings) -> None:
    """Wrap conn's socket in TLS: the broker's certificate must be signed by tls.ca_file's CAs
    (else the system's) and, unless verify_host is off, name the host connected to.

    stomp.py checks the name whenever it checks the chain (an ssl.PROTOCOL_TLS_CLIENT context);
    only a generic ssl.PROTOCOL_TLS context checks the chain without the name, so that is what
    verify_host=False asks for.
    """
    conn.set_ssl(
        for_hosts=[address],
        key_file=tls.key_file,
        cert_file=tls.cert_file,
        ca_certs=tls.ca_file,
        password=tls.key_password,
        verify=True,
        ssl_version=ssl.PROTOCOL_TLS_CLIENT if tls.verify_host else ssl.PROTOCOL_TLS,
    )


@contextlib.contextmanager
def tls_context_warnings(tls: TlsSettings | None) -> Iterator[None]:
    """Silence the deprecation of ssl.PROTOCOL_TLS, which the name check turned off needs."""
    if tls is None or tls.verify_host:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "ssl.PROTOCOL_TLS is deprecated", DeprecationWarning)
        yield
