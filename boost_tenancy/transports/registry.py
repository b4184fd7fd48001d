"""Transports chosen by URL: a scheme names a factory, so adding a broker protocol is one new
module and one line in _BUILT_IN (or one register_transport call from outside the toolkit).
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.options import ConnectOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportUrl:
    """A transport URL taken apart; user, password and path are percent-decoded."""

    scheme: str
    username: str | None
    password: str | None = field(repr=False)
    host: str | None
    port: int | None
    path: str
    query: str
    fragment: str
    redacted: str
    """The URL with the password masked: the only form of it an error or a log may show."""
    addresses: tuple[tuple[str | None, int | None], ...] = ()
    """Every (host, port) of the URL in order: more than one for a failover list
    (scheme://host1:port1,host2:port2/...); host and port are the first."""


TransportFactory = Callable[[TransportUrl, ConnectOptions | None], Transport]
"""Makes a transport, not connected, for a URL of its scheme; the options (when given) supply
what the URL does not name. Raises ConfigError, showing the URL only as url.redacted."""

# Imported on first use, so importing the registry loads no broker client.
_BUILT_IN: Final[Mapping[str, str]] = {
    "stomp": "boost_tenancy.transports.stomp:transport_from_url",
    "stomp+ssl": "boost_tenancy.transports.stomp:transport_from_url",
    "stomps": "boost_tenancy.transports.stomp:transport_from_url",
    "amqp": "boost_tenancy.transports.amqp:transport_from_url",
    "amqps": "boost_tenancy.transports.amqp:transport_from_url",
}

_SCHEME_RE: Final = re.compile(r"[a-z][a-z0-9+.-]*")
_lock = threading.Lock()
_registered: dict[str, TransportFactory] = {}


def register_transport(scheme: str, factory: TransportFactory) -> None:
    """Make open_transport use factory for scheme:// URLs; it replaces an earlier one, built-in
    ones included."""
    name = scheme.lower() if isinstance(scheme, str) else ""
    if _SCHEME_RE.fullmatch(name) is None:
        raise ConfigError(
            f"transport scheme {scheme!r} is not a URL scheme (letter, then a-z0-9+.-)"
        )
    with _lock:
        _registered[name] = factory


def known_schemes() -> list[str]:
    with _lock:
        return sorted({*_BUILT_IN, *_registered})


def open_transport(url: str, options: ConnectOptions | None = None) -> Transport:
    """The transport a URL names, not yet connected.

    options: what the URL does not name (credentials, TLS, the waits; what the URL names wins);
    without them those keep their defaults. Reads no environment: the application layer's
    open_transport reads the options from BOOST_BROKER_* (application/environment.py).
    """
    parsed = parse_transport_url(url)
    return _factory_for(parsed.scheme)(parsed, options)


def _factory_for(scheme: str) -> TransportFactory:
    with _lock:
        factory = _registered.get(scheme)
    if factory is not None:
        return factory
    target = _BUILT_IN.get(scheme)
    if target is None:
        raise ConfigError(
            f"unknown transport scheme {scheme!r}; known: {', '.join(known_schemes())}"
        )
    module_name, _, attribute = target.partition(":")
    built_in: TransportFactory = getattr(importlib.import_module(module_name), attribute)
    return built_in


def redact_url(url: str) -> str:
    """url with the password of its user part masked; works on malformed URLs too (what cannot
    be told apart is masked with it)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        # Not a URL: any colon or at-sign may be a password's neighbour.
        return "***" if ":" in url or "@" in url else url
    userinfo, at, tail = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{tail}"


def parse_transport_url(url: str) -> TransportUrl:
    """Take a URL apart; ConfigError for one that is malformed or of an unknown scheme."""
    if not isinstance(url, str):
        raise ConfigError(f"a transport URL must be a string, got {type(url).__name__}")
    redacted = redact_url(url)
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or _SCHEME_RE.fullmatch(scheme) is None:
        raise ConfigError(
            f"transport URL {redacted!r} is malformed: expected scheme://..., "
            f"schemes: {', '.join(known_schemes())}"
        )
    if scheme not in known_schemes():
        raise ConfigError(
            f"unknown transport scheme {scheme!r}; known: {', '.join(known_schemes())}"
        )
    if any(ch <= " " or ch == "\x7f" for ch in url):
        # urlsplit would drop tabs and newlines silently; spaces belong percent-encoded.
        raise ConfigError(f"transport URL {redacted!r} is malformed: it has blanks or controls")
    try:
        parts = urlsplit(url)
        hosts = parts.netloc.rpartition("@")[2]
        addresses: tuple[tuple[str | None, int | None], ...] = (
            tuple(_address(item) for item in hosts.split(",")) if "," in hosts else ()
        )
        if not addresses:
            addresses = ((parts.hostname or None, parts.port),)
    except ValueError:
        # Its text may echo part of the URL: the error is raised outside this handler so that
        # not even its context keeps it; the redacted URL is all an error shows.
        parts = None
    if parts is None:
        hint = ""
        if "@" in url.partition("://")[2]:
            # A raw '#', '/' or '?' in a password ends the user part early: what is left reads
            # as a host and port that cannot be, and the redacted URL looks right.
            hint = ": percent-encode '@', '/', '?', '#' and ':' in the user name and password"
        raise ConfigError(f"transport URL {redacted!r} is malformed (host or port){hint}")
    if _login_after_first_address(parts.netloc):
        raise ConfigError(
            f"transport URL {redacted!r} has its login after the first address of a list: "
            "write it once, before the first (scheme://user:password@host1:port,host2:port)"
        )
    if "@" in url.partition("://")[2][len(parts.netloc) :]:
        # An at-sign after the host: most likely a password with a raw '/', '?' or '#' that
        # cut the user part short, which must not pass for a host, port or path.
        raise ConfigError(
            f"transport URL {redacted!r} is malformed: percent-encode '@', '/', '?', '#' and "
            "':' in the user name and password"
        )
    return TransportUrl(
        scheme=scheme,
        username=None if parts.username is None else unquote(parts.username),
        password=None if parts.password is None else unquote(parts.password),
        host=addresses[0][0],
        port=addresses[0][1],
        path=unquote(parts.path),
        query=parts.query,
        fragment=parts.fragment,
        redacted=redacted,
        addresses=addresses,
    )


def _login_after_first_address(netloc: str) -> bool:
    """Whether the user part begins with an address and a comma (host1:port,user:pw@host2):
    the first address would be taken for the user name."""
    userinfo, at, _ = netloc.rpartition("@")
    if not at or "," not in userinfo:
        return False
    try:
        _address(userinfo.partition(",")[0])
    except ValueError:
        return False  # a comma inside a password
    return True


def _address(item: str) -> tuple[str, int | None]:
    """One host[:port] of a failover list; ValueError when it is empty or malformed."""
    parts = urlsplit(f"//{item}")
    if not parts.hostname or parts.netloc != item:
        raise ValueError("empty or malformed address in a list")
    return parts.hostname, parts.port
