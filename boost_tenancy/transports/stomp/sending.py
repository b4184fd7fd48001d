"""The confirmed sends of a StompTransport, and what a loss of their connection failed.

Artemis closes a connection after the ERROR of a frame it refused (a SEND to a full address
under address-full-policy FAIL, or to one the user may not write to; measured on 2.44.0): every
send under way there fails with it, though only one was refused. So on Artemis the transport's
own connection carries no subscription (stomp/subscriptions.py), and each send lost with it is
sent again alone (transports/lost_sends.py): one refused again is refused (its caller settles
its message), the others are stored. A send whose receipt the close took may be stored twice,
with the same boostMessageId: Artemis answers a durable SEND once its journal has it, after the
ERROR of a later frame (measured). So a queue that refused is sent to on a second connection
until a send to it goes through, and its next refusals cost no other send.

Classic keeps the connection after an ERROR, and its acknowledgements and transactional forwards
share that connection outside the sender's gate, so being alone on the gate proves nothing
there: a send that fails with its connection (or with an ERROR for a frame that asked for no
receipt, receipts.py) fails to its caller, as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence

from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.transports.lost_sends import (
    ConnectionLostError,
    RefusingQueues,
    SendGate,
    connection_wait_s,
)
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.flavour import REFUSAL_CLOSES_CONNECTION
from boost_tenancy.transports.stomp.receipts import (
    BrokerRefusalError,
    UnclaimedRefusalError,
    new_receipt,
)
from boost_tenancy.transports.stomp.settings import StompSettings

FramesFor = Callable[[str], Sequence[bytes]]
"""The frames of one send, encoded, the last asking for the given receipt."""


class RefusedError(BrokerRefusalError):
    """The broker refused a frame that asked for no receipt while this send was the only one on
    its connection, or again when it was sent alone: this send was the refused one."""


def always() -> bool:
    return True


class _Lane:
    """One connection sends go on, and its gate: a send lost with it has it to itself when it
    is written again."""

    def __init__(self, connection: StompConnection) -> None:
        self.connection = connection
        self.gate = SendGate()


class Sender:
    """Confirmed sends, on the transport's own connection or, for a queue that refused, on a
    second one; and the rule above for what a loss of either failed."""

    def __init__(self, connection: StompConnection, settings: StompSettings) -> None:
        self._settings = settings
        self._main = _Lane(connection)
        self._refusing: _Lane | None = None
        self._suspects = RefusingQueues()
        self._lock = threading.Lock()
        """Guards _refusing; never held while waiting on the broker."""
        self._closed = False
        self._wait_s = connection_wait_s(settings)
        self._alone_s = self._wait_s + settings.receipt_timeout_s

    @property
    def connection(self) -> StompConnection:
        """The transport's own connection."""
        return self._main.connection

    def close(self) -> None:
        with self._lock:
            self._closed = True
            refusing = self._refusing
        if refusing is not None:
            refusing.connection.close()

    def confirm(
        self,
        frames_for: FramesFor,
        what: str,
        queues: Collection[str],
        *,
        wanted: Callable[[], bool] | None = always,
    ) -> None:
        """Write frames_for(a new receipt), which send to queues, and wait for that receipt. A
        send lost as above is written again alone, with a new receipt, if wanted() still holds
        once it has its connection to itself; wanted None: never again (its frames acknowledge
        deliveries of the lost connection)."""
        refusing = self._suspects.any_of(queues)
        lane = self._lane(refusing)
        try:
            self._confirm(lane, frames_for, what, wanted)
        except BrokerRefusalError:
            if lane.connection.flavour.refusal_closes_connection:
                self._suspects.refused(queues)
            raise
        if refusing:
            self._suspects.took(queues)

    def _confirm(
        self, lane: _Lane, frames_for: FramesFor, what: str, wanted: Callable[[], bool] | None
    ) -> None:
        lost: ConnectionLostError
        with lane.gate.shared() as stay:
            try:
                self._once(lane, frames_for, what)
                return
            except ConnectionLostError as exc:
                lost = exc
        # Where the broker keeps the connection after a refusal (Classic), frames outside the
        # gate (acknowledgements, transactional forwards) share it, and being alone on the gate
        # proves nothing: a loss is the caller's, as before.
        if wanted is None or not lane.connection.flavour.refusal_closes_connection:
            raise lost
        refused_near = isinstance(lost, UnclaimedRefusalError)
        if refused_near and stay.alone:
            raise RefusedError(f"{lost} (the only send on its connection)") from None
        if not wanted():
            raise lost
        deadline = time.monotonic() + self._alone_s
        still_wanted = True
        try:
            with lane.gate.exclusive(deadline):
                # Unwanted by now (the deliveries it forwards went back to the broker with their
                # connection): it keeps its loss.
                still_wanted = wanted()
                if still_wanted:
                    self._once(lane, frames_for, what)
        except TimeoutError:
            raise NotConfirmedError(
                f"{what}: lost with its connection, and not sent again alone within "
                f"{self._alone_s}s"
            ) from None
        except UnclaimedRefusalError as again:
            raise RefusedError(f"{again} ({REFUSAL_CLOSES_CONNECTION})") from None
        except ConnectionLostError as again:
            # Lost twice, with no refusal seen: whether the broker holds it is unknown.
            raise NotConfirmedError(f"{again} (lost again when sent alone)") from None
        except BrokerRefusalError:
            raise
        except TransportError as again:
            # Its connection stayed away: the first try's fate is still unknown.
            raise NotConfirmedError(f"{again} (lost with its connection before)") from None
        if not still_wanted:
            raise lost

    def _once(self, lane: _Lane, frames_for: FramesFor, what: str) -> None:
        receipt = new_receipt()
        frames = frames_for(receipt)
        link = lane.connection.current(self._wait_s)
        lane.connection.confirm(link, frames, receipt, what)

    def _lane(self, refusing: bool) -> _Lane:
        """The main lane, or the second, opened when first needed."""
        if not refusing:
            return self._main
        with self._lock:
            if self._closed:
                raise TransportError("STOMP transport is closed")
            if self._refusing is None:
                connection = StompConnection(
                    self._settings, on_open=lambda link: None, on_message=lambda *_: None
                )
                self._refusing = _Lane(connection)
                opening = True
            else:
                opening = False
            lane = self._refusing
        if opening:
            try:
                lane.connection.connect()
            except TransportError:
                with self._lock:
                    self._refusing = None  # the next send to a refusing queue tries again
                raise
            with self._lock:
                closed = self._closed
            if closed:  # closed while it connected: close() found it unopened
                lane.connection.close()
                raise TransportError("STOMP transport is closed")
        return lane
