"""The command refuses a processor it cannot run correctly before it takes any message."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor
from boost_tenancy.cli import build_parser, main


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """main() configures structlog onto the captured stderr; later tests must not write there."""
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)


class AsyncGeneratorHandle(TenantProcessor):
    queues = ("cmd.refused",)

    async def handle(  # type: ignore[override]  # the mistake under test
        self, message: IncomingMessage, ctx: HandlerContext
    ) -> AsyncIterator[None]:
        yield None


def test_run_refuses_an_async_generator_handle_with_exit_2_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An async def handle runs on the runner's event loop; one that yields would never run."""
    monkeypatch.setenv("BOOST_ERROR_STORE", f"sqlite:///{tmp_path / 'errors.sqlite3'}")
    # A port nothing listens on: the refusal must come before any connection is tried.
    monkeypatch.setenv("BOOST_BROKER_URL", "stomp://127.0.0.1:1")
    code = main(["run", f"{__name__}:AsyncGeneratorHandle", "--tenant", "org-a"])
    assert code == 2
    err = capsys.readouterr().err
    assert "AsyncGeneratorHandle.handle is an async generator" in err
    assert "async def without yield" in err


def test_a_non_finite_grace_period_is_refused_at_start_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BOOST_SHUTDOWN_GRACE_S", "inf")
    assert main(["errors", "--tenant", "org-a"]) == 2
    assert "BOOST_SHUTDOWN_GRACE_S must be a finite number" in capsys.readouterr().err


class Echo(TenantProcessor):
    queues = ("cmd.refused",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise AssertionError("never called: start-up stops first")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BOOST_FAIRNESS": "off", "BOOST_RATE_PER_S": "5"}, "BOOST_RATE_PER_S set while"),
        ({"BOOST_FAIRNESS": "off", "BOOST_RATE_PER_S": "-1"}, "BOOST_RATE_PER_S"),
        ({"BOOST_RATE_PER_S": "-1"}, "BOOST_RATE_PER_S"),
        ({"BOOST_TIER_FREE_LIMIT": "2"}, "BOOST_TIER_FREE_LIMIT set without BOOST_TIER_STORE"),
    ],
)
def test_run_stops_at_start_up_on_a_misconfigured_limit(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    named: str,
) -> None:
    """A limit that would do nothing, or a negative one, is refused before any connection."""
    monkeypatch.setenv("BOOST_ERROR_STORE", f"sqlite:///{tmp_path / 'errors.sqlite3'}")
    monkeypatch.setenv("BOOST_BROKER_URL", "stomp://127.0.0.1:1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["run", f"{__name__}:Echo", "--tenant", "org-a"]) == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "no_such_module:Processor", "--tenant", ""], "--tenant"),
        (["run", "no_such_module:Processor", "--tenant", ",", "--tenant", ""], "--tenant"),
        (
            ["park", "--queue", "cmd.a", "--active-tenant", ""],
            "--active-tenant",
        ),
    ],
)
def test_a_tenant_flag_naming_no_tenant_says_so_and_how_to_name_one(
    argv: list[str],
    flag: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("BOOST_BROKER_URL", "stomp://127.0.0.1:1")
    monkeypatch.setenv("BOOST_ROUTING", "shared")  # park takes shared queues
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"boost-tenancy: error: {flag} " in error
    assert "names no tenant: give one or more tenant ids" in error
    assert f"{flag} acme,globex" in error


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["publish", "--queue", "q1", "--tenant", "org-a", "--jsn", "{}"],
            "--jsn (did you mean --json?)",
        ),
        (["publish", "--qeue", "q1"], "--qeue (did you mean --queue?)"),
        (["--verison"], "--verison (did you mean --version?)"),
        (["errors", "--tenant", "org-a", "--limt=3"], "--limt (did you mean --limit?)"),
    ],
)
def test_a_mistyped_option_is_named_before_any_flag_it_leaves_missing(
    argv: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse reported --json (or --queue, or the command) missing, never the typo."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert f"error: unrecognized arguments: {shown}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        # Another command's option is no suggestion, nor is an option suggested for itself.
        (["dlq", "list", "--tenant", "a", "--queue", "q", "--message-id", "x"], "--message-id"),
        (["--json", "stats", "--tenant", "a", "--queue", "q"], "--json"),
    ],
)
def test_an_option_of_another_command_is_named_without_a_suggestion(
    argv: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {shown}" in err
    assert "did you mean" not in err


def test_help_and_version_print_once_and_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.count("boost-tenancy ") == 1
    with pytest.raises(SystemExit):
        main(["publish", "--help"])
    printed = capsys.readouterr().out
    assert printed.count("usage:") == 1
    assert "--queue QUEUE --tenant TENANT" in printed, "the usage with its required flags"


@pytest.mark.parametrize(
    "argv",
    [
        ["dlq", "list", "--tenant", "org-a", "--queue", "q", "--json"],
        ["quarantine", "list", "--queue", "q", "--json"],
    ],
)
def test_every_listing_takes_json_as_the_stats_command_does(argv: list[str]) -> None:
    assert build_parser(argv[0]).parse_args(argv).output == "json"


def test_a_broker_that_does_not_answer_is_named_with_where_its_address_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("BOOST_BROKER_URL", f"stomp://127.0.0.1:{port}")
    monkeypatch.setenv("BOOST_BROKER_RECONNECT_WAIT_S", "0")
    assert main(["stats", "--tenant", "org-a", "--queue", "q"]) == 2
    err = capsys.readouterr().err
    assert f"cannot connect to STOMP broker at 127.0.0.1:{port}" in err
    assert err.rstrip().endswith("(from BOOST_BROKER_URL)")
