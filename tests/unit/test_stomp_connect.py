"""The STOMP transport's connection attempts and the frames it writes, without a broker.

Connecting never hangs: a peer that closes before CONNECTED is detected at once, one that never
answers costs connect_timeout_s (not the receipt timeout), and reconnection backs off with
jitter. Any header text survives the frame format, and a body that cannot be encoded raises
MessageEncodeError before a byte is written. The broker's flavour is read once from CONNECTED
and decides whether forward is one transaction.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import stomp
from stomp.utils import Frame, parse_frame

from boost_tenancy import TransportError
from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.errors import ConfigError, MessageEncodeError, NotConfirmedError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import Delivery
from boost_tenancy.transports.options import TlsSettings
from boost_tenancy.transports.stomp import (
    BrokerFlavour,
    StompSettings,
    StompTransport,
    encode_frame,
    reconnect_delay,
)
from boost_tenancy.transports.stomp.link import tune_socket
from tests.conftest import wait_until
from tests.tls_certificates import make_authority, server_pem
from tests.tls_support import TlsTerminator, refused

CONNECTED = b"CONNECTED\nversion:1.2\nserver:ActiveMQ/5.17.2\n\n\x00"


class Peer:
    """A TCP server in a thread that plays a broker badly: it records when each connection came
    and whether the client closed its socket afterwards."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port: int = self.server.getsockname()[1]
        self.accepted: list[float] = []
        self.client_closed = threading.Event()
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.accepted.append(time.monotonic())
            behaviour = self.behaviour
            if behaviour == "once" and len(self.accepted) == 1:
                behaviour = "connected-then-close"
            elif behaviour == "once":
                behaviour = "close"
            if behaviour == "close":
                conn.close()
            elif behaviour == "connected-then-close":
                conn.recv(4096)
                conn.sendall(CONNECTED)
                time.sleep(0.2)
                conn.close()
            elif behaviour == "connected":
                conn.recv(4096)
                conn.sendall(CONNECTED)
                self._held.append(conn)
            elif behaviour == "mute":  # CONNECTED, then reads every frame and answers none
                conn.recv(4096)
                conn.sendall(CONNECTED)
                self._held.append(conn)
                threading.Thread(target=self._watch, args=(conn,), daemon=True).start()
            elif behaviour == "late-reader":  # reads only after 0.5 s, and confirms receipts
                conn.recv(4096)
                conn.sendall(CONNECTED)
                self._held.append(conn)
                threading.Thread(target=self._confirm, args=(conn,), daemon=True).start()
            elif behaviour == "error":
                conn.recv(4096)
                conn.sendall(b"ERROR\nmessage:login refused\n\n\x00")
                self._held.append(conn)
            else:  # deaf: read nothing, answer nothing, notice when the client gives up
                self._held.append(conn)
                threading.Thread(target=self._watch, args=(conn,), daemon=True).start()

    def _watch(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            while conn.recv(4096):
                pass  # any frame; an empty read is the client closing
            self.client_closed.set()
        except OSError:
            pass

    def _confirm(self, conn: socket.socket) -> None:
        time.sleep(0.5)  # the client's writes meanwhile fill the socket's buffers
        seen = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                seen = seen[-200:] + chunk
                for receipt in re.findall(rb"\nreceipt:([^\n]*)\n", seen):
                    conn.sendall(b"RECEIPT\nreceipt-id:" + receipt + b"\n\n\x00")
                seen = seen[seen.rfind(b"\x00") + 1 :] if b"\x00" in seen else seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self._held:
            conn.close()
        self.server.close()


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    running = Peer(request.param)
    yield running
    running.stop()


def closes_promptly(transport: StompTransport) -> bool:
    closed = threading.Thread(target=transport.close, daemon=True)
    closed.start()
    closed.join(5)
    return not closed.is_alive()


@pytest.mark.parametrize("peer", ["connected"], indirect=True)
def test_the_connection_sends_frames_without_nagle_delay(peer: Peer) -> None:
    # stomp.py leaves Nagle's algorithm on: a frame written while an earlier one is not yet
    # acknowledged by TCP would wait for the broker's delayed acknowledgement (about 40 ms).
    transport = StompTransport(StompSettings(port=peer.port, connect_timeout_s=5))
    transport.connect()
    try:
        link = transport._connection.live()
        assert link is not None
        sock = link._conn.transport.socket
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        assert closes_promptly(transport)


@pytest.mark.parametrize("peer", ["deaf", "close"], indirect=True)
def test_connect_to_a_peer_that_never_completes_fails_within_the_timeout(peer: Peer) -> None:
    transport = StompTransport(StompSettings(port=peer.port, connect_timeout_s=1.5))
    started = time.monotonic()
    with pytest.raises(TransportError, match=re.escape(f"127.0.0.1:{peer.port}")):
        transport.connect()
    assert time.monotonic() - started < 10
    assert closes_promptly(transport), "close() must not block after a failed connect"


@pytest.mark.parametrize("peer", ["close"], indirect=True)
def test_a_peer_that_accepts_and_closes_is_detected_at_once_not_at_a_timeout(peer: Peer) -> None:
    # Both timeouts long: only detecting the closed socket can make this fast.
    settings = StompSettings(port=peer.port, confirm_timeout_s=30, connect_timeout_s=30)
    transport = StompTransport(settings)
    started = time.monotonic()
    # Depending on who is first, the CONNECT write fails or the receiving thread sees the close.
    with pytest.raises(TransportError, match=re.escape(f"STOMP broker at 127.0.0.1:{peer.port}")):
        transport.connect()
    assert time.monotonic() - started < 10
    assert closes_promptly(transport)


@pytest.mark.parametrize("peer", ["deaf"], indirect=True)
def test_a_peer_that_never_answers_costs_connect_timeout_not_receipt_timeout(peer: Peer) -> None:
    settings = StompSettings(port=peer.port, confirm_timeout_s=30, connect_timeout_s=2)
    transport = StompTransport(settings)
    started = time.monotonic()
    with pytest.raises(TransportError, match=r"did not answer CONNECT within 2(\.0)?s"):
        transport.connect()
    elapsed = time.monotonic() - started
    assert 1.9 <= elapsed < 10, elapsed
    # The abandoned attempt closes its socket: repeated attempts leave nothing behind.
    assert peer.client_closed.wait(5), "the failed attempt left its socket open"
    assert closes_promptly(transport)


@pytest.mark.parametrize("peer", ["mute"], indirect=True)
def test_a_connection_abandoned_for_a_missing_receipt_closes_its_socket(peer: Peer) -> None:
    """No receipt for a send: the transport drops the connection, so that the broker takes back
    what the connection holds. The broker answers DISCONNECT no more than the send, so the
    socket must close without that answer, or the connection would live on heart-beats."""
    settings = StompSettings(port=peer.port, confirm_timeout_s=0.5, connect_timeout_s=5)
    transport = StompTransport(settings)
    transport.connect()
    try:
        with pytest.raises(NotConfirmedError):
            transport.send("q", WireMessage(body="x", properties={"tenantUUID": "t1"}))
        assert peer.client_closed.wait(5), "the abandoned connection kept its socket open"
    finally:
        assert closes_promptly(transport)


@pytest.mark.parametrize("peer", ["connected"], indirect=True)
def test_a_write_to_a_broker_that_stopped_reading_fails_and_the_connection_is_dropped(
    peer: Peer,
) -> None:
    """The peer reads nothing after CONNECTED, as a frozen broker: once the socket's buffers are
    full, a write that moves nothing for confirm_timeout_s fails instead of blocking for good,
    and the transport reconnects."""
    settings = StompSettings(port=peer.port, confirm_timeout_s=1, connect_timeout_s=5)
    transport = StompTransport(settings)
    transport.connect()
    big = WireMessage(body="x" * 200_000, properties={"tenantUUID": "t1"})
    raised: list[BaseException] = []

    def send() -> None:
        try:
            transport.send_batch([("q", big)] * 100, atomic=False)
        except BaseException as exc:
            raised.append(exc)

    writer = threading.Thread(target=send, daemon=True)
    writer.start()
    writer.join(60)
    try:
        assert not writer.is_alive(), "the write blocked on a broker that reads nothing"
        assert len(raised) == 1 and isinstance(raised[0], TransportError), raised
        assert "read nothing for 1s (confirm_timeout_s" in str(raised[0])
        assert wait_until(lambda: len(peer.accepted) >= 2, timeout=10), "no reconnection"
    finally:
        assert closes_promptly(transport)


@pytest.mark.parametrize("peer", ["late-reader"], indirect=True)
def test_a_write_larger_than_the_sockets_buffers_goes_out_whole_over_tls(
    peer: Peer, tmp_path: Path
) -> None:
    """Over TLS stomp.py's socket is non-blocking: a write the socket could not take at once
    failed (SSLWantWriteError) before the transport queued its writes to stomp.py's io thread."""
    authority = make_authority(tmp_path, "test-ca")
    cert_file, key_file = server_pem(tmp_path, authority, ["127.0.0.1"])
    with TlsTerminator(("127.0.0.1", peer.port), cert_file, key_file) as terminator:
        tls = TlsSettings(ca_file=str(authority.ca_file))
        settings = StompSettings(port=terminator.port, tls=tls, connect_timeout_s=5)
        transport = StompTransport(settings)
        transport.connect()
        try:
            big = WireMessage(body="x" * 200_000, properties={"tenantUUID": "t1"})
            transport.send_batch([("q", big)] * 50, atomic=False)
        finally:
            assert closes_promptly(transport)


@pytest.mark.parametrize("peer", ["mute"], indirect=True)
def test_close_ends_the_connection_of_a_broker_that_never_confirms_disconnect(peer: Peer) -> None:
    settings = StompSettings(port=peer.port, confirm_timeout_s=0.5, connect_timeout_s=5)
    transport = StompTransport(settings)
    transport.connect()
    assert closes_promptly(transport)
    assert peer.client_closed.wait(5), "close() left the socket open"


@pytest.mark.parametrize("peer", ["error"], indirect=True)
def test_a_peer_that_answers_connect_with_error_is_reported_as_refusing(peer: Peer) -> None:
    transport = StompTransport(StompSettings(port=peer.port, connect_timeout_s=30))
    started = time.monotonic()
    with pytest.raises(TransportError, match="refused the connection"):
        transport.connect()
    assert time.monotonic() - started < 10


def test_connect_to_a_closed_port_fails_with_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = StompTransport(StompSettings(port=port, connect_timeout_s=1.5))
    started = time.monotonic()
    with pytest.raises(TransportError, match=re.escape(f"STOMP broker at 127.0.0.1:{port}")):
        transport.connect()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("peer", ["once"], indirect=True)
def test_after_a_lost_connection_reconnect_attempts_back_off_and_stop_on_close(
    peer: Peer,
) -> None:
    """The broker goes away after CONNECTED and then closes every new connection at once: each
    attempt fails fast, the gaps between attempts grow with jitter up to reconnect_max_s, and
    close() ends the attempts."""
    settings = StompSettings(
        port=peer.port,
        confirm_timeout_s=30,
        connect_timeout_s=30,
        reconnect_initial_s=0.1,
        reconnect_max_s=0.4,
    )
    transport = StompTransport(settings)
    transport.connect()
    deadline = time.monotonic() + 15
    while len(peer.accepted) < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    transport.close()
    attempts = list(peer.accepted[1:])
    assert len(attempts) >= 6, f"only {len(attempts)} reconnect attempts"
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    # Each gap is a backoff sleep (0.05-0.4 s) plus one failed attempt, which must be quick.
    assert all(0.04 <= gap < 2.0 for gap in gaps), gaps
    time.sleep(1.0)
    count = len(peer.accepted)
    time.sleep(1.0)
    assert len(peer.accepted) == count, "reconnect attempts went on after close()"


def test_reconnect_delay_doubles_up_to_the_cap_with_jitter_below_it() -> None:
    low = [reconnect_delay(n, 0.2, 5.0, lambda: 0.0) for n in range(1, 9)]
    high = [reconnect_delay(n, 0.2, 5.0, lambda: 0.999999) for n in range(1, 9)]
    assert low == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.5, 2.5, 2.5])
    assert high == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0], rel=1e-5)
    assert all(delay <= 5.0 for delay in high)


