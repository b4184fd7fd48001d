"""The STOMP 1.2 transport (stomp.py) for ActiveMQ Classic and Artemis.

It sends text bodies without content-length so Java consumers get a TextMessage, confirms every
send by receipt, consumes with client-individual acks, and reconnects and resubscribes by itself.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import queue as queue_mod
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import stomp
import structlog

from boost_tenancy.envvars import env_float
from boost_tenancy.errors import (
    ConfigError,
    MessageEncodeError,
    NotConfirmedError,
    TransportError,
)
from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.transports.base import (
    Delivery,
    OnDelivery,
    Outgoing,
    SubscribeRequest,
    TransportCapabilities,
)

log = structlog.get_logger("boost_tenancy.transports.stomp")

# Headers the broker sets on MESSAGE frames that are not application properties.
_FRAME_HEADERS: Final = frozenset(
    {
        "destination",
        "message-id",
        "subscription",
        "ack",
        "redelivered",
        "persistent",
        "correlation-id",
        "content-length",
        "content-type",
        "expires",
        "priority",
        "timestamp",
        "type",
        "reply-to",
        "receipt",
        # Scheduling instructions are consumed by the broker; copied onto a retry or dead-letter
        # copy they would delay it again (Classic AMQ_SCHEDULED_*, Artemis _AMQ_SCHED_DELIVERY).
        "AMQ_SCHEDULED_DELAY",
        "AMQ_SCHEDULED_PERIOD",
        "AMQ_SCHEDULED_REPEAT",
        "AMQ_SCHEDULED_CRON",
        "scheduledJobId",
        "_AMQ_SCHED_DELIVERY",
    }
)


_DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StompSettings:
    """Where the broker is and how patient to be with it."""

    host: str = "127.0.0.1"
    port: int = 61613
    username: str | None = None
    password: str | None = None
    vhost: str | None = None
    heartbeat_ms: int = 10_000
    connect_timeout_s: float = _DEFAULT_CONNECT_TIMEOUT_S
    """Limit on one connection attempt: the TCP connect plus the wait for CONNECTED."""
    receipt_timeout_s: float = 30.0
    reconnect_wait_s: float = 30.0
    """How long a send waits for a lost connection to come back before failing."""
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 5.0
    artemis_window_bytes: int | None = None
    """Artemis consumer-window-size in bytes (its prefetch unit); None keeps the broker default."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"STOMP port must be 1-65535, got {self.port}")
        if self.receipt_timeout_s <= 0 or self.reconnect_wait_s < 0:
            raise ConfigError("STOMP timeouts must be positive")
        # Written as a range so NaN fails too; an infinite timeout cannot be waited on.
        if not 0 < self.connect_timeout_s < math.inf:
            raise ConfigError(
                f"STOMP timeouts must be positive: connect_timeout_s={self.connect_timeout_s}"
            )
        if not 0 < self.reconnect_initial_s <= self.reconnect_max_s < math.inf:
            # Zero would retry in a busy loop; a negative delay would end the reconnecting thread.
            raise ConfigError(
                "STOMP reconnect delays must satisfy 0 < reconnect_initial_s <= reconnect_max_s, "
                f"got {self.reconnect_initial_s} and {self.reconnect_max_s}"
            )
        if (self.username is None) != (self.password is None):
            raise ConfigError("set both the broker username and password, or neither")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StompSettings:
        """Read BOOST_STOMP_HOST, _PORT, _USER, _PASSWORD, _VHOST, _CONNECT_TIMEOUT_S; errors
        name the variable."""
        port_text = env.get("BOOST_STOMP_PORT", "61613")
        try:
            port = int(port_text)
        except ValueError as exc:
            raise ConfigError(f"BOOST_STOMP_PORT must be a number, got {port_text!r}") from exc
        if not 0 < port < 65536:
            raise ConfigError(f"BOOST_STOMP_PORT must be 1-65535, got {port}")
        if bool(env.get("BOOST_STOMP_USER")) != bool(env.get("BOOST_STOMP_PASSWORD")):
            raise ConfigError("set both BOOST_STOMP_USER and BOOST_STOMP_PASSWORD, or neither")
        connect_timeout_s = env_float(
            env, "BOOST_STOMP_CONNECT_TIMEOUT_S", _DEFAULT_CONNECT_TIMEOUT_S
        )
        if not 0 < connect_timeout_s < math.inf:
            raise ConfigError(
                "BOOST_STOMP_CONNECT_TIMEOUT_S must be a positive number of seconds, "
                f"got {env['BOOST_STOMP_CONNECT_TIMEOUT_S']!r}"
            )
        return cls(
            host=env.get("BOOST_STOMP_HOST", "127.0.0.1"),
            port=port,
            username=env.get("BOOST_STOMP_USER") or None,
            password=env.get("BOOST_STOMP_PASSWORD") or None,
            vhost=env.get("BOOST_STOMP_VHOST") or None,
            connect_timeout_s=connect_timeout_s,
        )


