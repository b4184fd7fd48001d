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
import contextlib
import difflib
import importlib
import io
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


class _ParseStoppedError(Exception):
    """A parse error while looking for unknown options: the real parse reports it."""


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every sub-parser under it."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_parsers(child))
    return found


def _unknown_options(parser: argparse.ArgumentParser, arguments: list[str]) -> list[str]:
    """The options given that no parser knows, each with the known one it is closest to.

    argparse reports a required flag missing before an option it does not know, so a typo
    (--jsn for --json) was reported as --json missing. This parse finds them first, with
    nothing required and no output; any other error is left to the real parse (argparse 3.14
    suggests close matches itself; 3.11 does not)."""
    parsers = _parsers(parser)
    relaxed: list[argparse.Action | argparse._MutuallyExclusiveGroup] = [
        *(a for each in parsers for a in each._actions if a.required),
        *(g for each in parsers for g in each._mutually_exclusive_groups if g.required),
    ]
    saved = [p.error for p in parsers]

    def stop(message: str) -> Any:
        raise _ParseStoppedError(message)

    try:
        for item in relaxed:
            item.required = False
        for each in parsers:
            each.error = stop  # type: ignore[method-assign]
        # --help and --version print and exit here too: what they print is the real parse's.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            _, extras = parser.parse_known_args(arguments)
    except (_ParseStoppedError, SystemExit):
        return []
    finally:
        for item in relaxed:
            item.required = True
        for each, error in zip(parsers, saved, strict=True):
            each.error = error  # type: ignore[method-assign]
    # Suggested only from the command given (and the parsers above it): another command's
    # option is no fix for this one.
    known = {
        o for each in _path(parser, arguments) for a in each._actions for o in a.option_strings
    }
    options = [extra.partition("=")[0] for extra in extras if extra.startswith("-")]
    if any(option in known for option in options):
        return []  # a known option out of its place (before its command, after --): argparse's
    shown = []
    for option in options:
        close = difflib.get_close_matches(option, sorted(known), n=1)
        shown.append(f"{option} (did you mean {close[0]}?)" if close else option)
    return shown


def _path(parser: argparse.ArgumentParser, arguments: list[str]) -> list[argparse.ArgumentParser]:
    """The parser and the sub-parsers the arguments name, in order (publish; dlq, list)."""
    path = [parser]
    for argument in arguments:
        children = [
            action.choices
            for action in path[-1]._actions
            if isinstance(action, argparse._SubParsersAction)
        ]
        if children and argument in children[0]:
            path.append(children[0][argument])
    return path


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    named = next((a for a in arguments if not a.startswith("-")), "")
    parser = build_parser(named)
    if unknown := _unknown_options(parser, arguments):
        parser.error(f"unrecognized arguments: {', '.join(unknown)}")
    args = parser.parse_args(arguments)
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