def test_reconnect_delay_survives_an_outage_of_many_attempts() -> None:
    assert reconnect_delay(10_000, 0.2, 5.0, lambda: 0.5) == pytest.approx(3.75)


@pytest.mark.parametrize(
    "fields",
    [
        {"connect_timeout_s": 0.0},
        {"connect_timeout_s": -1.0},
        {"connect_timeout_s": math.nan},
        {"connect_timeout_s": math.inf},
        {"reconnect_initial_s": 0.0},
        {"reconnect_initial_s": 6.0, "reconnect_max_s": 5.0},
    ],
)
def test_settings_refuse_unusable_connect_timeouts_and_delays(fields: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="STOMP"):
        StompSettings(**fields)  # type: ignore[arg-type]


def test_connect_timeout_is_read_from_the_environment() -> None:
    assert stomp_settings_from_env({}).connect_timeout_s == 5.0
    env = {"BOOST_BROKER_CONNECT_TIMEOUT_S": "2.5"}
    assert stomp_settings_from_env(env).connect_timeout_s == 2.5


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_connect_timeout_variable_is_named(raw: str) -> None:
    with pytest.raises(ConfigError, match="BOOST_BROKER_CONNECT_TIMEOUT_S"):
        stomp_settings_from_env({"BOOST_BROKER_CONNECT_TIMEOUT_S": raw})