@dataclass(frozen=True, slots=True)
class StompSubscription:
    """A subscription; the transport re-creates it with the same id after a reconnection."""

    id: str
    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: OnDelivery


@dataclass(slots=True)
class _Pending:
    event: threading.Event
    generation: int
    error: str | None = None


# Surrogates have no UTF-8 form; a str holds them when text was decoded with surrogateescape
# or surrogatepass, or parsed from a JSON "\ud83d" escape.
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def _escape(value: str) -> str:
    """A header name or value fit for a frame: NUL and lone surrogates become U+FFFD, then
    STOMP 1.2 escaping of backslash, carriage return, newline and colon.

    NUL is replaced because it ends a frame: Classic keeps it in the header and hands consumers
    the frame cut in two. Other control characters are left alone: Classic 5.17 and stomp.py
    carry every one of them through unchanged.
    """
    ascii_only = value.isascii()
    if (
        ascii_only
        and ":" not in value
        and "\\" not in value
        and "\n" not in value
        and "\r" not in value
        and "\x00" not in value
    ):
        # Most names and values (every SEND and ACK has several): a few scans at C speed and
        # no copy, which measured faster than one regular expression search.
        return value
    if not ascii_only and _SURROGATE.search(value) is not None:
        # Through UTF-16 so a surrogate pair becomes its character and a lone one U+FFFD.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return (
        value.replace("\x00", "\ufffd")
        .replace("\\", "\\\\")
        .replace("\r", "\\r")
        .replace("\n", "\\n")
        .replace(":", "\\c")
    )


