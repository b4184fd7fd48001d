"""The STOMP connection under a transport across reconnections: connect with a deadline, decide
the broker's flavour, reconnect with backoff through the failover list, await receipts on it."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import stomp
import structlog

from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.transports.reachability import tcp_failure
from boost_tenancy.transports.stomp.backoff import reconnect_delay
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.link import (
    FrameWriter,
    Link,
    ends_sockets_without_waiting,
    tune_socket,
)
from boost_tenancy.transports.stomp.listener import Listener
from boost_tenancy.transports.stomp.parsing import read_frames_with
from boost_tenancy.transports.stomp.receipts import Receipts
from boost_tenancy.transports.stomp.settings import StompSettings
from boost_tenancy.transports.stomp.tls import tls_context_warnings, use_tls

log = structlog.get_logger("boost_tenancy.transports.stomp")


_DIAGNOSE_EVERY: Final = 10
"""The reconnection loop names the cause of its first failed attempt and of every tenth."""
_CLOSE_WAIT_S: Final = 2.0
"""The longest close() waits for the broker to confirm DISCONNECT before closing the socket."""


def _not_said_by_the_transport(record: logging.LogRecord) -> bool:
    """stomp.py's lines the transport says better itself, left out.

    stomp.py warns of each failed connection attempt with the socket's error; the transport
    names the cause (tcp_failure) in the error it raises and the failed reconnections it logs.
    stomp.py logs each failed write with a traceback; the transport raises a TransportError
    naming what it wrote, and drops the connection (Link.write)."""
    return not str(record.msg).startswith(("could not connect to host", "error sending frame"))


logging.getLogger("stomp.py").addFilter(_not_said_by_the_transport)

OnMessage = Callable[[int, Mapping[str, str], bytes], None]
"""(generation of the connection, headers, body) of a MESSAGE frame, on the receiving thread."""


class StompConnection:
    """The broker connection of one transport, across reconnections.

    Each established connection is a Link with a new generation; deliveries and receipts are
    tagged with it, so nothing of a lost connection is ever acknowledged on a later one.
    """

    def __init__(
        self,
        settings: StompSettings,
        *,
        on_open: Callable[[Link], None],
        on_message: OnMessage,
    ) -> None:
        self._settings = settings
        self._on_open = on_open
        self._on_message = on_message
        self.receipts = Receipts(settings.receipt_timeout_s)
        self._lock = threading.Lock()
        self._live = threading.Condition(self._lock)
        self._link: Link | None = None
        self._connected = False
        self._doomed: int | None = None  # a generation the broker closes after its ERROR
        self._generation = 0
        self._closing = False
        self._server = ""
        self._flavour = BrokerFlavour.OTHER
        self._reconnector: threading.Thread | None = None
        self._address = 0
        """Index in settings.addresses of the broker connected to, or to try next."""

    @property
    def server(self) -> str:
        """The last CONNECTED server header, e.g. 'ActiveMQ/5.17.2'; empty before the first."""
        return self._server

    @property
    def flavour(self) -> BrokerFlavour:
        """The broker of the last connection; OTHER before the first."""
        return self._flavour

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def where(self) -> str:
        """host:port of the broker connected to, or to be tried next."""
        host, port = self._settings.addresses[self._address]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    # -- taking the connection -------------------------------------------------------------------
    def current(self, wait_s: float | None = None) -> Link:
        """The live connection, waiting up to wait_s (by default reconnect_wait_s) for one."""
        wait_s = self._settings.reconnect_wait_s if wait_s is None else wait_s
        with self._lock:
            deadline = time.monotonic() + wait_s
            while not self._connected or self._link is None:
                if self._closing:
                    raise TransportError("STOMP transport is closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(
                        f"no connection to the STOMP broker at {self.where} within {wait_s}s"
                    )
                self._live.wait(remaining)
            return self._link

    def live(self) -> Link | None:
        """The live connection now, or None; never waits."""
        with self._lock:
            return self._link if self._connected else None

    def confirm(
        self,
        link: Link,
        frames: Iterable[bytes],
        receipt: str,
        what: str,
        *,
        writer: FrameWriter | None = None,
    ) -> None:
        """Write frames through link (after what writer still holds) and wait for the receipt
        one of them carries. Callers encode every frame first, so a message that cannot be
        encoded never passes for a lost connection."""
        pending = self.receipts.expect(link.generation, receipt)
        out = writer or FrameWriter(link, what)
        try:
            for frame in frames:
                out.push(frame)
            out.flush()
        except BaseException:
            self.receipts.discard(pending)
            raise
        try:
            self.receipts.wait(pending, what)
        except NotConfirmedError:
            # A broker that keeps the connection up but stopped answering would hold every
            # unacknowledged delivery of it for good: drop the connection, so the broker takes
            # them back and redelivers them (duplicates are possible, a stall is not).
            self.abandon(link, f"{what}: no receipt")
            raise

    def abandon(self, link: Link, reason: str) -> None:
        """Drop link and reconnect, as if the broker had closed it."""
        log.warning("stomp_connection_abandoned", reason=reason, generation=link.generation)
        link.drop()
        self.connection_lost(link.generation)

    # -- lifecycle -------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect to the first address that answers, trying each once in order; the error of
        each is in the one raised when none does."""
        with self._lock:
            self._closing = False
        count = len(self._settings.addresses)
        errors: list[str] = []
        for _ in range(count):
            try:
                self._open()
            except TransportError as exc:
                error = self._diagnosed(exc)
                errors.append(str(error))
                if self._closing or count == 1:
                    raise error from exc
                self._next_address()
            else:
                return
        raise TransportError("no STOMP broker of the failover list answered: " + "; ".join(errors))

    def _diagnosed(self, exc: TransportError) -> TransportError:
        """exc, or, where stomp.py gave no cause (ConnectFailedException), one naming it: an
        unknown host, a refused port, no answer. Asked by connect(), and by the reconnection
        loop at its first attempt and every _DIAGNOSE_EVERY-th, not at every one: each asks
        with a probe connection."""
        if "ConnectFailedException" not in str(exc):
            return exc
        host, port = self._settings.addresses[self._address]
        reason = tcp_failure(host, port, min(self._settings.connect_timeout_s, 2.0))
        if reason is None:
            return exc
        return TransportError(f"cannot connect to STOMP broker at {self.where}: {reason}")

    def _next_address(self) -> None:
        with self._lock:
            self._address = (self._address + 1) % len(self._settings.addresses)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            link, self._link = self._link, None
            self._connected, self._doomed = False, None
        self.receipts.fail(None, "transport closed", TransportError)
        if link is not None:
            try:
                link.disconnect(wait_s=min(self._settings.receipt_timeout_s, _CLOSE_WAIT_S))
            except Exception as exc:  # a dead connection cannot be closed more
                log.debug("stomp_disconnect_failed", error=str(exc))

    def _open(self) -> None:
        """Open a new connection, decide the broker's flavour and hand it to on_open.

        The lock is not held while connecting: a broker that accepts TCP but never answers
        CONNECT must not block close() or the receiving thread.
        """
        settings = self._settings
        with self._lock:
            self._generation += 1
            generation = self._generation
            address = settings.addresses[self._address]
        conn = stomp.Connection12(
            [address],
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
        if settings.tls is not None:
            use_tls(conn, address, settings.tls)
        read_frames_with(conn.transport)
        ends_sockets_without_waiting(conn.transport)
        listener = Listener(self, generation)
        conn.set_listener("boost", listener)
        server = self._await_connected(conn, listener)
        flavour = BrokerFlavour.from_server(server)
        link = Link(conn, generation, flavour, settings.receipt_timeout_s)
        with self._lock:
            if self._closing or generation != self._generation:
                problem = "connection superseded or transport closed while connecting"
            elif listener.lost:
                problem = f"STOMP broker at {self.where} closed the connection after CONNECTED"
            else:
                problem = None
                self._server, self._flavour = server, flavour
                self._link, self._connected = link, True
        if problem is not None:
            link.drop()
            raise TransportError(problem)
        try:
            self._on_open(link)
        finally:
            with self._lock:
                self._live.notify_all()

    def _await_connected(self, conn: Any, listener: Listener) -> str:
        """CONNECT and wait for CONNECTED within connect_timeout_s; its server header."""
        settings = self._settings
        deadline = time.monotonic() + settings.connect_timeout_s
        try:
            # stomp.py's own wait has no working timeout; wait for an answer with a deadline.
            with tls_context_warnings(settings.tls):
                conn.connect(settings.username, settings.password, wait=False)
            tune_socket(conn, settings.receipt_timeout_s)
            while listener.server is None:
                if conn.transport.connection_error:
                    raise TransportError(f"STOMP broker at {self.where} refused the connection")
                if listener.answered.is_set() or not conn.transport.running:
                    # A peer that accepts and closes at once (a broker starting or stopping,
                    # or not a broker at all) is told apart at once, not at the deadline.
                    raise TransportError(
                        f"STOMP broker at {self.where} closed the connection before CONNECTED "
                        "(is it a STOMP port? an AMQP or OpenWire port closes it so)"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(
                        f"STOMP broker at {self.where} did not answer CONNECT within "
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
            # stomp.py's ConnectFailedException has no message (connect() names the cause).
            detail = str(exc) or type(exc).__name__
            if settings.tls is not None:
                # stomp.py logs the TLS failure itself and raises without it.
                detail += (
                    " (TCP or TLS: a certificate not signed by BOOST_BROKER_CA_FILE's CA or not "
                    "naming the host is refused)"
                )
            raise TransportError(
                f"cannot connect to STOMP broker at {self.where}: {detail}"
            ) from exc
        return listener.server

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
                if isinstance(exc, TransportError) and attempt % _DIAGNOSE_EVERY == 1:
                    exc = self._diagnosed(exc)  # the cause, not stomp.py's bare exception name
                log.info("stomp_reconnect_failed", attempt=attempt, error=str(exc))
                if len(settings.addresses) > 1:
                    self._next_address()
            else:
                log.info(
                    "stomp_reconnected", attempt=attempt + 1, server=self._server, broker=self.where
                )
                return
            time.sleep(
                reconnect_delay(attempt, settings.reconnect_initial_s, settings.reconnect_max_s)
            )

    # -- FrameEvents, on the receiving thread ---------------------------------------------------
    def message_received(self, generation: int, headers: Mapping[str, str], body: bytes) -> None:
        self._on_message(generation, headers, body)

    def receipt_received(self, receipt: str | None) -> None:
        self.receipts.resolve(receipt, None)

    def error_received(
        self, generation: int, headers: Mapping[str, str], body: bytes | str
    ) -> None:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        message = headers.get("message", "broker error")
        detail = f"{message}: {text.strip()}" if text.strip() else message
        log.error("stomp_error_frame", message=message)
        if self._flavour.refusal_closes_connection:
            self._closed_by_broker(generation)  # first: a caller told of it writes elsewhere
        self.receipts.refused(
            generation,
            headers.get("receipt-id"),
            detail,
            for_the_connection=self._flavour.refused_with_its_connection(message),
        )

    def _closed_by_broker(self, generation: int) -> None:
        """The broker closes this connection after its ERROR: no frame is written into it from
        now on, while receipts of frames written before still come in until it closes (else a
        send stored would be sent twice). Dropped if not closed within connect_timeout_s."""
        with self._lock:
            if generation != self._generation or not self._connected or self._link is None:
                return
            self._connected, self._doomed, link = False, generation, self._link
        timer = threading.Timer(self._settings.connect_timeout_s, self._drop_doomed, (link,))
        timer.daemon = True
        timer.start()

    def _drop_doomed(self, link: Link) -> None:
        if self._doomed == link.generation:
            self.abandon(link, "the broker sent ERROR and kept the connection")

    def connection_lost(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation:
                return
            was_connected = self._connected or self._doomed == generation
            self._connected, self._doomed = False, None
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
        self.receipts.fail(generation, "connection lost before the broker confirmed")
        if was_connected and not closing:  # a failed attempt is logged by whoever made it
            log.warning("stomp_connection_lost", broker=self.where)