# -- frames ------------------------------------------------------------------------------------


def parsed(frame: bytes) -> Any:
    """The frame as stomp.py (the toolkit's own reader) parses it; exactly one NUL, at the end."""
    assert frame.endswith(b"\x00")
    assert frame.count(b"\x00") == 1, "a NUL inside the frame would split it in two"
    return parse_frame(frame[:-1])


def test_header_values_with_nul_or_lone_surrogates_arrive_with_u_fffd() -> None:
    frame = encode_frame(
        "SEND",
        {
            "boostError": "bad\x00value",
            "high": "a\ud83db",
            "low": "\udcff",
            "pair": "x\ud83d\ude00y",
            "nul\x00name": "v",
        },
    )
    headers = parsed(frame).headers
    assert headers["boostError"] == "bad\ufffdvalue"
    assert headers["high"] == "a\ufffdb"
    assert headers["low"] == "\ufffd"
    assert headers["pair"] == "x\U0001f600y"  # a surrogate pair is its character, not lost
    assert headers["nul\ufffdname"] == "v"


def test_escaped_and_other_characters_survive_exactly() -> None:
    values = {
        "colon": "2026-11-23T01:41:14+00:00",
        "lines": "one\ntwo\r\nthree\r",
        "backslash": "C:\\temp\\n",
        "controls": "tab\tbell\x07esc\x1bdel\x7f",
        "text": "Zürich 😀 \u2028 \ufffe",
        "plain": "org-7f3c2a",
    }
    frame = encode_frame("SEND", {**values, "we:ird": "x"}, b"body")
    result = parsed(frame)
    assert result.cmd == "SEND"
    assert result.body == b"body"
    assert {k: result.headers[k] for k in values} == values
    assert result.headers["we:ird"] == "x"


