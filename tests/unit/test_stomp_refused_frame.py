"""A SEND refused without a receipt never lets its batch or transaction read as confirmed.

Measured on Artemis 2.44.0 (an address full with address-full-policy FAIL, or one the user may
not send to): a SEND inside a transaction is refused by an ERROR without receipt-id, and the
COMMIT's RECEIPT sometimes followed it (5 of 12 raw tries); `send_batch(atomic=True)` then
returned with nothing stored (4 to 11 times in 100). A SEND before a batch's last one is refused
the same way. Here a scripted peer answers as Artemis did: the ERROR, then the RECEIPT.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.stomp import StompSettings, StompTransport

CONNECTED = (
    b"CONNECTED\nversion:1.2\nsession:1\n"
    b"server:ActiveMQ-Artemis/2.44.0 ActiveMQ Artemis Messaging Engine\n\n\x00"
)
REFUSED = b"ERROR\nmessage:AMQ339011 Error sending message\n\n\x00"


class RefusingPeer:
    """Answers every receipt asked for; before the first one, an ERROR without receipt-id."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.server.accept()
                self._conns.append(conn)
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        seen = b""
        refused = False
        with contextlib.suppress(OSError):
            conn.recv(4096)
            conn.sendall(CONNECTED)
            while chunk := conn.recv(65536):
                seen += chunk
                for receipt in re.findall(rb"\nreceipt:([^\n]*)\n", seen):
                    if not refused:
                        conn.sendall(REFUSED)
                        refused = True
                    conn.sendall(b"RECEIPT\nreceipt-id:" + receipt + b"\n\n\x00")
                seen = seen[seen.rfind(b"\x00") + 1 :] if b"\x00" in seen else seen

    def close(self) -> None:
        self.server.close()
        for conn in self._conns:
            conn.close()


@pytest.fixture
def transport() -> Iterator[StompTransport]:
    peer = RefusingPeer()
    made = StompTransport(
        StompSettings(host="127.0.0.1", port=peer.port, confirm_timeout_s=5, reconnect_wait_s=0)
    )
    made.connect()
    yield made
    made.close()
    peer.close()


@pytest.mark.parametrize("atomic", [True, False], ids=["transaction", "receipt-on-last"])
def test_a_batch_with_a_refused_send_is_not_confirmed(
    transport: StompTransport, atomic: bool
) -> None:
    messages = [("q", WireMessage(body=f"m{n}", properties={})) for n in range(3)]
    with pytest.raises(TransportError, match="refused a frame of it: AMQ339011"):
        transport.send_batch(messages, atomic=atomic)
