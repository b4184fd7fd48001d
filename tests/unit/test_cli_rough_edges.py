"""The command without silent no-ops or tracebacks: processors loaded from a class or a factory
(anything else exit 2, naming it), --version, a count below 1 refused, the store read named
when nothing is found, dead-letter bodies shown only on request and bounded, and a re-drive of
an unknown id moving nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import pytest
import structlog

from boost_tenancy import HandlerContext, IncomingMessage, TenantId, TenantProcessor
from boost_tenancy.cli import main
from boost_tenancy.cli import messaging as cli_messaging
from boost_tenancy.cli.dead_letters import BODY_PREVIEW_CHARS, body_json, view_json
from boost_tenancy.cli.messaging import load_processor
from boost_tenancy.errors import ConfigError, DeadLettersNotFoundError
from boost_tenancy.messages import MESSAGE_ID_PROPERTY, build_message
from boost_tenancy.ops.dead_letters import DeadLetterAdmin, DeadLetterView
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import (
    ErrorStore,
    FailureOutcome,
    FailureRecord,
    SQLiteErrorStore,
)
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """main() configures structlog onto the captured stderr; later tests must not write there."""
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private error store and a broker port nothing listens on: a refusal must come before
    any connection is tried."""
    store = tmp_path / "state" / "errors.sqlite3"
    monkeypatch.setenv("BOOST_ERROR_STORE", f"sqlite:///{store}")
    monkeypatch.setenv("BOOST_BROKER_URL", "stomp://127.0.0.1:1")
    return store


