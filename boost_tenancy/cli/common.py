"""What every command shares: the broker it talks to, lists given as flags, the registry type."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from boost_tenancy.application.brokers import open_broker
from boost_tenancy.application.config import DEFAULT_URL, AppSettings
from boost_tenancy.errors import ConfigError, TransportError
from boost_tenancy.quotas.policy_store import check_actor
from boost_tenancy.storage import parse_store_url
from boost_tenancy.tenancy import TenantId, parse_tenants
from boost_tenancy.transports.base import Transport

Handler = Callable[[argparse.Namespace, AppSettings], int]
"""A command: its parsed flags and the settings in, the exit code out."""

Subparsers = Any
"""argparse's sub-parser action (its class is private)."""

LIST_HELP = "repeat or comma-separate"
TENANT_HELP = "the tenant id"
QUEUE_HELP = "the logical queue (the toolkit finds the tenant's broker queue)"
ACTOR_HELP = "who makes the change (default: BOOST_ACTOR, else the user)"


def values(given: Sequence[str]) -> list[str]:
    """A flag given repeatedly and/or comma-separated, as one list without empty parts."""
    return [part for value in given for part in value.split(",") if part != ""]


def tenants(given: Sequence[str], flag: str = "--tenant") -> tuple[TenantId, ...]:
    """Tenants given repeatedly and/or comma-separated, each validated."""
    named = values(given)
    if not named:
        raise ConfigError(
            f"{flag} {' '.join(repr(g) for g in given)} names no tenant: give one or more tenant "
            f"ids ({flag} acme {flag} globex, or {flag} acme,globex)"
        )
    return parse_tenants(named)


def missing_store(url: str, variable: str, what: str) -> str | None:
    """For a command that only reads the store: why a SQLite file the URL names is not there
    (an empty store made at a mistyped path looked like no data), or None when it is."""
    store = parse_store_url(url, what=what)
    if store.backend == "sqlite" and not Path(store.target).exists():
        return (
            f"{variable} names the SQLite file {str(Path(store.target).absolute())!r}, which does "
            f"not exist (sqlite:///relative/path is read from the current folder, "
            f"sqlite:////absolute/path from the root); the {what} is made where it is first written"
        )
    return None


def existing_store(url: str, variable: str, what: str) -> str:
    """url, where missing_store finds the file; a ConfigError saying why where it does not."""
    missing = missing_store(url, variable, what)
    if missing is not None:
        raise ConfigError(missing)
    return url


def connected(settings: AppSettings) -> Transport:
    """The broker of the settings, connected; the caller closes it. A failure to connect says
    where the address came from: a newcomer may not know the default."""
    transport = open_broker(settings, os.environ)
    try:
        transport.connect()
    except TransportError as exc:
        source = (
            "the default of BOOST_BROKER_URL"
            if settings.broker_url == DEFAULT_URL
            else "from BOOST_BROKER_URL"
        )
        raise TransportError(f"{exc} ({source})") from exc
    return transport


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1, so a count of 0 is refused, never a no-op."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def acting(given: str | None, settings: AppSettings) -> str:
    """Who an operator's command acts as, for its audit: --actor, else BOOST_ACTOR, else the
    user running it."""
    return check_actor(given or settings.actor or getpass.getuser())