# -- bodies that cannot be encoded, on a connection that records its writes ------------------


class RecordingSocket:
    """Stands in for stomp.py's transport: records writes and confirms receipts like a broker."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.listener: Any = None
        self.connection_error = False
        self.running = True
        self.blocking = True  # as stomp.py's on a plain TCP socket
        self.socket = None  # no socket to shut down: Link.drop only stops it

    def send(self, data: bytes) -> None:
        self.writes.append(data)
        for raw in data.split(b"\x00"):
            if raw.strip(b"\r\n"):
                receipt = parse_frame(raw).headers.get("receipt")
                if receipt is not None:
                    self.listener.on_receipt(Frame("RECEIPT", {"receipt-id": receipt}))

    def frames(self) -> list[Any]:
        return [parse_frame(raw) for raw in b"".join(self.writes).split(b"\x00") if raw.strip()]


class RecordingConnection:
    """Stands in for stomp.Connection12: answers CONNECT with the server header given, and
    drops the connection right after when told to."""

    def __init__(self, server: str, *, drop_after_connected: bool = False) -> None:
        self.server = server
        self.drop_after_connected = drop_after_connected
        self.transport = RecordingSocket()

    def set_listener(self, name: str, listener: Any) -> None:
        self.transport.listener = listener

    def connect(self, *args: Any, **kwargs: Any) -> None:
        self.transport.listener.on_connected(Frame("CONNECTED", {"server": self.server}))
        if self.drop_after_connected:
            self.drop()

    def subscribe(self, destination: str, id: str, ack: str, headers: dict[str, str]) -> None:
        frame = {"destination": destination, "id": id, "ack": ack, **headers}
        self.transport.send(encode_frame("SUBSCRIBE", frame))

    def unsubscribe(self, id: str) -> None:
        self.transport.send(encode_frame("UNSUBSCRIBE", {"id": id}))

    def disconnect(self) -> None:
        self.transport.running = False

    def drop(self) -> None:
        """The broker goes away: stomp.py's io thread reports it, and the transport reconnects."""
        self.transport.running = False
        self.transport.listener.on_disconnected()


