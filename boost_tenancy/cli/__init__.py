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
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

from boost_tenancy.cli.catalog import COMMANDS, modules
from boost_tenancy.errors import BoostTenancyError

__all__ = ["build_parser", "installed_version", "load_processor", "main"]

_DESCRIPTION = (
    "The boost-tenancy command: publish, run processors, and operate tenants' queues, policies,"
    " dead letters and quarantine. The broker is BOOST_BROKER_URL (with BOOST_BROKER_USER and"
    " BOOST_BROKER_PASSWORD); docs/configuration.md lists every variable."
)


def installed_version() -> str:
    """The version of the installed distribution (what pip installed, not the checkout's)."""
    try:
        return version("boost-tenancy")
    except PackageNotFoundError:
        return "unknown (not installed: run from a checkout without pip install)"


def _command_module(name: str) -> ModuleType:
    return importlib.import_module(f"boost_tenancy.cli.{name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command (command None), or of the one named with the others listed by
    name and help alone: only that command's module is imported. An unknown name gets the list
    alone, and argparse's error naming the choices."""
    parser = argparse.ArgumentParser(prog="boost-tenancy", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command is None:
        wanted = set(modules())
    else:
        wanted = {COMMANDS[command].module} if command in COMMANDS else set()
    registered: set[str] = set()
    for name, entry in COMMANDS.items():
        if entry.module not in wanted:
            sub.add_parser(name, help=entry.help)
        elif entry.module not in registered:
            registered.add(entry.module)
            _command_module(entry.module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    named = next((a for a in arguments if not a.startswith("-")), "")
    args = build_parser(named).parse_args(arguments)
    # Imported once a command runs: --help and --version need none of it.
    from boost_tenancy.application.config import AppSettings  # noqa: PLC0415
    from boost_tenancy.observability.logging import configure_logging  # noqa: PLC0415

    try:
        settings = AppSettings.from_env(os.environ)
        configure_logging(settings.log_format, settings.log_level)
        code: int = args.handler(args, settings)
        return code
    except BoostTenancyError as exc:
        print(f"boost-tenancy: error: {exc}", file=sys.stderr)
        return 2


def __getattr__(name: str) -> Any:
    """load_processor, from its command's module on first use."""
    if name == "load_processor":
        return _command_module("messaging").load_processor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
