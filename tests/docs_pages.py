"""The user guide's pages as the tests read them: README.md and docs/*.md, their shell blocks
with the `<!-- docs-shell: ... -->` directives above them, and the project files of their
`# file:` blocks.

A directive says what a block needs to run (tests/integration/test_docs_shell.py lists them);
several in one comment are separated by `;`, and several comments may stand above one block.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.packaging_support import REPO_ROOT

PAGES: Final = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
PLACEHOLDER: Final = "/path/to/boost-tenancy"
"""The getting-started page's name for the checkout."""
FILE_MARK: Final = "# file: "
_DIRECTIVE: Final = re.compile(r"^<!-- docs-shell: (.*?) -->$")
_SHELL_FENCE: Final = re.compile(
    r"^ *```(?:sh|bash|shell)\n(.*?)^ *```$", flags=re.MULTILINE | re.DOTALL
)
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")
_NAMED_PATH: Final = re.compile(r"(?<![\w/.-])(?:\./)?(scripts/[\w-]+|benchmarks/\w+\.py)\b")


@dataclass(frozen=True)
class ShellBlock:
    """One sh block of a page: its text, the line of its opening fence, its directives."""

    page: Path
    line: int
    text: str
    directives: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"

    def directive(self, name: str) -> str | None:
        """What follows the directive starting with name ('' for a bare one), or None."""
        for given in self.directives:
            if given == name or given.startswith(name + " "):
                return given[len(name) :].strip()
        return None

    def commands(self) -> list[str]:
        """Its lines, continuations joined, blank lines dropped."""
        return [line for line in self.text.replace("\\\n", " ").splitlines() if line.strip()]


def shell_blocks(page: Path) -> list[ShellBlock]:
    """The page's sh blocks in order, each with the directives of the comments right above it."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    blocks = []
    for match in _SHELL_FENCE.finditer(text):
        fence = text[: match.start()].count("\n")  # 0-based line of the opening fence
        directives: list[str] = []
        above = fence - 1
        while above >= 0 and (given := _DIRECTIVE.match(lines[above].strip())):
            directives = [part.strip() for part in given.group(1).split(";")] + directives
            above -= 1
        blocks.append(ShellBlock(page, fence + 1, match.group(1), tuple(directives)))
    return blocks


def words_of(line: str) -> list[str]:
    """The line's words, without its comment and the assignments in front of its command."""
    words = shlex.split(line, comments=True)
    while words and _ASSIGNMENT.fullmatch(words[0]):
        words.pop(0)
    return words


def named_paths(line: str) -> list[str]:
    """The scripts and benchmarks of the checkout a line runs (scripts/x, benchmarks/y.py)."""
    return _NAMED_PATH.findall(line.split("#", 1)[0])


def project_files(text: str) -> dict[str, str]:
    """The page's `# file:` blocks: path in the reader's project -> content."""
    files = {}
    for content in re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        first, _, rest = content.partition("\n")
        if first.startswith(FILE_MARK):
            files[first[len(FILE_MARK) :].strip()] = rest
    return files


def write_project(text: str, root: Path) -> list[Path]:
    """The page's `# file:` blocks written under root; the paths written."""
    written = []
    for name, content in project_files(text).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    return written