def recording_transport(
    monkeypatch: pytest.MonkeyPatch,
    server: str,
    *,
    drop_after_connected: bool = False,
    settings: StompSettings | None = None,
) -> tuple[StompTransport, list[RecordingSocket]]:
    """A transport whose connections go to recording stand-ins for a broker named server."""
    sockets: list[RecordingSocket] = []

    def connection(*args: Any, **kwargs: Any) -> RecordingConnection:
        made = RecordingConnection(server, drop_after_connected=drop_after_connected)
        sockets.append(made.transport)
        return made

    monkeypatch.setattr(stomp, "Connection12", connection)
    settings = settings or StompSettings(confirm_timeout_s=2, reconnect_wait_s=0)
    return StompTransport(settings), sockets


@pytest.fixture(params=["ActiveMQ/5.17.2", "ActiveMQ-Artemis/2.44.0"])
def recorded(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[StompTransport, RecordingSocket]]:
    """A transport connected to a recording stand-in for the broker of the given server header."""
    transport, sockets = recording_transport(monkeypatch, request.param)
    transport.connect()
    [sock] = sockets
    yield transport, sock
    transport.close()


def wire(body: str | bytes) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": "org-A"})


LONE_HIGH = "price \ud83d"


def delivery() -> Delivery:
    return Delivery(
        queue="in",
        body="original",
        properties={},
        correlation_id=None,
        redelivered=False,
        subscription_id="sub-1",
        broker_message_id="m-1",
        token=(0, 1, "ack-1"),  # (line, generation, ack id)
    )


SEND_PATHS = {
    "send": lambda t: t.send("out", wire(LONE_HIGH)),
    "send_batch atomic": lambda t: t.send_batch([("out", wire("ok")), ("out", wire(LONE_HIGH))]),
    "send_batch plain": lambda t: t.send_batch(
        [("out", wire("ok")), ("out", wire(LONE_HIGH))], atomic=False
    ),
    "forward": lambda t: t.send_then_ack(
        delivery(), [("out", wire("ok"), 0), ("out", wire(LONE_HIGH), 0)]
    ),
    "send_then_ack_many": lambda t: t.send_then_ack_many(
        [(delivery(), [("out", wire(LONE_HIGH), 0)])]
    ),
    "batch add": lambda t: t.open_batch().add("out", wire(LONE_HIGH)),
    "plain batch add": lambda t: t.open_batch(atomic=False).add("out", wire(LONE_HIGH)),
}


