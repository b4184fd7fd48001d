"""Every shell block of the user guide runs: README.md and docs/*.md, each page's blocks in order
in one bash session (`set -euo pipefail`), as a reader pastes them into one terminal, from the
checkout, against the suite's broker.

What a page needs beyond its text is said on the page, in a comment above the block
(`<!-- docs-shell: ... -->`, not shown in the rendered page; tests/docs_pages.py reads them):

- `run by PATH`: the block runs in PATH instead (a fresh virtual environment, a broker pair, the
  suite itself, the benchmarks' short runs); tests/unit/test_docs_commands.py checks that PATH
  runs every script and benchmark the block names.
- `artemis`: the block needs Artemis; it runs where the suite's broker is Artemis (CI's second
  pass).
- `ID quarantined from QUEUE` (or `... of TENANT`, from the tenant's own queue): a message of
  QUEUE is quarantined first, and the block's `ID` is its message id.
- `expect TEXT`: what the commands serving in the background must have logged by the end of
  the block (waited for).
- `own brokers`: the block starts, restarts, kills or purges brokers, so it runs on a Classic and
  an Artemis of its own (other ports and homes), stopped when the page ends.

A block of variable assignments alone (a broker URL) is read as a runner reads its environment:
the settings and the transport the URL names, not connected.

A command that serves until SIGTERM (`boost-tenancy run`, `boost-tenancy park`, `uvicorn`) is
started in the background; it must still be running when the page ends (at least SERVE_S after
its start), and exit 0 on SIGTERM. The page's `# file:` blocks are written to a directory of
their own, the session's working directory (the getting-started project). Changed from the
text: `/path/to/boost-tenancy` is this checkout; `org-*` tenants get a suffix of the run, so two
runs share no queue; the checkout's `.venv/bin` comes first on PATH. Untracked files a page
writes into the checkout are removed after it (var/, git-ignored, keeps its SQLite stores); an
Artemis the page started is stopped, and every process of the session is killed if it outlives
its timeout.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import pytest

from devtools.broker_settings import ENV_HOME, ENV_OPENWIRE_PORT
from tests.docs_pages import (
    PAGES,
    PLACEHOLDER,
    ShellBlock,
    shell_blocks,
    words_of,
    write_project,
)
from tests.packaging_support import REPO_ROOT

pytestmark = [pytest.mark.broker, pytest.mark.slow]

OWN_BROKERS: Final = "own brokers"
PAGE_TIMEOUT_S: Final = 600
SERVE_S: Final = 5
"""The least a serving command runs before the page stops it."""
SERVING: Final = (("boost-tenancy", "run"), ("boost-tenancy", "park"), ("uvicorn",))
OWN_CLASSIC_OFFSET: Final = 2100
"""Ports of the page's own Classic, past every offset of the suite's own brokers."""
OWN_ARTEMIS_OFFSET: Final = 1750
"""Ports of the page's own Artemis (at most 2000), beside none of the suite's."""
SUPPORT: Final = "tests.integration.docs_shell_support"
NOT_OWN: Final = ("BOOST_BROKER_USER", "BOOST_BROKER_PASSWORD", "BOOST_BROKER_AMQP_URL")
"""The suite's broker's variables a block on brokers of its own goes without."""
_ASSIGNMENTS_ONLY: Final = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s*)+")

SERVE_FUNCTIONS = r"""
_served=()
serve() {
  local log
  log=$(mktemp "$DOCS_SHELL_LOGS/served.XXXXXX")
  env "$@" >"$log" 2>&1 &
  _served+=("$!:$log:$SECONDS")
  echo "serving in the background (pid $!): $*"
}
expect_served() {
  local deadline=$((SECONDS + 60)) entry log
  while [ "$SECONDS" -lt "$deadline" ]; do
    for entry in "${_served[@]}"; do
      log=${entry#*:}
      if grep -q -- "$1" "${log%:*}"; then return 0; fi
    done
    sleep 0.5
  done
  echo "nothing serving logged $1 within 60 s" >&2
  return 1
}
stop_served() {
  local status=0 entry pid log code started
  for entry in "${_served[@]}"; do
    pid=${entry%%:*}
    log=${entry#*:}
    started=${log##*:}
    log=${log%:*}
    # Long enough to have connected and subscribed, or to have failed doing so.
    while [ $((SECONDS - started)) -lt "$DOCS_SHELL_SERVE_S" ] && kill -0 "$pid" 2>/dev/null; do
      sleep 0.2
    done
    if ! kill -0 "$pid" 2>/dev/null; then
      code=0
      wait "$pid" || code=$?
      echo "== pid $pid stopped by itself (exit $code) before the page ended:" >&2
      cat "$log" >&2
      status=1
      continue
    fi
    kill -TERM "$pid"
    code=0
    wait "$pid" || code=$?
    # uvicorn ends a clean shutdown with the signal's own status, as a shell does.
    if [ "$code" = 143 ] && grep -q "Application shutdown complete" "$log"; then code=0; fi
    if [ "$code" != 0 ]; then
      echo "== pid $pid exited $code on SIGTERM:" >&2
      cat "$log" >&2
      status=1
    fi
  done
  _served=()
  return "$status"
}
trap 'for entry in "${_served[@]}"; do kill -KILL "${entry%%:*}" 2>/dev/null || true; done' EXIT
trap 'echo "== failed: $BASH_COMMAND (line $LINENO of the session)" >&2' ERR
"""


def runs_here(block: ShellBlock) -> bool:
    return block.directive("run by") is None


RUN_HERE = [page for page in PAGES if any(runs_here(b) for b in shell_blocks(page))]


def serves(line: str) -> bool:
    """Whether the line's command serves until SIGTERM."""
    words = words_of(line)
    if not words:
        return False
    named = (os.path.basename(words[0]), *words[1:2])
    return any(named[: len(kind)] == kind for kind in SERVING)


def session(page: Path, *, artemis: bool, run: str, own: Mapping[str, str]) -> str:
    """The page's bash session: its blocks but those run elsewhere, or on Artemis only when the
    suite's broker is not Artemis. own: the variables of the brokers of its own."""

    def tenants(text: str) -> str:
        return re.sub(r"(?<![\w.-])(org-[a-z]+)(?![\w-])", rf"\g<1>-{run}", text)

    parts = ["set -euo pipefail", SERVE_FUNCTIONS]
    for block in shell_blocks(page):
        if not runs_here(block) or (block.directive("artemis") is not None and not artemis):
            continue
        parts.append(f"echo '== {block.where}'")
        lines = [tenants(line.replace(PLACEHOLDER, str(REPO_ROOT))) for line in block.commands()]
        if all(_ASSIGNMENTS_ONLY.fullmatch(line.strip()) for line in lines):
            parts.append(f'env {" ".join(lines)} "$DOCS_SHELL_PYTHON" -m {SUPPORT} settings')
            continue
        quarantined = block.directive("ID quarantined from")
        if quarantined:
            queue, _, tenant = tenants(quarantined).partition(" of ")
            option = f" --tenant {shlex.quote(tenant)}" if tenant else ""
            parts.append(
                f'ID=$("$DOCS_SHELL_PYTHON" -m {SUPPORT} quarantine {shlex.quote(queue)}{option}'
                " | tail -n 1)"
            )
            lines = [re.sub(r"(?<![\w$-])ID(?![\w-])", '"$ID"', line) for line in lines]
        on_own = block.directive(OWN_BROKERS) is not None
        if on_own:
            assigned = " ".join(f"{name}={shlex.quote(value)}" for name, value in own.items())
            parts.append(f"( export {assigned}; unset {' '.join(NOT_OWN)}")
        for line in lines:
            served = serves(line)
            assert not (on_own and served), f"{block.where}: serves on brokers of its own"
            parts.append(f"serve {line}" if served else line)
        if on_own:
            parts.append(")")
        expected = block.directive("expect")
        if expected:
            parts.append(f"expect_served {shlex.quote(expected)}")
    parts.append("stop_served")
    return "\n".join(parts) + "\n"


def own_brokers(scratch: Path) -> dict[str, str]:
    """Where the page's brokers of its own live and listen."""
    return {
        ENV_HOME: str(scratch / "classic"),
        "BOOST_BROKER_URL": f"stomp://127.0.0.1:{61613 + OWN_CLASSIC_OFFSET}",
        ENV_OPENWIRE_PORT: str(61616 + OWN_CLASSIC_OFFSET),
        "BOOST_ARTEMIS_HOME": str(scratch / "artemis"),
        "BOOST_ARTEMIS_PORT_OFFSET": str(OWN_ARTEMIS_OFFSET),
    }


def untracked() -> set[str]:
    """The checkout's untracked files outside git-ignored paths."""
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(listed.stdout.splitlines())


def artemis_running(env: Mapping[str, str]) -> bool:
    status = subprocess.run(
        ["scripts/artemis", "status"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return '"running": true' in status.stdout


@pytest.fixture
def clean_checkout() -> Iterator[None]:
    before = untracked()
    yield
    for name in untracked() - before:
        (REPO_ROOT / name).unlink(missing_ok=True)


def run_session(script: str, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """script in bash, in a process group of its own: killed whole if it outlives
    PAGE_TIMEOUT_S, so no runner it started keeps consuming from the suite's broker."""
    with subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=PAGE_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.parametrize("page", RUN_HERE, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_the_pages_shell_blocks_run(page: Path, tmp_path: Path, clean_checkout: None) -> None:
    artemis = os.environ.get("BOOST_TEST_BROKER_FLAVOUR") == "artemis"
    own = own_brokers(tmp_path)
    script = session(page, artemis=artemis, run=uuid.uuid4().hex[:6], own=own)
    cwd = REPO_ROOT
    if write_project(page.read_text(encoding="utf-8"), tmp_path / "project"):
        cwd = tmp_path / "project"
    logs = tmp_path / "logs"
    logs.mkdir()
    (REPO_ROOT / "var").mkdir(exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(REPO_ROOT / ".venv" / "bin"), env.get("PATH", "")])
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["DOCS_SHELL_LOGS"] = str(logs)
    env["DOCS_SHELL_PYTHON"] = str(REPO_ROOT / ".venv" / "bin" / "python")
    env["DOCS_SHELL_SERVE_S"] = str(SERVE_S)
    had_artemis = artemis_running(env)
    on_own = any(b.directive(OWN_BROKERS) is not None for b in shell_blocks(page))
    try:
        done = run_session(script, cwd, env)
    finally:
        stops = []
        if on_own:
            own_env = {k: v for k, v in {**env, **own}.items() if k not in NOT_OWN}
            stops += [(["scripts/broker", "stop"], own_env), (["scripts/artemis", "stop"], own_env)]
        if not had_artemis and artemis_running(env):
            stops.append((["scripts/artemis", "stop"], env))  # the page started it
        for command, stop_env in stops:
            stopped = subprocess.run(
                command, cwd=REPO_ROOT, env=stop_env, capture_output=True, text=True, check=False
            )
            assert stopped.returncode == 0, f"{command}: {stopped.stdout}{stopped.stderr}"
    assert done.returncode == 0, (
        f"{page.name}'s shell blocks failed (exit {done.returncode}):\n"
        f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    )
