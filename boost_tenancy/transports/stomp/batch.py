"""A batch of sends on one STOMP connection, opened by StompTransport.open_batch."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence

from boost_tenancy.messages import WireMessage, check_queue_name
from boost_tenancy.transports.base import Outgoing
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.frames import check_bodies, encode_frame, send_frame
from boost_tenancy.transports.stomp.link import FrameWriter
from boost_tenancy.transports.stomp.receipts import new_receipt

SendBatch = Callable[[Sequence[tuple[str, WireMessage]]], None]
"""Sends plain (non-atomic) batches, all confirmed on return."""


class StompBatch:
    """Atomic: a transaction whose frames stream out in chunks while the batch fills. Otherwise:
    plain sends written at commit, one receipt on the last."""

    def __init__(self, connection: StompConnection, send_plain: SendBatch, *, atomic: bool) -> None:
        self._connection = connection
        self._send_plain = send_plain
        self._link = connection.current()
        self._writer = FrameWriter(self._link, "batch write")
        self._tx = f"tx-{uuid.uuid4().hex}" if atomic else None
        self._items: list[tuple[str, WireMessage]] = []
        self._count = 0
        self._began = False

    def add(self, queue: str, message: WireMessage) -> None:
        """Add one message; a body that cannot be encoded raises MessageEncodeError here, with
        nothing of it written, and the batch stays usable."""
        if self._tx is None:
            check_queue_name(queue)
            # Checked now so the error names this add, not the commit (which encodes again).
            check_bodies([Outgoing(queue, message)])
            self._items.append((queue, message))
            return
        # Encoded before BEGIN (the queue name and the body checked): a first message that cannot
        # be encoded leaves nothing written.
        frame = send_frame(queue, message, 0, {"transaction": self._tx})
        if not self._began:
            self._writer.push(encode_frame("BEGIN", {"transaction": self._tx}))
            self._began = True
        self._writer.push(frame)
        self._count += 1

    def commit(self) -> None:
        if self._tx is None:
            self._send_plain(self._items)
            return
        if not self._began:
            return
        receipt = new_receipt()
        commit = encode_frame("COMMIT", {"transaction": self._tx, "receipt": receipt})
        self._connection.confirm(
            self._link,
            [commit],
            receipt,
            f"commit of {self._count} message(s)",
            writer=self._writer,
        )

    def abort(self) -> None:
        if self._tx is None or not self._began:
            self._items.clear()
            return
        self._writer.clear()
        # Nothing of an aborted transaction is stored; a dead connection aborts it anyway.
        with contextlib.suppress(Exception):
            self._link.write(encode_frame("ABORT", {"transaction": self._tx}), "abort")