@pytest.mark.parametrize("path", SEND_PATHS)
def test_an_unencodable_text_body_raises_before_any_byte_is_written(
    recorded: tuple[StompTransport, RecordingSocket], path: str
) -> None:
    transport, sock = recorded
    with pytest.raises(MessageEncodeError, match=r"position 6.*send bytes or valid text"):
        SEND_PATHS[path](transport)
    assert sock.writes == []
    assert len(transport._connection.receipts) == 0, "no receipt may be left waiting"
    # The connection is untouched and takes the next message.
    transport.send("out", wire("next"))
    [frame] = sock.frames()
    assert (frame.cmd, frame.body) == ("SEND", b"next")


def test_a_text_body_with_nul_raises_instead_of_splitting_the_frame(
    recorded: tuple[StompTransport, RecordingSocket],
) -> None:
    transport, sock = recorded
    with pytest.raises(MessageEncodeError, match="NUL at position 2"):
        transport.send("out", wire("ab\x00cd"))
    assert sock.writes == []


def test_an_atomic_batch_stays_usable_after_an_unencodable_message(
    recorded: tuple[StompTransport, RecordingSocket],
) -> None:
    transport, sock = recorded
    batch = transport.open_batch()
    with pytest.raises(MessageEncodeError):
        batch.add("out", wire(LONE_HIGH))
    batch.add("out", wire("first"))
    with pytest.raises(MessageEncodeError):
        batch.add("out", wire(LONE_HIGH))
    batch.add("out", wire("second"))
    batch.commit()
    frames = sock.frames()
    assert [f.cmd for f in frames] == ["BEGIN", "SEND", "SEND", "COMMIT"]
    assert [f.body for f in frames[1:3]] == [b"first", b"second"]


def test_a_plain_batch_writes_at_commit_with_one_receipt_on_its_last_send(
    recorded: tuple[StompTransport, RecordingSocket],
) -> None:
    transport, sock = recorded
    batch = transport.open_batch(atomic=False)
    with pytest.raises(MessageEncodeError):
        batch.add("out", wire(LONE_HIGH))
    for body in ("m0", "m1", "m2"):
        batch.add("out", wire(body))
    assert sock.writes == [], "nothing is written before commit"
    batch.commit()
    frames = sock.frames()
    assert [(f.cmd, f.body) for f in frames] == [("SEND", b"m0"), ("SEND", b"m1"), ("SEND", b"m2")]
    assert ["receipt" in f.headers for f in frames] == [False, False, True]
    assert all(f.headers["tenantUUID"] == "org-A" for f in frames)
    assert len(transport._connection.receipts) == 0, "the receipt was awaited and answered"
    written = len(sock.writes)
    transport.open_batch(atomic=False).commit()  # an empty plain batch writes nothing
    assert len(sock.writes) == written


def test_a_body_decoded_with_surrogateescape_goes_out_as_the_same_bytes(
    recorded: tuple[StompTransport, RecordingSocket],
) -> None:
    transport, sock = recorded
    raw = b"ok \xff\xfe \xc3( \xed\xa0\xbd end"
    transport.send("out", wire(raw.decode("utf-8", "surrogateescape")))
    [frame] = sock.frames()
    assert frame.body == raw
    # With content-length, marked text: Artemis rewrites invalid UTF-8 in a text SEND.
    assert frame.headers["content-length"] == str(len(raw))
    assert frame.headers["boostBodyType"] == "text"


# -- the broker's flavour, decided once from CONNECTED -------------------------------------------


@pytest.mark.parametrize(
    ("server", "flavour"),
    [
        ("ActiveMQ/5.17.2", BrokerFlavour.CLASSIC),
        ("ActiveMQ-Artemis/2.44.0 ActiveMQ Artemis Messaging Engine", BrokerFlavour.ARTEMIS),
        ("ActiveMQ-Artemis/2.19.1", BrokerFlavour.ARTEMIS),
        ("RabbitMQ/3.10.8", BrokerFlavour.OTHER),
        ("", BrokerFlavour.OTHER),
    ],
)
def test_the_server_header_names_the_flavour(server: str, flavour: BrokerFlavour) -> None:
    assert BrokerFlavour.from_server(server) is flavour