# -- processors: a class or a factory -------------------------------------------------------------
class Plain(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("cmd.loaded",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        pass


class NeedsSettings(Plain):
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint


class NoHandle(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("cmd.loaded",)


def build() -> NeedsSettings:
    return NeedsSettings("https://billing.internal")


def build_nothing() -> dict[str, str]:
    return {"not": "a processor"}


def build_failing() -> Plain:
    raise KeyError("BILLING_URL")


def build_with(endpoint: str) -> NeedsSettings:
    return NeedsSettings(endpoint)


NOT_CALLABLE = 42


class NotAProcessor:
    pass


def test_a_class_is_built_without_arguments() -> None:
    assert type(load_processor(f"{__name__}:Plain")) is Plain


def test_a_factory_builds_a_processor_that_needs_arguments() -> None:
    processor = load_processor(f"{__name__}:build")
    assert isinstance(processor, NeedsSettings)
    assert processor.endpoint == "https://billing.internal"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("NeedsSettings", "must be callable without arguments"),
        ("NoHandle", "does not implement handle"),
        ("build_nothing", "returned dict, not a TenantProcessor"),
        ("build_failing", "failed to build the processor: KeyError: 'BILLING_URL'"),
        ("build_with", "must be callable without arguments"),
        ("NOT_CALLABLE", "is a int, not a TenantProcessor subclass or a factory"),
        ("NotAProcessor", "is a class but not a TenantProcessor subclass"),
        ("missing", "has no 'missing'"),
    ],
)
def test_what_cannot_give_a_processor_is_refused_naming_why(name: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_processor(f"{__name__}:{name}")
    assert said in str(caught.value)


@pytest.mark.parametrize("name", ["NeedsSettings", "NoHandle", "build_nothing", "build_failing"])
def test_run_exits_2_with_one_line_and_no_traceback(
    offline: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["run", f"{__name__}:{name}", "--tenant", "org-a"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("boost-tenancy: error: ")
    assert "Traceback" not in err


# -- --version and counts --------------------------------------------------------------------------
def test_version_prints_the_installed_distributions_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "boost_tenancy.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"boost-tenancy {version('boost-tenancy')}"


@pytest.mark.parametrize("count", ["0", "-3", "two"])
def test_publish_refuses_a_count_below_one_before_connecting(
    offline: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["publish", "--queue", "q", "--tenant", "org-a", "--text", "x", "--count", count])
    assert exited.value.code == 2
    assert "argument --count" in capsys.readouterr().err


def test_dlq_list_refuses_a_limit_below_one(
    offline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["dlq", "list", "--tenant", "org-a", "--queue", "q", "--limit", "0"])
    assert exited.value.code == 2
    assert "argument --limit: must be at least 1" in capsys.readouterr().err


# -- which store was read ------------------------------------------------------------------------
def test_errors_finding_nothing_names_the_store_it_read(
    offline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["errors", "--tenant", "org-a"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"no failures found in the error store sqlite:///{offline}" in err


def test_errors_names_no_store_when_it_found_failures(
    offline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = SQLiteErrorStore(offline)
    written.record(
        FailureRecord(
            tenant=TenantId("org-a"),
            queue="q",
            message_id="m-1",
            correlation_id="c-1",
            attempt=1,
            outcome=FailureOutcome.RETRY,
            error_type="RuntimeError",
            error_text="boom",
            occurred_at=datetime.now(UTC),
        )
    )
    written.close()
    assert main(["errors", "--tenant", "org-a"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["message_id"] == "m-1"
    assert "no failures" not in err


# -- dead-letter bodies ----------------------------------------------------------------------------
def view(body: str | bytes) -> DeadLetterView:
    return DeadLetterView(
        message_id="m-1",
        tenant=TenantId("org-a"),
        original_queue="tenant.org-a.q",
        reason="exhausted",
        attempts=3,
        error_type="RuntimeError",
        error="boom",
        body=body,
        failures=(),
    )


def test_a_dead_letters_body_is_hidden_unless_asked_for() -> None:
    assert "body" not in json.loads(view_json(view("secret")))
    shown = json.loads(view_json(view("secret"), show_body=True))
    assert (shown["body"], shown["body_truncated"], shown["body_encoding"]) == (
        "secret",
        False,
        "text",
    )


def test_a_long_body_is_cut_and_says_so() -> None:
    shown = body_json("x" * (BODY_PREVIEW_CHARS * 50))
    assert len(shown["body"]) == BODY_PREVIEW_CHARS
    assert shown["body_truncated"] is True
    assert shown["body_length"] == BODY_PREVIEW_CHARS * 50


def test_terminal_escapes_in_a_body_print_as_harmless_ascii() -> None:
    line = view_json(view("\x1b]0;owned\x07\x1b[2J\u202etxt.exe\r\n"), show_body=True)
    assert line.isascii()
    assert "\x1b" not in line and "\r" not in line and "\n" not in line
    assert json.loads(line)["body"].startswith("\x1b]0;owned")


def test_a_binary_body_is_base64_and_bounded() -> None:
    shown = body_json(bytes(range(256)) * 100)
    assert shown["body_encoding"] == "base64"
    assert len(shown["body"]) <= BODY_PREVIEW_CHARS
    assert shown["body_truncated"] is True
    assert shown["body_length"] == 25_600


# -- re-driving an id that is not there ------------------------------------------------------------
def test_redrive_of_an_unknown_id_names_it_and_moves_nothing(store: ErrorStore) -> None:
    broker = InMemoryBroker()
    transport = InMemoryTransport(broker)
    transport.connect()
    try:
        dlq = dead_letter_queue("tenant.org-a.q")
        kept = build_message("org-a", {"n": 1}, message_id="kept-1").to_wire()
        transport.send(dlq, kept)
        admin = DeadLetterAdmin(transport, store)
        with pytest.raises(DeadLettersNotFoundError) as caught:
            admin.redrive("org-a", "q", message_ids=["kept-1", "nope"], idle_s=0.3)
        assert caught.value.missing == ["nope"]
        assert "'nope'" in str(caught.value) and "nothing was re-driven" in str(caught.value)
        assert [m.properties[MESSAGE_ID_PROPERTY] for m in broker.messages(dlq)] == ["kept-1"]
        assert broker.messages("tenant.org-a.q") == []
        assert admin.redrive("org-a", "q", message_ids=["kept-1"], idle_s=0.3) == ["kept-1"]
        assert broker.messages(dlq) == []
    finally:
        transport.close()
        broker.close()


# -- publish: many messages from JSON lines, in confirmed batches on one connection ---------------
def test_publish_sends_every_json_line_in_batches_over_one_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = InMemoryBroker()
    opened: list[InMemoryTransport] = []

    def connected(_settings: object) -> InMemoryTransport:
        transport = InMemoryTransport(broker)
        transport.connect()
        opened.append(transport)
        return transport

    monkeypatch.setattr(cli_messaging, "connected", connected)
    lines = tmp_path / "invoices.jsonl"
    lines.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(1, 1201)) + "\n")
    argv = ["publish", "--queue", "cmd.bulk", "--tenant", "org-a", "--json-lines", str(lines)]
    assert main([*argv, "--batch-size", "500"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(shown) == 1200
    assert len({s["message_id"] for s in shown}) == 1200
    assert len(opened) == 1
    stored = broker.messages("tenant.org-a.cmd.bulk")
    assert [json.loads(m.body)["n"] for m in stored] == list(range(1, 1201))
    assert {m.properties["tenantUUID"] for m in stored} == {"org-a"}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"n": 1}\nnot json\n', "line 2: not valid JSON"),
        ('{"n": 1}\n[1, 2]\n', "line 2: a list, not a JSON object"),
        ("\n\n", "no message in it"),
    ],
)
def test_publish_checks_every_json_line_before_sending_any(
    offline: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    said: str,
) -> None:
    lines = tmp_path / "bad.jsonl"
    lines.write_text(content)
    argv = ["publish", "--queue", "q", "--tenant", "org-a", "--json-lines", str(lines)]
    assert main(argv) == 2  # refused before any connection: nothing listens on the port
    assert said in capsys.readouterr().err


def test_errors_prints_a_table_when_asked_and_escapes_what_a_terminal_would_run(
    offline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = SQLiteErrorStore(offline)
    written.record(
        FailureRecord(
            tenant=TenantId("org-a"),
            queue="q",
            message_id="m-1",
            correlation_id="c-1",
            attempt=2,
            outcome=FailureOutcome.RETRY,
            error_type="RuntimeError",
            error_text="boom \x1b[31mred\x1b[0m " + "x" * 200,
            occurred_at=datetime.now(UTC),
        )
    )
    written.close()
    assert main(["errors", "--tenant", "org-a", "--output", "table"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "at",
        "queue",
        "message",
        "id",
        "attempt",
        "outcome",
        "error",
        "type",
        "error",
    ]
    assert "\x1b" not in row
    assert "boom \\x1b[31mred" in row
    assert row.endswith("…")
    assert "m-1" in row and "retry" in row
    # Piped, the default stays one JSON object per line.
    assert main(["errors", "--tenant", "org-a"]) == 0
    assert json.loads(capsys.readouterr().out)["attempt"] == 2
