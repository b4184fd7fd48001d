"""The shell blocks of the user guide name commands that exist, with options they take.

They run against the brokers in tests/integration/test_docs_shell.py; this is the check that needs
none, so a renamed option fails on any machine: every `boost-tenancy` command line is parsed by the
command's own parser; every script and Python file a command names must exist in the checkout, or
be a file of the page's own project (its `# file:` blocks). A line that is none of those (eval,
export, pip, pytest, uvicorn) is counted, not checked.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from boost_tenancy.cli import build_parser
from tests.docs_pages import (
    PAGES,
    PLACEHOLDER,
    ShellBlock,
    named_paths,
    project_files,
    shell_blocks,
    words_of,
)
from tests.packaging_support import REPO_ROOT


@dataclass(frozen=True)
class Command:
    page: Path
    line: int
    words: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def commands(page: Path) -> Iterator[Command]:
    """Every command of the page's sh blocks: continuation lines joined, comments and the
    environment assignments in front of it dropped."""
    for block in shell_blocks(page):
        for offset, raw in enumerate(block.text.replace("\\\n", " ").splitlines()):
            try:
                words = words_of(raw)
            except ValueError as exc:
                pytest.fail(
                    f"{page.name}:{block.line + 1 + offset}: not a shell line ({exc}): {raw}"
                )
            if words:
                yield Command(page, block.line + 1 + offset, words)


ALL = [command for page in PAGES for command in commands(page)]


def program(command: Command) -> str:
    return command.words[0].replace(PLACEHOLDER + "/", "")


CLI = [c for c in ALL if program(c) in ("boost-tenancy", ".venv/bin/boost-tenancy")]
FILES = [
    c
    for c in ALL
    if program(c).startswith(("scripts/", "./scripts/"))
    or (program(c).endswith("python") and len(c.words) > 1 and c.words[1].endswith(".py"))
]


def cli_arguments(command: Command) -> list[str]:
    """The command's arguments as the CLI gets them: what follows a redirection or a pipe is
    the shell's, and an option written as optional ([--limit N]) is checked as given."""
    words = command.words[1:]
    for stop in (">", "|", "<", "&&", ";"):
        if stop in words:
            words = words[: words.index(stop)]
    given = [w.strip("[]") for w in words if w.strip("[]") not in ("", "...")]
    return [PLACEHOLDER_VALUES.get(w, w) for w in given]


PLACEHOLDER_VALUES = {"N": "10"}
"""A placeholder the pages write for a number (--limit N), as a reader would fill it in."""


CHECKED_CLI = [c for c in CLI if "..." not in c.words]
"""`boost-tenancy run ...`: a placeholder for the reader's own arguments, not a command line."""


@pytest.mark.parametrize("command", CHECKED_CLI, ids=lambda c: c.where)
def test_every_cli_line_parses(command: Command) -> None:
    arguments = cli_arguments(command)
    named = next((a for a in arguments if not a.startswith("-")), "")
    try:
        build_parser(named).parse_args(arguments)
    except SystemExit as exc:
        if exc.code != 0:  # --help and --version exit 0
            pytest.fail(f"{command.where}: boost-tenancy refuses {shlex.join(arguments)}")


@pytest.mark.parametrize("command", FILES, ids=lambda c: c.where)
def test_every_script_and_file_named_exists(command: Command) -> None:
    target = program(command) if "scripts/" in program(command) else command.words[1]
    path = REPO_ROOT / target.removeprefix("./").replace(PLACEHOLDER + "/", "")
    written = project_files(command.page.read_text(encoding="utf-8"))
    assert path.is_file() or target in written, f"{command.where}: {target} is not in the checkout"


def test_the_commands_are_found() -> None:
    """The tests above read the pages' commands: most of them are checked."""
    assert len(CHECKED_CLI) >= 30
    assert len(FILES) >= 20
    assert len(CHECKED_CLI) + len(FILES) >= 0.6 * len(ALL)


RUN_ELSEWHERE = [
    block for page in PAGES for block in shell_blocks(page) if block.directive("run by")
]


@pytest.mark.parametrize("block", RUN_ELSEWHERE, ids=lambda b: b.where)
def test_a_block_run_elsewhere_is_run_there(block: ShellBlock) -> None:
    """`<!-- docs-shell: run by PATH -->` is a promise: PATH exists, and runs every script and
    benchmark the block names, or drives the devtools module a script runs (scripts/artemis-pair
    is `python -m devtools.artemis_pair`). tests/integration/test_docs_shell.py runs the others."""
    where = str(block.directive("run by"))
    target = REPO_ROOT / where
    assert target.is_file(), f"{block.where}: run by {where}, which does not exist"
    text = target.read_text(encoding="utf-8")
    for line in block.commands():
        for path in named_paths(line.replace(PLACEHOLDER + "/", "")):
            runs = re.search(rf"(?<![\w/.-]){re.escape(path)}(?![\w-])", text)
            module = script_module(path)
            drives = module is not None and re.search(
                rf"^(from {re.escape(module)} import|import {re.escape(module)}\b)", text, re.M
            )
            assert runs or drives, f"{block.where}: {where} runs neither {path} nor its module"


def script_module(path: str) -> str | None:
    """The devtools module a script of the checkout runs (`python -m devtools.x`), if any."""
    if not path.startswith("scripts/"):
        return None
    found = re.search(r"-m (devtools\.\w+)", (REPO_ROOT / path).read_text(encoding="utf-8"))
    return found.group(1) if found else None


def test_blocks_run_elsewhere_are_found() -> None:
    assert len(RUN_ELSEWHERE) >= 15
