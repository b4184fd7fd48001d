"""Where a store lives: one reading of the URLs that name an SQLite file or a PostgreSQL DSN.

The error store and any application store (the sample pipeline's documents) accept the same
forms and report the same errors, with passwords masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from boost_tenancy.errors import ConfigError

_SCHEME_RE: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
ACCEPTED_STORE_URLS: Final = (
    "expected postgresql://..., postgres://..., sqlite:///relative/path, "
    "sqlite:////absolute/path or a plain filesystem path"
)


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store URL: the backend and its file path or DSN."""

    backend: Literal["sqlite", "postgresql"]
    target: str


def redact_url(url: str) -> str:
    """The URL with any password masked, so a configuration error never prints a secret."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split("://", 1)[0] + "://..."
    if password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{password}@", ":***@", 1)).geturl()


def parse_store_url(url: str, *, what: str) -> StoreUrl:
    """Read a store URL; what ('error store', 'document store') names it in errors."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{what} URL {url!r} is empty; {ACCEPTED_STORE_URLS}")
    match = _SCHEME_RE.match(url)
    if match is None:
        return StoreUrl("sqlite", url)
    scheme = match.group(1).lower()
    rest = url[match.end() :]
    if scheme in ("postgresql", "postgres"):
        return StoreUrl("postgresql", f"{scheme}://{rest}")
    if scheme == "sqlite":
        # sqlite:///relative/path and sqlite:////absolute/path: the third slash ends the (empty)
        # host part, so anything else (a host, or no path) is a mistake worth reporting.
        if not rest.startswith("/") or rest == "/":
            raise ConfigError(f"{what} URL {url!r} names no SQLite file; {ACCEPTED_STORE_URLS}")
        return StoreUrl("sqlite", rest[1:])
    raise ConfigError(
        f"{what} URL {redact_url(url)!r} has the unsupported scheme {scheme!r}; "
        f"{ACCEPTED_STORE_URLS}"
    )