def encode_frame(command: str, headers: Mapping[str, str], body: bytes = b"") -> bytes:
    """One STOMP 1.2 frame.

    The toolkit encodes its own SEND, ACK, BEGIN and COMMIT frames so that a batch, or every
    acknowledgement waiting, goes out in one socket write instead of one stomp.py call each.
    Any header text is accepted: what a frame cannot carry is replaced (see _escape), so an
    error text copied into a header can never break the connection's framing.
    """
    head = "".join(f"{_escape(name)}:{_escape(value)}\n" for name, value in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\x00"


def _new_receipt() -> str:
    return f"r-{uuid.uuid4().hex}"


def _text_body_bytes(queue: str, text: str) -> bytes:
    """A text body as the bytes of its frame, or MessageEncodeError naming what is wrong.

    Encoded with surrogateescape: a body that arrived as invalid UTF-8 (decoded the same way)
    goes out again as the very same bytes, so a retry or dead-letter copy is byte-exact.
    """
    nul = text.find("\x00")
    if nul >= 0:
        # Sent without content-length (so Java consumers get a TextMessage), the body ends at
        # its first NUL: the rest would reach the broker as a frame of its own.
        raise MessageEncodeError(
            f"text body for {queue!r} has NUL at position {nul}, which would end the frame; "
            "send bytes instead"
        )
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise MessageEncodeError(
            f"text body for {queue!r} cannot be encoded: {text[exc.start : exc.end]!r} at "
            f"position {exc.start} ({exc.reason}: a lone surrogate has no UTF-8 form); send "
            "bytes or valid text"
        ) from exc


def _check_bodies(items: Iterable[Outgoing]) -> None:
    """Raise MessageEncodeError for the first body that cannot be sent, before any is sent."""
    for queue, message, _ in items:
        if isinstance(message.body, str):
            _text_body_bytes(queue, message.body)


def reconnect_delay(
    attempt: int, initial_s: float, max_s: float, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait after the attempt-th failed reconnection (1-based).

    Doubles from initial_s up to max_s, then takes a random 50-100% of that, so clients that
    lost the same broker do not come back in step and the wait never exceeds max_s.
    """
    # The exponent is capped: 2.0**1024 overflows, and a long outage counts that many attempts.
    base = min(max_s, initial_s * 2.0 ** min(attempt - 1, 60))
    return base * (0.5 + rand() / 2)


_WRITE_CHUNK = 64 * 1024

_FLUSH = object()
"""Marker on the acknowledgement queue: set the event once everything before it is written."""


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, transport: StompTransport, generation: int) -> None:
        self._transport = transport
        self._generation = generation
        self.answered = threading.Event()
        """Set on CONNECTED, on ERROR and when the socket closes: the connect wait can end."""

    def on_connected(self, frame: Any) -> None:
        self._transport._on_connected(self._generation, frame.headers)
        self.answered.set()

    def on_message(self, frame: Any) -> None:
        self._transport._on_message(self._generation, frame.headers, frame.body)

    def on_receipt(self, frame: Any) -> None:
        self._transport._resolve(frame.headers.get("receipt-id"), None)

    def on_error(self, frame: Any) -> None:
        self._transport._on_error(frame.headers, frame.body)
        self.answered.set()

    def on_disconnected(self) -> None:
        self.answered.set()
        self._transport._on_disconnected(self._generation)


class _StompBatch:
    """A batch on one connection. Atomic: a transaction whose frames stream out in chunks while
    the batch fills. Otherwise: plain sends written at commit, one receipt on the last."""

    def __init__(self, transport: StompTransport, *, atomic: bool) -> None:
        self._transport = transport
        self._conn, self._generation = transport._current()
        self._tx = f"tx-{uuid.uuid4().hex}" if atomic else None
        self._items: list[tuple[str, WireMessage]] = []
        self._chunk: list[bytes] = []
        self._size = 0
        self._count = 0
        self._began = False

    def add(self, queue: str, message: WireMessage) -> None:
        """Add one message; a body that cannot be encoded raises MessageEncodeError here, with
        nothing of it written, and the batch stays usable."""
        check_queue_name(queue)
        if self._tx is None:
            # Checked now so the error names this add, not the commit (which encodes again).
            _check_bodies([(queue, message, 0)])
            self._items.append((queue, message))
            return
        # Encoded before BEGIN: a first message that cannot be encoded leaves nothing written.
        frame = self._transport._send_frame(queue, message, 0, {"transaction": self._tx})
        if not self._began:
            self._push(encode_frame("BEGIN", {"transaction": self._tx}))
            self._began = True
        self._push(frame)
        self._count += 1

    def _push(self, frame: bytes) -> None:
        self._chunk.append(frame)
        self._size += len(frame)
        if self._size >= _WRITE_CHUNK:
            self._flush()

    def _flush(self) -> None:
        data, self._chunk, self._size = b"".join(self._chunk), [], 0
        try:
            self._conn.transport.send(data)
        except Exception as exc:
            raise TransportError(f"batch write failed: {exc}") from exc

    def commit(self) -> None:
        if self._tx is None:
            self._transport.send_batch(self._items, atomic=False)
            return
        if not self._began:
            return
        transport = self._transport
        receipt, pending = transport._expect_receipt(self._generation)
        self._push(encode_frame("COMMIT", {"transaction": self._tx, "receipt": receipt}))
        try:
            self._flush()
        except TransportError:
            with transport._lock:
                transport._pending.pop(receipt, None)
            raise
        transport._await(receipt, pending, f"commit of {self._count} message(s)")

    def abort(self) -> None:
        if self._tx is None or not self._began:
            self._items.clear()
            return
        self._chunk, self._size = [], 0
        # Nothing of an aborted transaction is stored; a dead connection aborts it anyway.
        with contextlib.suppress(Exception):
            self._conn.transport.send(encode_frame("ABORT", {"transaction": self._tx}))


class StompTransport:
    """Transport over STOMP 1.2; implements boost_tenancy.transports.base.Transport."""

    def __init__(self, settings: StompSettings | None = None) -> None:
        self._settings = settings or StompSettings()
        self._lock = threading.RLock()
        self._connected_cond = threading.Condition(self._lock)
        self._conn: Any = None
        self._generation = 0
        self._connected = False
        self._closing = False
        self._server = ""
        self._subscriptions: dict[str, StompSubscription] = {}
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._reconnector: threading.Thread | None = None
        self._acks: queue_mod.SimpleQueue[Any] = queue_mod.SimpleQueue()
        self._ack_writer: threading.Thread | None = None

    # -- properties ----------------------------------------------------------------------------
    @property
    def capabilities(self) -> TransportCapabilities:
        return TransportCapabilities(
            server_side_selectors=True,
            native_delivery_count=False,
            delayed_delivery=True,
            # Artemis ignores ACK inside a STOMP transaction (BROKERS.md); Classic honours it.
            atomic_forward=self.is_classic,
        )

    @property
    def server(self) -> str:
        """The broker's CONNECTED server header, e.g. 'ActiveMQ/5.17.2'."""
        return self._server

    @property
    def is_classic(self) -> bool:
        return self._server.startswith("ActiveMQ/")

    @property
    def is_connected(self) -> bool:
        return self._connected

    # -- connection lifecycle ------------------------------------------------------------------
    def connect(self) -> None:
        with self._lock:
            self._closing = False
            if self._ack_writer is None or not self._ack_writer.is_alive():
                self._ack_writer = threading.Thread(
                    target=self._write_acks, name="stomp-acks", daemon=True
                )
                self._ack_writer.start()
        self._open()

    def _open(self) -> None:
        """Open a new connection and re-create every subscription on it.

        The lock is not held while connecting: a broker that accepts TCP but never answers
        CONNECT must not block close() or the receiving thread.
        """
        settings = self._settings
        with self._lock:
            self._generation += 1
            generation = self._generation
        conn = stomp.Connection12(
            [(settings.host, settings.port)],
            heartbeats=(settings.heartbeat_ms, settings.heartbeat_ms),
            auto_content_length=False,
            auto_decode=False,
            reconnect_attempts_max=1,
            # Backoff between attempts is _reconnect_loop's; stomp.py would sleep once more
            # after a refused TCP connect before giving up.
            reconnect_sleep_initial=0.0,
            # stomp.py applies it to the TCP connect only; the socket then blocks without one.
            timeout=settings.connect_timeout_s,
            vhost=settings.vhost,
        )
        listener = _Listener(self, generation)
        conn.set_listener("boost", listener)
        where = f"{settings.host}:{settings.port}"
        deadline = time.monotonic() + settings.connect_timeout_s
        try:
            # stomp.py's own wait has no working timeout; wait for an answer with a deadline.
            conn.connect(settings.username, settings.password, wait=False)
            while not conn.is_connected():
                if conn.transport.connection_error:
                    raise TransportError(f"STOMP broker at {where} refused the connection")
                if listener.answered.is_set() or not conn.transport.running:
                    # A peer that accepts and closes at once (a broker starting or stopping,
                    # or not a broker at all) is told apart at once, not at the deadline.
                    raise TransportError(
                        f"STOMP broker at {where} closed the connection before CONNECTED"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(
                        f"STOMP broker at {where} did not answer CONNECT within "
                        f"{settings.connect_timeout_s}s"
                    )
                listener.answered.wait(remaining)
        except Exception as exc:
            # disconnect() sends nothing on a connection that never got CONNECTED, and its
            # socket and receiving thread would stay behind (one per attempt on a deaf peer).
            with contextlib.suppress(Exception):  # the connect error is the one to report
                conn.transport.disconnect_socket()
            if isinstance(exc, TransportError):
                raise
            # stomp.py's ConnectFailedException has no message: name it instead.
            detail = str(exc) or type(exc).__name__
            raise TransportError(f"cannot connect to STOMP broker at {where}: {detail}") from exc
        with self._lock:
            if self._closing or generation != self._generation:
                superseded = True
            else:
                superseded = False
                self._conn = conn
                self._connected = True
                subscriptions = list(self._subscriptions.values())
        if superseded:
            with contextlib.suppress(Exception):
                conn.disconnect()
            raise TransportError("connection superseded or transport closed while connecting")
        self._subscribe_on(conn, generation, subscriptions)
        with self._lock:
            self._connected_cond.notify_all()

    def close(self) -> None:
        self._flush_acks()
        with self._lock:
            self._closing = True
            conn, self._conn = self._conn, None
            self._connected = False
            self._subscriptions.clear()
        self._fail_pending(None, "transport closed")
        if conn is not None:
            try:
                conn.disconnect()
            except Exception as exc:  # a dead connection cannot be closed more
                log.debug("stomp_disconnect_failed", error=str(exc))

    def _on_connected(self, generation: int, headers: Mapping[str, str]) -> None:
        self._server = headers.get("server", "")

    def _on_disconnected(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation:
                return
            was_connected, self._connected = self._connected, False
            closing = self._closing
            # A connection that never came up is reported by _open to its caller instead.
            if (
                was_connected
                and not closing
                and (self._reconnector is None or not self._reconnector.is_alive())
            ):
                self._reconnector = threading.Thread(
                    target=self._reconnect_loop, name="stomp-reconnect", daemon=True
                )
                self._reconnector.start()
        self._fail_pending(generation, "connection lost before the broker confirmed")
        if was_connected and not closing:  # a failed attempt is logged by whoever made it
            log.warning("stomp_connection_lost", host=self._settings.host, port=self._settings.port)

    def _reconnect_loop(self) -> None:
        settings = self._settings
        attempt = 0
        while True:
            with self._lock:
                if self._closing or self._connected:
                    return
            try:
                self._open()
            except Exception as exc:  # keep trying whatever failed: the loop is the only way back
                attempt += 1
                log.info("stomp_reconnect_failed", attempt=attempt, error=str(exc))
            else:
                log.info("stomp_reconnected", attempt=attempt + 1, server=self._server)
                return
            time.sleep(
                reconnect_delay(attempt, settings.reconnect_initial_s, settings.reconnect_max_s)
            )

    def _current(self) -> tuple[Any, int]:
        """The live connection, waiting up to reconnect_wait_s for one."""
        with self._lock:
            deadline = time.monotonic() + self._settings.reconnect_wait_s
            while not self._connected:
                if self._closing:
                    raise TransportError("STOMP transport is closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(
                        f"no connection to the STOMP broker at {self._settings.host}:"
                        f"{self._settings.port} within {self._settings.reconnect_wait_s}s"
                    )
                self._connected_cond.wait(remaining)
            return self._conn, self._generation

    # -- receipts ------------------------------------------------------------------------------
    def _expect_receipt(self, generation: int, receipt: str | None = None) -> tuple[str, _Pending]:
        """Register a receipt to await; pass one already written into a frame, or get a new one."""
        receipt = receipt or _new_receipt()
        pending = _Pending(threading.Event(), generation)
        with self._lock:
            self._pending[receipt] = pending
        return receipt, pending

    def _await(self, receipt: str, pending: _Pending, what: str) -> None:
        confirmed = pending.event.wait(self._settings.receipt_timeout_s)
        with self._lock:
            self._pending.pop(receipt, None)
        if not confirmed:
            raise NotConfirmedError(
                f"{what}: no receipt within {self._settings.receipt_timeout_s}s"
            )
        if pending.error is not None:
            raise TransportError(f"{what}: {pending.error}")

    def _resolve(self, receipt: str | None, error: str | None) -> None:
        if receipt is None:
            return
        with self._lock:
            pending = self._pending.get(receipt)
        if pending is not None:
            pending.error = error
            pending.event.set()

    def _fail_pending(self, generation: int | None, reason: str) -> None:
        with self._lock:
            failed = [
                p
                for p in self._pending.values()
                if generation is None or p.generation == generation
            ]
        for pending in failed:
            pending.error = reason
            pending.event.set()

    def _on_error(self, headers: Mapping[str, str], body: bytes | str) -> None:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        message = headers.get("message", "broker error")
        detail = f"{message}: {text.strip()}" if text.strip() else message
        log.error("stomp_error_frame", message=message)
        self._resolve(headers.get("receipt-id"), detail)

    # -- sending -------------------------------------------------------------------------------
    @staticmethod
    def _send_frame(
        queue: str, message: WireMessage, delay_ms: int, extra: Mapping[str, str]
    ) -> bytes:
        """One SEND frame; MessageEncodeError when the body cannot be put on the wire."""
        headers = dict(message.properties)
        headers["destination"] = "/queue/" + check_queue_name(queue)
        headers["persistent"] = "true" if message.persistent else "false"
        if message.correlation_id is not None:
            headers["correlation-id"] = message.correlation_id
        if delay_ms > 0:
            headers["AMQ_SCHEDULED_DELAY"] = str(int(delay_ms))
        headers.update(extra)
        if isinstance(message.body, str):
            # No content-length: both brokers then create a TextMessage (Java getText() works).
            return encode_frame("SEND", headers, _text_body_bytes(queue, message.body))
        headers["content-length"] = str(len(message.body))
        return encode_frame("SEND", headers, message.body)

    def _write(self, conn: Any, frames: Iterable[bytes], receipt: str, what: str) -> None:
        """Write frames in chunks of about 64 KiB: the broker starts on the first chunk while
        the rest follow, and no single write holds the socket for long.

        Only a failed socket write becomes a TransportError; callers encode every frame before
        calling, so a message that cannot be encoded never passes for a lost connection.
        """

        def put(data: bytes) -> None:
            try:
                conn.transport.send(data)
            except Exception as exc:
                raise TransportError(f"{what} failed: {exc}") from exc

        try:
            chunk: list[bytes] = []
            size = 0
            for frame in frames:
                chunk.append(frame)
                size += len(frame)
                if size >= _WRITE_CHUNK:
                    put(b"".join(chunk))
                    chunk, size = [], 0
            if chunk:
                put(b"".join(chunk))
        except BaseException:
            with self._lock:
                self._pending.pop(receipt, None)
            raise

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        check_queue_name(queue)
        # Encoded first: a MessageEncodeError then leaves nothing written and nothing awaited.
        receipt = _new_receipt()
        frame = self._send_frame(queue, message, delay_ms, {"receipt": receipt})
        conn, generation = self._current()
        receipt, pending = self._expect_receipt(generation, receipt)
        self._write(conn, [frame], receipt, f"send to {queue!r}")
        self._await(receipt, pending, f"send to {queue!r}")

    def _transaction(
        self, items: Sequence[Outgoing], acks: tuple[Any, Sequence[str]] | None
    ) -> None:
        """Send items (and ack deliveries of one connection) in one transaction, by receipt."""
        for queue, _, _ in items:
            check_queue_name(queue)
        tx = f"tx-{uuid.uuid4().hex}"
        in_tx = {"transaction": tx}
        # Every SEND is encoded before BEGIN is written: a body that cannot be encoded fails
        # alone (MessageEncodeError), not as half a transaction on a healthy connection.
        sends = [self._send_frame(q, m, delay_ms, in_tx) for q, m, delay_ms in items]
        conn, generation = self._current()
        if acks is not None and acks[0] is not conn:
            raise TransportError("delivery belongs to a lost connection")
        receipt, pending = self._expect_receipt(generation)

        def frames() -> Iterator[bytes]:
            yield encode_frame("BEGIN", in_tx)
            yield from sends
            for ack_id in acks[1] if acks is not None else ():
                yield encode_frame("ACK", {"id": ack_id, "transaction": tx})
            yield encode_frame("COMMIT", {"transaction": tx, "receipt": receipt})

        self._write(conn, frames(), receipt, f"transaction {tx}")
        self._await(receipt, pending, f"commit of {len(items)} message(s)")

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        if not items:
            return
        if atomic:
            self._transaction([(q, m, 0) for q, m in items], None)
            return
        for queue, _ in items:
            check_queue_name(queue)
        # A connection's frames are handled in order, so the receipt of the last confirms all.
        # All are encoded before the first is written: a MessageEncodeError leaves none stored.
        receipt = _new_receipt()
        last = len(items) - 1
        frames = [
            self._send_frame(q, m, 0, {"receipt": receipt} if i == last else {})
            for i, (q, m) in enumerate(items)
        ]
        conn, generation = self._current()
        receipt, pending = self._expect_receipt(generation, receipt)
        what = f"batch of {len(items)} message(s)"
        self._write(conn, frames, receipt, what)
        self._await(receipt, pending, what)

    def open_batch(self, *, atomic: bool = True) -> _StompBatch:
        return _StompBatch(self, atomic=atomic)

    # -- consuming -----------------------------------------------------------------------------
    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> StompSubscription:
        [sub] = self.subscribe_many([SubscribeRequest(queue, selector, prefetch, on_delivery)])
        return sub

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[StompSubscription]:
        subs = []
        for request in requests:
            if request.prefetch < 1:
                raise ConfigError(f"prefetch must be at least 1, got {request.prefetch}")
            subs.append(
                StompSubscription(
                    f"sub-{next(self._ids)}",
                    check_queue_name(request.queue),
                    request.selector,
                    request.prefetch,
                    request.on_delivery,
                )
            )
        with self._lock:
            for sub in subs:
                self._subscriptions[sub.id] = sub
            if not self._connected:
                return subs  # created on (re)connection
            conn, generation = self._conn, self._generation
        self._subscribe_on(conn, generation, subs)
        return subs

    def _subscribe_on(self, conn: Any, generation: int, subs: Sequence[StompSubscription]) -> None:
        """Send every SUBSCRIBE first, then await the receipts: one round trip, not one each."""
        waiting = []
        for sub in subs:
            receipt, pending = self._expect_receipt(generation)
            try:
                self._send_subscribe(sub, conn=conn, receipt=receipt)
            except Exception as exc:
                raise TransportError(f"subscribe to {sub.queue!r} failed: {exc}") from exc
            waiting.append((receipt, pending, sub))
        for receipt, pending, sub in waiting:
            self._await(receipt, pending, f"subscribe to {sub.queue!r}")

    def _send_subscribe(
        self, sub: StompSubscription, *, conn: Any = None, receipt: str | None = None
    ) -> None:
        headers = {"activemq.prefetchSize": str(sub.prefetch)}
        if sub.selector is not None:
            headers["selector"] = sub.selector.render()
        if self._settings.artemis_window_bytes is not None:
            headers["consumer-window-size"] = str(self._settings.artemis_window_bytes)
        if receipt is not None:
            headers["receipt"] = receipt
        (conn or self._conn).subscribe(
            "/queue/" + sub.queue, sub.id, ack="client-individual", headers=headers
        )

    def unsubscribe(self, subscription: object) -> None:
        sub_id = str(getattr(subscription, "id", ""))
        with self._lock:
            sub = self._subscriptions.pop(sub_id, None)
            conn = self._conn if self._connected else None
        if sub is not None and conn is not None:
            try:
                conn.unsubscribe(sub.id)
            except Exception as exc:
                raise TransportError(f"unsubscribe from {sub.queue!r} failed: {exc}") from exc

    def _on_message(self, generation: int, headers: Mapping[str, str], body: bytes) -> None:
        sub = self._subscriptions.get(headers.get("subscription", ""))
        if sub is None:
            return  # unsubscribed meanwhile: unacknowledged, so the broker redelivers it
        destination = headers.get("destination", "")
        queue = destination.removeprefix("/queue/")
        payload: bytes | str = body
        if "content-length" not in headers:
            payload = body.decode("utf-8", "surrogateescape")
        delivery = Delivery(
            queue=queue,
            body=payload,
            properties={k: v for k, v in headers.items() if k not in _FRAME_HEADERS},
            correlation_id=headers.get("correlation-id"),
            redelivered=headers.get("redelivered") == "true",
            subscription_id=sub.id,
            broker_message_id=headers.get("message-id"),
            token=(generation, headers.get("ack") or headers.get("message-id", "")),
        )
        sub.on_delivery(delivery)

    def _ack_target(self, delivery: Delivery) -> tuple[Any, str] | None:
        token = delivery.token
        if not (isinstance(token, tuple) and len(token) == 2):
            raise TransportError("delivery was not made by this STOMP transport")
        generation, ack_id = token
        with self._lock:
            if generation != self._generation or not self._connected:
                return None
            return self._conn, str(ack_id)

    def ack(self, delivery: Delivery) -> None:
        token = delivery.token
        if not (isinstance(token, tuple) and len(token) == 2):
            raise TransportError("delivery was not made by this STOMP transport")
        # The ack thread writes every acknowledgement waiting in one socket write; close()
        # flushes them first.
        self._acks.put(token)

    def _flush_acks(self) -> None:
        """Wait until every acknowledgement queued so far is written (or dropped as stale)."""
        writer = self._ack_writer
        if writer is None or not writer.is_alive():
            return
        done = threading.Event()
        self._acks.put((_FLUSH, done))
        # Bounded by the connect timeout, not the receipt timeout: closing happens on SIGTERM,
        # and a broker that stopped reading must not hold the process beyond its grace period.
        # Acknowledgements not written are redelivered messages, never lost ones.
        done.wait(min(self._settings.receipt_timeout_s, self._settings.connect_timeout_s))

    def _write_acks(self) -> None:
        while True:
            batch = [self._acks.get()]
            while len(batch) < 1_000:
                try:
                    batch.append(self._acks.get_nowait())
                except queue_mod.Empty:
                    break
            with self._lock:
                conn = self._conn if self._connected else None
                generation = self._generation
            acks = [ack_id for gen, ack_id in batch if gen is not _FLUSH]
            frames = [
                encode_frame("ACK", {"id": str(ack_id)})
                for gen, ack_id in batch
                if gen is not _FLUSH and gen == generation
            ]
            if len(frames) < len(acks):
                # Their connection is gone: the broker has taken them back and redelivers them.
                log.info("stomp_ack_skipped_stale", count=len(acks) - len(frames))
            if frames and conn is not None:
                try:
                    conn.transport.send(b"".join(frames))
                except Exception as exc:
                    log.warning("stomp_acks_not_written", count=len(frames), error=str(exc))
            for gen, event in batch:
                if gen is _FLUSH:
                    event.set()

    def forward(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        target = self._ack_target(delivery)
        if target is None:
            raise TransportError("delivery belongs to a lost connection; the broker redelivers it")
        if not items:
            self.ack(delivery)
        elif self.is_classic:
            self._transaction(items, (target[0], [target[1]]))
        else:
            _check_bodies(items)  # so a bad body fails before any of the copies is sent
            for queue, message, delay_ms in items:
                self.send(queue, message, delay_ms=delay_ms)
            self.ack(delivery)

    def forward_many(self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]) -> None:
        live = []
        for delivery, items in moves:
            target = self._ack_target(delivery)
            if target is None:
                continue  # its connection is gone: the broker redelivers it
            live.append((delivery, items, target))
        if not live:
            return
        if not self.is_classic:
            _check_bodies(item for _, items, _ in live for item in items)
            for delivery, items, _ in live:
                self.forward(delivery, items)
            return
        conn = live[0][2][0]
        if any(target[0] is not conn for _, _, target in live):
            raise TransportError("deliveries of different connections cannot share a transaction")
        self._transaction(
            [item for _, items, _ in live for item in items],
            (conn, [target[1] for _, _, target in live]),
        )

    def is_live(self, delivery: Delivery) -> bool:
        return self._ack_target(delivery) is not None
