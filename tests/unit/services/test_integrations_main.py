"""The IntegrationsServer entry point: settings name each bad variable, SIGTERM stops it cleanly.

The full run swaps the STOMP transport for the in-memory one and serves on a real local port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from boost_tenancy import TenantId
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.contract import CMD_DOCUMENT_PROCESS
from services.common.documents import open_document_store
from services.integrations import __main__ as entry
from services.integrations.__main__ import InFlight, IntegrationsSettings
from tests.unit.services.tokens import AUDIENCE, ISSUER, SECRET, hs_token

ENV = {
    "BOOST_JWT_ALGORITHMS": "HS256",
    "BOOST_JWT_SECRET": SECRET,
    "BOOST_JWT_AUDIENCE": AUDIENCE,
    "BOOST_JWT_ISSUER": ISSUER,
}


def test_settings_defaults() -> None:
    settings = IntegrationsSettings.from_env(ENV)
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.blob_dir == Path("var/blobs")
    assert settings.document_store_url == "sqlite:///var/documents.sqlite3"
    assert settings.max_upload_bytes == 20 * 1024 * 1024
    assert settings.jwt.algorithms == ("HS256",)
    assert settings.app.stomp is not None and settings.app.stomp.port == 61613


def test_settings_read_every_variable() -> None:
    settings = IntegrationsSettings.from_env(
        {
            **ENV,
            "BOOST_HTTP_HOST": "0.0.0.0",  # a value under test, nothing is bound
            "BOOST_HTTP_PORT": "9090",
            "BOOST_HTTP_MAX_UPLOAD_BYTES": "1000",
            "BOOST_BLOB_DIR": "/srv/blobs",
            "BOOST_DOCUMENT_STORE": "sqlite:////srv/docs.sqlite3",
            "BOOST_BROKER_URL": "stomp://127.0.0.1:61614",
        }
    )
    assert (settings.host, settings.port, settings.max_upload_bytes) == ("0.0.0.0", 9090, 1000)
    assert (settings.blob_dir, settings.document_store_url) == (
        Path("/srv/blobs"),
        "sqlite:////srv/docs.sqlite3",
    )
    assert settings.app.stomp is not None and settings.app.stomp.port == 61614


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"BOOST_HTTP_PORT": "http"}, "BOOST_HTTP_PORT"),
        ({"BOOST_HTTP_PORT": "0"}, "BOOST_HTTP_PORT"),
        ({"BOOST_HTTP_PORT": "70000"}, "BOOST_HTTP_PORT"),
        ({"BOOST_HTTP_MAX_UPLOAD_BYTES": "0"}, "BOOST_HTTP_MAX_UPLOAD_BYTES"),
        ({"BOOST_JWT_ALGORITHMS": ""}, "BOOST_JWT_ALGORITHMS"),
        ({"BOOST_JWT_SECRET": "short"}, "BOOST_JWT_SECRET"),
        ({"BOOST_BROKER_URL": "stomp://h:x"}, "BOOST_BROKER_URL"),
        ({"BOOST_STOMP_PORT": "61614"}, "BOOST_BROKER_URL"),
        ({"BOOST_DOCUMENT_STORE": "mysql://db/docs"}, "BOOST_DOCUMENT_STORE"),
    ],
)
def test_a_configuration_error_names_the_variable_and_exits_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    change: dict[str, str],
    variable: str,
) -> None:
    for name, value in {**ENV, "BOOST_BLOB_DIR": str(tmp_path / "blobs"), **change}.items():
        monkeypatch.setenv(name, value)
    assert entry.main() == 2
    assert variable in capsys.readouterr().err


def test_in_flight_waits_until_every_tracked_connection_ends() -> None:
    in_flight = InFlight()
    assert in_flight.wait_idle(0)
    entered, release = threading.Event(), threading.Event()

    def serve() -> None:
        with in_flight.track():
            entered.set()
            release.wait(5)

    worker = threading.Thread(target=serve)
    worker.start()
    entered.wait(5)
    assert not in_flight.wait_idle(0.05)
    threading.Timer(0.05, release.set).start()
    assert in_flight.wait_idle(5)
    worker.join()


def test_a_connection_that_fails_is_no_longer_in_flight() -> None:
    in_flight = InFlight()
    with pytest.raises(ConnectionResetError), in_flight.track():
        raise ConnectionResetError
    assert in_flight.wait_idle(0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    # main() configures structlog for the process; later tests expect the defaults.
    yield
    structlog.reset_defaults()


@pytest.fixture
def restore_signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def test_serves_http_and_stops_cleanly_on_sigterm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_signals: None
) -> None:
    broker = InMemoryBroker()
    monkeypatch.setattr(entry, "open_broker", lambda _settings, _env: InMemoryTransport(broker))
    port = _free_port()
    store_url = f"sqlite:///{tmp_path / 'documents.sqlite3'}"
    for name, value in {
        **ENV,
        "BOOST_HTTP_PORT": str(port),
        "BOOST_BLOB_DIR": str(tmp_path / "blobs"),
        "BOOST_DOCUMENT_STORE": store_url,
        "BOOST_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(name, value)
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, Any] = {}

    def client() -> None:
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/healthz", timeout=1) as response:
                        seen["health"] = response.status
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            upload = urllib.request.Request(
                f"{base}/documents",
                data=b"hello",
                method="POST",
                headers={
                    "Authorization": f"Bearer {hs_token('org-a')}",
                    "Content-Type": "text/plain",
                    "X-File-Name": "hello.txt",
                },
            )
            with urllib.request.urlopen(upload, timeout=5) as response:
                seen["upload"] = (response.status, json.loads(response.read()))
            try:
                urllib.request.urlopen(f"{base}/documents", timeout=5)
            except urllib.error.HTTPError as exc:
                seen["anonymous"] = exc.code
                exc.close()
        finally:
            # As an orchestrator stops it; the handler runs on the main thread, inside main().
            seen["stopping_at"] = time.monotonic()
            os.kill(os.getpid(), signal.SIGTERM)

    # Should main() fail before it installs its own handler, the signal must not end pytest.
    signal.signal(signal.SIGTERM, lambda *_: None)
    thread = threading.Thread(target=client)
    thread.start()
    try:
        code = entry.main()
    finally:
        thread.join()
        broker.close()
    assert code == 0
    # Nothing is left in flight, so the stop does not wait out the 30 s grace period.
    assert time.monotonic() - seen["stopping_at"] < 5
    assert seen["health"] == 200
    status, body = seen["upload"]
    assert (status, body["state"]) == (201, "uploaded")
    assert seen["anonymous"] == 401
    # The default routing: the command is stored in the tenant's own queue.
    [message] = broker.messages(DEFAULT_ROUTING.physical(CMD_DOCUMENT_PROCESS, "org-a"))
    assert message.properties["tenantUUID"] == "org-a"
    store = open_document_store(store_url)
    try:
        assert store.get(TenantId("org-a"), body["documentUUID"]) is not None
    finally:
        store.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# The serving thread's exception is what the test makes happen.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_server_thread_that_dies_ends_the_service_with_1(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    restore_signals: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    broker = InMemoryBroker()
    monkeypatch.setattr(entry, "open_broker", lambda _settings, _env: InMemoryTransport(broker))
    real_make_server = entry.make_server
    closed: list[bool] = []

    def failing_server(*args: Any, **kwargs: Any) -> Any:
        server = real_make_server(*args, **kwargs)

        def serve_forever() -> None:
            raise OSError("the listening socket failed")

        def server_close() -> None:
            closed.append(True)
            type(server).server_close(server)

        server.serve_forever = serve_forever  # type: ignore[method-assign]
        server.server_close = server_close  # type: ignore[method-assign]
        return server

    monkeypatch.setattr(entry, "make_server", failing_server)
    for name, value in {
        **ENV,
        "BOOST_HTTP_PORT": str(_free_port()),
        "BOOST_BLOB_DIR": str(tmp_path / "blobs"),
        "BOOST_DOCUMENT_STORE": f"sqlite:///{tmp_path / 'documents.sqlite3'}",
        "BOOST_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    code = entry.main()
    broker.close()
    assert code == 1
    assert closed == [True]
    assert "integrations_server_died" in capfd.readouterr().err
    # Seen by the wait loop's next tick, not after a stop signal that never comes.
    assert time.monotonic() - started < 5
