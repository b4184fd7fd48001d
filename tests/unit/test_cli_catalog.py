"""The command line's catalog: every command listed once with the help its module registers, and
`--help`/`--version` answered without importing any command (nothing of the broker clients,
stores or policies)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from boost_tenancy.cli import build_parser, main
from boost_tenancy.cli.catalog import COMMANDS


def listed_commands(command: str | None) -> dict[str, str | None]:
    parser = build_parser(command)
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return {action.dest: action.help for action in sub._choices_actions}


def test_the_full_parser_registers_exactly_the_catalogs_commands_with_their_help() -> None:
    assert listed_commands(None) == {name: entry.help for name, entry in COMMANDS.items()}


def command_help(parser: argparse.ArgumentParser, command: str) -> str:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return str(sub.choices[command].format_help())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_parser_built_for_one_command_gives_it_every_option_of_the_full_parser(
    command: str,
) -> None:
    assert listed_commands(command) == listed_commands(None)
    assert command_help(build_parser(command), command) == command_help(build_parser(), command)


def test_help_and_version_import_no_command() -> None:
    code = (
        "import sys, json\n"
        "from boost_tenancy.cli import main\n"
        "for argv in (['--help'], ['--version']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('boost_tenancy'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [
        "boost_tenancy",
        "boost_tenancy.cli",
        "boost_tenancy.cli.catalog",
        "boost_tenancy.errors",
    ]


def test_an_unknown_command_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["nosuch"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nosuch' (choose from 'publish', 'run'" in capsys.readouterr().err


def test_every_option_of_every_command_says_what_it_is() -> None:
    def undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
        missing = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    missing += undocumented(sub, f"{path} {name}".strip())
            elif action.help is None and not isinstance(action, argparse._HelpAction):
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return missing

    assert undocumented(build_parser(), "") == []