def test_only_classic_promises_an_atomic_forward() -> None:
    # Artemis ignores ACK inside a STOMP transaction; an unknown broker gets the safe behaviour.
    assert {f: f.capabilities.atomic_forward for f in BrokerFlavour} == {
        BrokerFlavour.CLASSIC: True,
        BrokerFlavour.ARTEMIS: False,
        BrokerFlavour.OTHER: False,
    }
    assert all(f.capabilities.delayed_delivery for f in BrokerFlavour)


def test_before_connecting_the_transport_promises_no_atomic_forward() -> None:
    transport = StompTransport()
    assert transport.flavour is BrokerFlavour.OTHER
    assert transport.capabilities.atomic_forward is False


@pytest.mark.parametrize("server", ["ActiveMQ/5.17.2", "ActiveMQ-Artemis/2.44.0"])
def test_forward_is_one_transaction_on_classic_and_send_then_ack_elsewhere(
    monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    transport, sockets = recording_transport(monkeypatch, server)
    transport.connect()
    [sock] = sockets
    classic = server.startswith("ActiveMQ/")
    assert transport.flavour is (BrokerFlavour.CLASSIC if classic else BrokerFlavour.ARTEMIS)
    assert transport.capabilities.atomic_forward is classic
    assert transport.is_classic is classic
    transport.send_then_ack(delivery(), [("out", wire("copy"), 0)])
    transport.close()  # writes the acknowledgements still queued
    frames = sock.frames()
    if classic:
        assert [f.cmd for f in frames] == ["BEGIN", "SEND", "ACK", "COMMIT"]
        assert len({f.headers["transaction"] for f in frames}) == 1
    else:
        assert [f.cmd for f in frames] == ["SEND", "ACK"]
        assert "transaction" not in frames[1].headers
        assert "receipt" in frames[0].headers, "the copy is confirmed before the ack"


def test_a_connection_lost_right_after_connected_is_a_failed_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, _ = recording_transport(monkeypatch, "ActiveMQ/5.17.2", drop_after_connected=True)
    with pytest.raises(TransportError, match="closed the connection after CONNECTED"):
        transport.connect()
    assert not transport.is_connected
    transport.close()


# -- a broker that stops answering receipts --------------------------------------------------------


def test_a_missing_receipt_abandons_the_connection_so_the_broker_redelivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without this, a broker that keeps the connection up but stops confirming would hold every
    unacknowledged delivery of that connection for good (one prefetch slot each)."""
    settings = StompSettings(confirm_timeout_s=0.3, reconnect_wait_s=5, reconnect_initial_s=0.01)
    transport, sockets = recording_transport(monkeypatch, "ActiveMQ/5.17.2", settings=settings)
    transport.connect()
    try:
        silent = sockets[0]
        silent.send = silent.writes.append  # type: ignore[method-assign]  # answers nothing
        with pytest.raises(NotConfirmedError):
            transport.send("out", wire("never confirmed"))
        assert not silent.running, "the silent connection was dropped"
        assert wait_until(lambda: len(sockets) == 2 and transport.is_connected, timeout=10)
        transport.send("out", wire("confirmed on the new connection"))
    finally:
        transport.close()


def test_a_subscription_that_fails_on_reconnection_is_tried_again_on_a_new_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the reconnect loop ended once connected, and a SUBSCRIBE that got no receipt left
    that subscription dead on a healthy connection, with nothing to say so."""
    settings = StompSettings(confirm_timeout_s=0.3, reconnect_wait_s=5, reconnect_initial_s=0.01)
    made: list[RecordingConnection] = []

    def connection(*args: Any, **kwargs: Any) -> RecordingConnection:
        conn = RecordingConnection("ActiveMQ/5.17.2")
        if len(made) == 1:  # the first reconnection: a broker that confirms no SUBSCRIBE
            conn.transport.send = conn.transport.writes.append  # type: ignore[method-assign]
        made.append(conn)
        return conn

    monkeypatch.setattr(stomp, "Connection12", connection)
    transport = StompTransport(settings)
    transport.connect()
    try:
        transport.subscribe("in", selector=None, prefetch=1, on_delivery=lambda d: None)
        made[0].drop()
        assert wait_until(lambda: len(made) >= 3 and transport.is_connected, timeout=10)
        third = made[2].transport.frames()
        assert [f.headers["destination"] for f in third if f.cmd == "SUBSCRIBE"] == ["/queue/in"]
    finally:
        transport.close()


@pytest.mark.parametrize(
    ("seconds", "expected"), [(30.0, 30.0), (0.25, 0.25), (0.0, 0.001), (1e19, 86_400.0)]
)
def test_the_write_timeout_a_socket_gets_is_kept_within_a_millisecond_and_a_day(
    seconds: float, expected: float
) -> None:
    """Zero would mean no bound at all, and a huge value would not pack."""
    with socket.socket() as sock:
        tune_socket(SimpleNamespace(transport=SimpleNamespace(socket=sock)), seconds)
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, 16)
    whole, micros = struct.unpack("@ll", raw)
    # The kernel keeps it in clock ticks (4 ms at 250 Hz).
    assert expected <= whole + micros / 1e6 <= expected + 0.011


