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
from tests.packaging_support import REPO_ROOT

PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
PLACEHOLDER = "/path/to/boost-tenancy/"
"""The getting-started page's name for the checkout."""
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


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
    text = page.read_text(encoding="utf-8")
    for match in re.finditer(
        r"^ *```(?:sh|bash|shell)\n(.*?)^ *```$", text, re.MULTILINE | re.DOTALL
    ):
        first_line = text[: match.start()].count("\n") + 2
        joined = match.group(1).replace("\\\n", " ")
        for offset, raw in enumerate(joined.splitlines()):
            try:
                words = shlex.split(raw, comments=True)
            except ValueError as exc:
                pytest.fail(f"{page.name}:{first_line + offset}: not a shell line ({exc}): {raw}")
            while words and _ASSIGNMENT.match(words[0]):
                words.pop(0)
            if words:
                yield Command(page, first_line + offset, words)


ALL = [command for page in PAGES for command in commands(page)]


def program(command: Command) -> str:
    return command.words[0].replace(PLACEHOLDER, "")


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
    path = REPO_ROOT / target.removeprefix("./").replace(PLACEHOLDER, "")
    written = re.findall(r"^```python\n# file: (\S+)$", command.page.read_text(), re.MULTILINE)
    assert path.is_file() or target in written, f"{command.where}: {target} is not in the checkout"


def test_the_commands_are_found() -> None:
    """The tests above read the pages' commands: most of them are checked."""
    assert len(CHECKED_CLI) >= 30
    assert len(FILES) >= 20
    assert len(CHECKED_CLI) + len(FILES) >= 0.6 * len(ALL)
