"""Acknowledgements written by one thread, every one waiting for a connection in one socket
write, so workers never wait on the socket and a burst of acks costs one system call per
connection. One thread serves every connection of a transport: a thread of its own per
connection wrote about one ack per write with 10 connections, and cost more CPU per message in
thread switches than the writes it saved.
"""

from __future__ import annotations

import queue as queue_mod
import threading
from collections.abc import Callable
from typing import Final

import structlog

from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.frames import ack_frame
from boost_tenancy.transports.stomp.link import FrameWriter

log = structlog.get_logger("boost_tenancy.transports.stomp")

AckToken = tuple[int, int, str]
"""(the transport's connection that delivered the message, that connection's generation then,
its ack id)."""

_MAX_BATCH: Final = 1_000


class _Flush:
    """Marker on the queue: set the event once everything before it is written."""

    __slots__ = ("done", "stop")

    def __init__(self, *, stop: bool = False) -> None:
        self.done = threading.Event()
        self.stop = stop


class AckWriter:
    """Writes queued acknowledgements on the connection that made their deliveries; those of a
    lost connection are dropped, since the broker has taken the messages back."""

    def __init__(self, connection: Callable[[int], StompConnection]) -> None:
        self._connection = connection
        """The transport's connection of a given index."""
        self._queue: queue_mod.SimpleQueue[AckToken | _Flush] = queue_mod.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, args=(self._queue,), name="stomp-acks", daemon=True
                )
                self._thread.start()

    def put(self, token: AckToken) -> None:
        with self._lock:
            queue = self._queue
        queue.put(token)

    def flush(self, timeout_s: float, *, stop: bool = False) -> None:
        """Wait up to timeout_s until every acknowledgement queued so far is written (or dropped
        as stale); with stop, the thread then ends (start() makes a new one)."""
        with self._lock:
            thread, queue = self._thread, self._queue
            if thread is None or not thread.is_alive():
                return
            marker = _Flush(stop=stop)
            queue.put(marker)
            if stop:
                # The stopping thread drains only the queue it was given; the next start()
                # gets a fresh queue and thread, even while this one is still blocked writing.
                self._queue = queue_mod.SimpleQueue()
                self._thread = None
        marker.done.wait(timeout_s)

    def _run(self, queue: queue_mod.SimpleQueue[AckToken | _Flush]) -> None:
        while True:
            batch = [queue.get()]
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(queue.get_nowait())
                except queue_mod.Empty:
                    break
            self._write([item for item in batch if not isinstance(item, _Flush)])
            stopping = False
            for item in batch:
                if isinstance(item, _Flush):
                    item.done.set()
                    stopping = stopping or item.stop
            if stopping:
                return

    def _write(self, tokens: list[AckToken]) -> None:
        by_connection: dict[int, list[AckToken]] = {}
        for token in tokens:
            by_connection.setdefault(token[0], []).append(token)
        for index, some in by_connection.items():
            self._write_on(self._connection(index), some)

    @staticmethod
    def _write_on(connection: StompConnection, tokens: list[AckToken]) -> None:
        link = connection.live()
        generation = link.generation if link is not None else None
        frames = [ack_frame(ack_id) for _, gen, ack_id in tokens if gen == generation]
        if len(frames) < len(tokens):
            # Their connection is gone: the broker has taken them back and redelivers them.
            log.info("stomp_ack_skipped_stale", count=len(tokens) - len(frames))
        if not frames or link is None:
            return
        writer = FrameWriter(link, "acknowledgement write")
        try:
            for frame in frames:
                writer.push(frame)
            writer.flush()
        except Exception as exc:
            log.warning("stomp_acks_not_written", count=len(frames), error=str(exc))
