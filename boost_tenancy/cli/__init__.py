"""The boost-tenancy command: publish, run processors, and operate tenants' queues, policies,
dead letters and quarantine.

Settings come from BOOST_* environment variables and flags; every tenant given on the command
line passes the same TenantId validation as everywhere else.

One module per group of commands, each with a ``register(sub)`` that adds its parsers and sets
their ``handler``; a new command is a module and a line in ``_GROUPS``. The commands reach the
toolkit through ``app.py`` and the operations of ``ops/``, never the other way round.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli import (
    dead_letters,
    messaging,
    migration,
    policy,
    quarantine,
    queue_admin,
    queues,
)
from boost_tenancy.cli.messaging import load_processor
from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.observability.logging import configure_logging

__all__ = ["build_parser", "installed_version", "load_processor", "main"]

_GROUPS = (messaging, queues, queue_admin, dead_letters, quarantine, migration, policy)
_DESCRIPTION = (
    "The boost-tenancy command: publish, run processors, and operate tenants' queues, policies,"
    " dead letters and quarantine."
)


def installed_version() -> str:
    """The version of the installed distribution (what pip installed, not the checkout's)."""
    try:
        return version("boost-tenancy")
    except PackageNotFoundError:
        return "unknown (not installed: run from a checkout without pip install)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="boost-tenancy", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in _GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        settings = AppSettings.from_env(os.environ)
        configure_logging(settings.log_format, settings.log_level)
        code: int = args.handler(args, settings)
        return code
    except BoostTenancyError as exc:
        print(f"boost-tenancy: error: {exc}", file=sys.stderr)
        return 2
