"""AMQP transactions (Artemis): copies sent and deliveries accepted all together or not at all,
discharged only once the broker has taken every transactional transfer; and the outcome the
broker gave a sent message, inside a transaction or not.

Loop thread only, like everything the connection handler owns (see connection.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from proton import Connection, Delivery, Described, Event, symbol, ulong
from proton.handlers import TransactionHandler

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.amqp.encoding import EncodedMessage
from boost_tenancy.transports.amqp.events import describe, given
from boost_tenancy.transports.amqp.receiving import DeliveryToken
from boost_tenancy.transports.amqp.waiters import resolve

if TYPE_CHECKING:
    from boost_tenancy.transports.amqp.connection import AmqpConnection

_TRANSACTIONAL_STATE: Final = 0x34
_TRANSACTIONAL_OUTCOMES: Final = {
    ulong(0x24): Delivery.ACCEPTED,
    symbol("amqp:accepted:list"): Delivery.ACCEPTED,
    ulong(0x25): Delivery.REJECTED,
    symbol("amqp:rejected:list"): Delivery.REJECTED,
}


def outcome_of(delivery: Delivery) -> int:
    """The outcome the broker gave a sent delivery; inside a transaction it is carried by the
    transactional state (accepted 0x24, rejected 0x25)."""
    state: int = delivery.remote_state
    if state != _TRANSACTIONAL_STATE:
        return state
    data = delivery.remote.data or []
    outcome = data[1] if len(data) > 1 else None
    descriptor = outcome.descriptor if isinstance(outcome, Described) else None
    return _TRANSACTIONAL_OUTCOMES.get(descriptor, state)


@dataclass(slots=True, eq=False)
class TransactionWork:
    """One transaction: the sends and the deliveries to accept in it, and who waits."""

    sends: Sequence[tuple[str, EncodedMessage]]
    accepts: Sequence[DeliveryToken]
    future: Future[None]
    connection: Connection
    done: bool = False

    def finish(self, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        resolve(self.future, error)


class _TransactionHandler(TransactionHandler):
    """proton's transaction callbacks for one TransactionWork."""

    def __init__(self, transactions: Transactions, work: TransactionWork) -> None:
        super().__init__()
        self._transactions = transactions
        self._work = work

    def on_transaction_declared(self, event: Event) -> None:
        self._transactions.run(event.transaction, self._work)

    def on_transaction_declare_failed(self, event: Event) -> None:
        self._work.finish(TransportError("the broker refused to start a transaction"))

    def on_transaction_committed(self, event: Event) -> None:
        self._work.finish()

    def on_transaction_commit_failed(self, event: Event) -> None:
        self._work.finish(TransportError("the broker refused to commit the transaction"))

    def on_transaction_aborted(self, event: Event) -> None:
        self._work.finish(TransportError("the transaction was rolled back"))

    def on_link_remote_close(self, event: Event) -> None:
        condition = describe(given(event.link, "link").remote_condition)
        self._work.finish(
            TransportError(f"the broker closed its transaction coordinator: {condition}")
        )


class Transactions:
    """Declares, fills and discharges transactions on the engine's connection."""

    def __init__(self, engine: AmqpConnection) -> None:
        self._engine = engine
        self._pending: list[TransactionWork] = []
        """Begun and not finished: failed when the connection is lost (connection_lost), since
        no callback of the coordinator comes for them then."""

    def connection_lost(self, error: TransportError) -> None:
        """Fail every transaction under way: the broker rolls back what it had not committed, and
        each caller hears now rather than at the end of its wait."""
        pending, self._pending = self._pending, []
        for work in pending:
            work.finish(error)

    def start(
        self,
        sends: Sequence[tuple[str, EncodedMessage]],
        accepts: Sequence[DeliveryToken],
        future: Future[None],
    ) -> None:
        """Send and accept in one transaction; future resolves when it is committed."""
        engine = self._engine
        if any(not engine.receiving.is_live(token) for token in accepts):
            resolve(future, TransportError("a delivery belongs to a lost connection"))
            return
        conn = engine.live_connection()
        work = TransactionWork(sends, accepts, future, conn)
        self._pending = [w for w in self._pending if not (w.done or w.future.done())]
        self._pending.append(work)
        engine.loop.container.declare_transaction(
            conn, handler=_TransactionHandler(self, work), settle_before_discharge=True
        )

    def run(self, transaction: Any, work: TransactionWork) -> None:
        """Send the copies in the transaction and discharge only when the broker has taken every
        one: the coordinator link has credit at once while a new sender waits for its attach, so
        a discharge sent straight away overtakes the transfers, which the broker then refuses
        for an unknown transaction (found by the Artemis model in the contract suite)."""
        if work.connection != self._engine.connection:
            work.finish(TransportError("the connection was lost before the transaction began"))
            return
        sent: Future[None] = Future()
        sent.add_done_callback(lambda done: self._discharge(transaction, work, done.exception()))
        try:
            self._engine.sending.send(work.sends, sent, transaction)
        except Exception as exc:  # on the loop thread: the waiter must hear, the loop go on
            if not isinstance(exc, TransportError):
                exc = TransportError(f"sending in the transaction failed: {exc}")
            resolve(sent, exc)

    def _discharge(
        self, transaction: Any, work: TransactionWork, error: BaseException | None
    ) -> None:
        if work.done:
            return
        engine = self._engine
        if error is None and any(not engine.receiving.is_live(token) for token in work.accepts):
            error = TransportError("a delivery belongs to a lost connection")
        if error is None and work.future.cancelled():
            # Its caller gave up and reported it failed: committing now could only duplicate it.
            error = TransportError("the caller stopped waiting before the commit")
        if error is not None:
            if work.connection == engine.connection:
                transaction.abort()
            work.finish(error)
            return
        for token in work.accepts:
            # Settled at once, applied by the commit.
            transaction.accept(engine.receiving.take(token))
        transaction.commit()
