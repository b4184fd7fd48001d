"""The local broker against a real ActiveMQ: start, handshake, restart, crash, stop."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.broker_settings import ENV_HOME, ENV_OPENWIRE_PORT, ENV_ROUTED_QUEUES
from devtools.local_broker import (
    LocalBroker,
    LocalBrokerError,
    LocalBrokerSettings,
    run_cli,
)
from tests.conftest import require_activemq

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("tests the local broker manager itself"),
]


def _free_port_pair() -> tuple[int, int]:
    """Two free loopback ports, so the test never collides with a developer's broker."""
    preferred = (62613, 62616)
    sockets = []
    try:
        for port in preferred:
            sock = socket.socket()
            sockets.append(sock)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.bind(("127.0.0.1", 0))
        first, second = (s.getsockname()[1] for s in sockets)
        return first, second
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    require_activemq()
    stomp_port, openwire_port = _free_port_pair()
    instance = LocalBroker(
        LocalBrokerSettings(
            home=tmp_path / "broker", stomp_port=stomp_port, openwire_port=openwire_port
        )
    )
    try:
        yield instance
    finally:
        instance.stop(timeout_s=10)


def _stomp_connected(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
        reply = b""
        while b"\x00" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.lstrip(b"\n").startswith(b"CONNECTED")


def _port_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def _send(port: int, queue: str, body: str) -> None:
    """Send a persistent message and wait for the broker's receipt."""
    import stomp

    receipts: list[str] = []

    class Receipts(stomp.ConnectionListener):  # type: ignore[misc]
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            receipts.append(frame.headers["receipt-id"])

    connection = stomp.Connection12([("127.0.0.1", port)])
    connection.set_listener("receipts", Receipts())
    connection.connect(wait=True)
    try:
        # Without a receipt the broker stores the message asynchronously, so a crash right after
        # the send could lose it; the receipt is sent only once it is in the journal.
        connection.send(queue, body, headers={"persistent": "true"}, receipt="sent")
        deadline = time.monotonic() + 10
        while "sent" not in receipts and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "sent" in receipts, "the broker did not confirm the send"
    finally:
        connection.disconnect()


def _receive(port: int, queue: str, timeout_s: float) -> str | None:
    """The body of the first message on queue within timeout_s, else None."""
    import stomp

    bodies: list[str] = []

    class Collector(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: stomp.utils.Frame) -> None:
            bodies.append(frame.body)

    connection = stomp.Connection12([("127.0.0.1", port)])
    connection.set_listener("collector", Collector())
    connection.connect(wait=True)
    try:
        connection.subscribe(queue, id="1", ack="auto")
        deadline = time.monotonic() + timeout_s
        while not bodies and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        connection.disconnect(receipt="bye")
    return bodies[0] if bodies else None


def test_start_restart_stop(broker: LocalBroker) -> None:
    stomp_port = broker.settings.stomp_port

    assert broker.start() is True  # launched by this call
    pid = broker.status()["pid"]
    assert broker.is_running()
    assert broker.status()["ready"] is True
    assert _stomp_connected(stomp_port)
    assert (broker.home / "conf" / "activemq.xml").is_file()
    assert broker.log_file.is_file()

    assert broker.start() is False  # already running: kept, not started twice
    assert broker.status()["pid"] == pid

    broker.restart()
    assert broker.status()["pid"] != pid
    assert _stomp_connected(stomp_port)

    broker.stop()
    assert not broker.is_running()
    assert not broker.pid_file.exists()
    assert _port_closed(stomp_port)
    assert _port_closed(broker.settings.openwire_port)
    broker.stop()  # stopping a stopped broker is fine


def test_cli_start_says_whether_it_launched_the_broker(
    broker: LocalBroker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/demo and scripts/test stop a broker at the end only when `start` says "started";
    one found running, theirs or not, says "already running" and is left alone."""
    monkeypatch.setenv(ENV_HOME, str(broker.home))
    monkeypatch.setenv("BOOST_BROKER_URL", broker.settings.stomp_url)
    monkeypatch.setenv(ENV_OPENWIRE_PORT, str(broker.settings.openwire_port))
    monkeypatch.setenv(ENV_ROUTED_QUEUES, "pipeline")

    assert run_cli(["start"]) == 0
    first = capsys.readouterr().out
    assert run_cli(["start"]) == 0
    second = capsys.readouterr().out

    pid = broker.status()["pid"]
    assert first.startswith(f"broker started (pid {pid}): {broker.settings.stomp_url}"), first
    assert second.startswith(f"broker already running (pid {pid}):"), second


def test_persistent_message_survives_a_crash(broker: LocalBroker) -> None:
    broker.start()
    _send(broker.settings.stomp_port, "/queue/local-broker-crash", "kept")

    broker.kill()
    assert not broker.is_running()
    assert not broker.pid_file.exists()
    broker.start()

    assert _receive(broker.settings.stomp_port, "/queue/local-broker-crash", 10) == "kept"


def test_purge_is_refused_while_running_and_empties_the_store(broker: LocalBroker) -> None:
    broker.start()
    _send(broker.settings.stomp_port, "/queue/local-broker-purge", "gone")
    with pytest.raises(LocalBrokerError, match="stop it before purging"):
        broker.purge_data()

    broker.stop()
    broker.purge_data()
    assert not broker.data_dir.exists()
    broker.start()

    assert _receive(broker.settings.stomp_port, "/queue/local-broker-purge", 2) is None


def _broker_side_receive_buffer(broker_port: int, client_port: int) -> int:
    """The receive buffer (bytes, `ss -m`'s rb) of the broker's end of one connection."""
    listed = subprocess.run(
        ["ss", "-tnmH", "state", "established", f"( sport = :{broker_port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for entry in re.split(r"\n(?=\S)", listed):
        if re.search(rf":{client_port}\s", entry):
            found = re.search(r"\brb(\d+)", entry)
            assert found is not None, entry
            return int(found.group(1))
    raise AssertionError(f"no connection from port {client_port} in:\n{listed}")


def test_the_stomp_connector_reads_with_a_receive_buffer_larger_than_a_loopback_segment(
    broker: LocalBroker,
) -> None:
    """Classic fixes its sockets' buffers at 64 KiB (TcpTransport's socketBufferSize), no more
    than one segment of a 64 KiB-MTU loopback: when the broker fell behind reading a burst (1,000
    SUBSCRIBEs of a runner while it dispatched), the kernel dropped segments instead
    (TCPRcvQDrop), and retransmission backoff silenced the connection for over 15 s: the
    client's heartbeat timeout, in 7 of 11 attempts on the 2-core machine (docs/operations.md).
    The connector asks for 1 MiB (devtools/resources/activemq.xml; the kernel doubles it)."""
    broker.start()
    with socket.create_connection(("127.0.0.1", broker.settings.stomp_port), timeout=5) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
        assert sock.recv(4096).lstrip(b"\n").startswith(b"CONNECTED")
        rb = _broker_side_receive_buffer(broker.settings.stomp_port, sock.getsockname()[1])
    # The kernel doubles what a socket asks for, up to net.core.rmem_max (208 KiB by default on
    # many kernels; 4 MiB on the project's machines); Classic's own 64 KiB gives 131072.
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    assert rb >= 2 * min(1024 * 1024, rmem_max) > 131072, f"the broker reads into {rb} bytes"
