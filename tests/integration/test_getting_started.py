"""docs/getting-started.md cannot rot: a user's project is built from its code blocks alone, in a
fresh virtual environment where the toolkit is installed as the page says, and its tests pass.

It runs the page's shell blocks that name it (`<!-- docs-shell: run by ... -->`); the others,
against a broker, run in tests/integration/test_docs_shell.py. The only change to what the page
says: /path/to/boost-tenancy becomes a copy of this checkout.
The same install shows what `pip install` puts in site-packages: boost_tenancy and its metadata,
nothing else (no services/, no devtools/).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.docs_pages import PLACEHOLDER, shell_blocks, write_project
from tests.packaging_support import REPO_ROOT, copy_source

pytestmark = pytest.mark.slow

PAGE = REPO_ROOT / "docs" / "getting-started.md"
THIS_TEST = "tests/integration/test_getting_started.py"
DONE_HERE = ("python -m venv", ". .venv/bin/activate")
"""What the test does itself: the virtual environment, used by absolute path."""


def shell_commands() -> list[str]:
    """The commands of the page's blocks that name this test as where they run."""
    return [
        line.strip()
        for block in shell_blocks(PAGE)
        if block.directive("run by") == THIS_TEST
        for line in block.commands()
    ]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def test_the_getting_started_project_installs_and_passes_its_own_tests(tmp_path: Path) -> None:
    text = PAGE.read_text()
    project = tmp_path / "project"
    written = write_project(text, project)
    assert {p.relative_to(project).as_posix() for p in written} >= {
        "invoices.py",
        "tests/conftest.py",
        "tests/test_invoices.py",
    }
    checkout = copy_source(tmp_path / "boost-tenancy")
    venv = tmp_path / "venv"
    # The user's environment: none of this checkout's settings or import paths.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("BOOST_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")

    ran: list[str] = []
    for command in shell_commands():
        if command.startswith(DONE_HERE):
            continue
        args = shlex.split(command.replace(PLACEHOLDER, str(checkout)))
        if args[:2] == ["pip", "install"]:
            run([python, "-m", "pip", "install", "--quiet", *args[2:]], project, env)
        elif args[:3] == ["python", "-m", "pytest"]:
            done = run([python, "-m", "pytest", "-p", "no:cacheprovider", *args[3:]], project, env)
            assert re.search(r"\b4 passed\b", done.stdout), done.stdout
            assert "skipped" not in done.stdout, done.stdout
        elif args == ["boost-tenancy", "--version"]:
            done = run([str(venv / "bin" / "boost-tenancy"), "--version"], project, env)
            assert done.stdout.strip() == f"boost-tenancy {version('boost-tenancy')}"
        else:
            pytest.fail(f"getting-started.md runs {command!r}, which this test does not know")
        ran.append(args[0] if args[0] != "python" else "pytest")
    assert ran == ["pip", "boost-tenancy", "pytest"], ran

    # What pip installed: the toolkit, its metadata and its command, nothing beside them.
    (record,) = venv.glob("lib/python*/site-packages/boost_tenancy-*.dist-info/RECORD")
    installed = {line.split(",")[0] for line in record.read_text().splitlines() if line}
    tops = {path.split("/")[0] for path in installed if not path.startswith("../")}
    assert tops == {"boost_tenancy", record.parent.name}
    assert "boost_tenancy/py.typed" in installed
    assert [p for p in installed if p.startswith("../")] == ["../../../bin/boost-tenancy"]
    not_there = subprocess.run(
        [python, "-c", "import services"], cwd=tmp_path, env=env, capture_output=True, check=False
    )
    assert not_there.returncode != 0
