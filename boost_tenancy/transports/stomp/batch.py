"""A batch of sends on one STOMP connection, opened by StompTransport.open_batch."""

from __future__ import annotations

import contextlib
import os

from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.stomp.frames import encode_frame, send_frame, with_receipt
from boost_tenancy.transports.stomp.link import FrameWriter, Link
from boost_tenancy.transports.stomp.receipts import new_receipt
from boost_tenancy.transports.stomp.sending import Sender


def new_transaction() -> str:
    """A fresh transaction id, as random as a receipt's (new_receipt)."""
    return "tx-" + os.urandom(16).hex()


class StompBatch:
    """Atomic: a transaction whose frames stream out in chunks while the batch fills, except
    where the broker closes the connection when it refuses a frame (Artemis): there the
    transaction is written whole at commit, by the sender, so that a refusal of another send
    cannot cut it short unseen, and it is written again when lost with the connection
    (stomp/sending.py). Otherwise: plain sends, each encoded as it is added and all written at
    commit, one receipt on the last (nothing is written if the block fails)."""

    def __init__(self, sender: Sender, *, atomic: bool) -> None:
        self._sender = sender
        self._tx = new_transaction() if atomic else None
        self._stream: tuple[Link, FrameWriter] | None = None
        """The connection a streamed transaction goes out on, and its writer."""
        if atomic and not sender.connection.flavour.refusal_closes_connection:
            link = sender.connection.current()
            self._stream = link, FrameWriter(link, "batch write")
        self._held: list[bytes] = []
        """Frames written at commit: plain sends, or a transaction's that does not stream."""
        self._queues: set[str] = set()
        self._count = 0
        self._began = False

    def add(self, queue: str, message: WireMessage) -> None:
        """Add one message; a body that cannot be encoded raises MessageEncodeError here, with
        nothing of it written, and the batch stays usable."""
        if self._tx is None:
            # Encoded now, once: an error names this add, and commit only writes.
            self._held.append(send_frame(queue, message, 0, {}))
            self._queues.add(queue)
            return
        # Encoded before BEGIN (the queue name and the body checked): a first message that cannot
        # be encoded leaves nothing written.
        frame = send_frame(queue, message, 0, {"transaction": self._tx})
        self._count += 1
        self._queues.add(queue)
        if self._stream is None:
            self._held.append(frame)
            return
        _, writer = self._stream
        if not self._began:
            writer.push(encode_frame("BEGIN", {"transaction": self._tx}))
            self._began = True
        writer.push(frame)

    def commit(self) -> None:
        tx = self._tx
        if self._stream is None or tx is None:
            self._commit_held()
            return
        if not self._began:
            return
        link, writer = self._stream
        receipt = new_receipt()
        commit = encode_frame("COMMIT", {"transaction": tx, "receipt": receipt})
        self._sender.connection.confirm(
            link, [commit], receipt, f"commit of {self._count} message(s)", writer=writer
        )

    def _commit_held(self) -> None:
        """The frames held, written together on the connection live now, since nothing of the
        batch went out before: plain sends with the receipt that confirms them all on the last
        (a connection's frames are handled in order), or a transaction with it on its COMMIT."""
        frames, self._held = self._held, []
        if not frames:
            return
        tx = self._tx
        if tx is None:
            what = f"batch of {len(frames)} message(s)"
            self._sender.confirm(
                lambda r: [*frames[:-1], with_receipt(frames[-1], r)], what, self._queues
            )
            return
        begin = encode_frame("BEGIN", {"transaction": tx})
        self._sender.confirm(
            lambda r: [begin, *frames, encode_frame("COMMIT", {"transaction": tx, "receipt": r})],
            f"commit of {len(frames)} message(s)",
            self._queues,
        )

    def abort(self) -> None:
        tx = self._tx
        if self._stream is None or tx is None or not self._began:
            self._held.clear()
            return
        link, writer = self._stream
        writer.clear()
        # Nothing of an aborted transaction is stored; a dead connection aborts it anyway.
        with contextlib.suppress(Exception):
            link.write(encode_frame("ABORT", {"transaction": tx}), "abort")