class FrozenTlsBroker:
    """A TLS server that answers CONNECT (with 1 s heart-beats) and a SUBSCRIBE's receipt, then
    reads, writes and closes nothing, as a frozen broker behind TLS; or, not answering, one that
    freezes right after the TLS handshake."""

    def __init__(self, directory: Path, *, answers: bool = True) -> None:
        self._answers = answers
        authority = make_authority(directory, "test-ca")
        self.ca_file = authority.ca_file
        cert_file, key_file = server_pem(directory, authority, ["127.0.0.1"])
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert_file, key_file)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                raw, _ = self._listener.accept()
                self.accepted += 1
                secure = self._context.wrap_socket(raw, server_side=True)
                if not self._answers:
                    self._held.append(secure)
                    continue
                secure.recv(4096)
                secure.sendall(CONNECTED.replace(b"\n\n", b"\nheart-beat:1000,1000\n\n"))
                receipt = re.search(rb"receipt:([^\n]*)", secure.recv(4096))
                if receipt is not None:
                    secure.sendall(b"RECEIPT\nreceipt-id:" + receipt.group(1) + b"\n\n\x00")
                self._held.append(secure)

    def close(self) -> None:
        self._listener.close()
        for held in self._held:
            with contextlib.suppress(OSError):
                held.close()


def test_a_frozen_broker_behind_tls_is_noticed_by_a_consumer_that_only_receives(
    tmp_path: Path,
) -> None:
    """Only the heart-beats can tell. stomp.py's own close on their timeout waited for the
    broker's TLS close, which never came: the connection was never reported lost, and the
    consumer never reconnected."""
    broker = FrozenTlsBroker(tmp_path)
    tls = TlsSettings(ca_file=str(broker.ca_file))
    settings = StompSettings(
        port=broker.port, tls=tls, heartbeat_s=1.0, confirm_timeout_s=5, connect_timeout_s=5
    )
    transport = StompTransport(settings)
    try:
        transport.connect()
        transport.subscribe("q", selector=None, prefetch=1, on_delivery=lambda _d: None)
        assert wait_until(lambda: not transport.is_connected, timeout=15), "never noticed"
        assert wait_until(lambda: broker.accepted >= 2, timeout=15), "no reconnection"
    finally:
        assert closes_promptly(transport)
        broker.close()


def test_a_broker_behind_tls_that_never_answers_connect_fails_the_connect_in_time(
    tmp_path: Path,
) -> None:
    """The failed attempt's socket is ended without waiting for the broker's TLS close."""
    broker = FrozenTlsBroker(tmp_path, answers=False)
    tls = TlsSettings(ca_file=str(broker.ca_file))
    transport = StompTransport(StompSettings(port=broker.port, tls=tls, connect_timeout_s=1.5))
    started = time.monotonic()
    try:
        connected = threading.Thread(target=lambda: refused(transport), daemon=True)
        connected.start()
        connected.join(20)
        assert not connected.is_alive(), "connect() hung"
        assert time.monotonic() - started < 10
    finally:
        broker.close()
