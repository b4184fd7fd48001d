"""A batch of sends on one STOMP connection, opened by StompTransport.open_batch."""

from __future__ import annotations

import contextlib
import os

from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.frames import encode_frame, send_frame, with_receipt
from boost_tenancy.transports.stomp.link import FrameWriter
from boost_tenancy.transports.stomp.receipts import new_receipt


def new_transaction() -> str:
    """A fresh transaction id, as random as a receipt's (new_receipt)."""
    return "tx-" + os.urandom(16).hex()


class StompBatch:
    """Atomic: a transaction whose frames stream out in chunks while the batch fills. Otherwise:
    plain sends, each encoded as it is added and all written at commit, one receipt on the last
    (nothing is written if the block fails)."""

    def __init__(self, connection: StompConnection, *, atomic: bool) -> None:
        self._connection = connection
        self._link = connection.current()
        self._writer = FrameWriter(self._link, "batch write")
        self._tx = new_transaction() if atomic else None
        self._plain: list[bytes] = []
        self._count = 0
        self._began = False

    def add(self, queue: str, message: WireMessage) -> None:
        """Add one message; a body that cannot be encoded raises MessageEncodeError here, with
        nothing of it written, and the batch stays usable."""
        if self._tx is None:
            # Encoded now, once: an error names this add, and commit only writes.
            self._plain.append(send_frame(queue, message, 0, {}))
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
            self._commit_plain()
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

    def _commit_plain(self) -> None:
        """Every plain send, the last asking for the receipt that confirms them all: a
        connection's frames are handled in order. Written on the connection live now, since
        nothing of the batch went out before."""
        if not self._plain:
            return
        receipt = new_receipt()
        frames = self._plain
        frames[-1] = with_receipt(frames[-1], receipt)
        self._plain = []
        what = f"batch of {len(frames)} message(s)"
        self._connection.confirm(self._connection.current(), frames, receipt, what)

    def abort(self) -> None:
        if self._tx is None or not self._began:
            self._plain.clear()
            return
        self._writer.clear()
        # Nothing of an aborted transaction is stored; a dead connection aborts it anyway.
        with contextlib.suppress(Exception):
            self._link.write(encode_frame("ABORT", {"transaction": self._tx}), "abort")
