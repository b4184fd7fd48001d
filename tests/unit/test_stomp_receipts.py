"""Receipts awaited on the STOMP transport: each is answered once, by a RECEIPT, an ERROR or its
connection's loss, and its waiter hears which, or times out."""

from __future__ import annotations

import threading
import time

import pytest

from boost_tenancy import TransportError
from boost_tenancy.errors import NotConfirmedError
from boost_tenancy.transports.lost_sends import ConnectionLostError
from boost_tenancy.transports.stomp.batch import new_transaction
from boost_tenancy.transports.stomp.receipts import (
    RECEIPT_PREFIX,
    PendingReceipt,
    Receipts,
    UnclaimedRefusalError,
    new_receipt,
)


def test_a_receipt_answered_by_another_thread_wakes_its_waiter() -> None:
    receipts = Receipts(timeout_s=5.0)
    pending = receipts.expect(generation=1)
    assert not pending.wait(0.01), "nothing answered it yet"
    threading.Timer(0.05, receipts.resolve, args=(pending.id, None)).start()
    started = time.monotonic()
    receipts.wait(pending, "send")
    assert time.monotonic() - started < 4.0
    assert len(receipts) == 0


def test_a_refusal_from_another_thread_reaches_the_waiter_with_its_reason() -> None:
    receipts = Receipts(timeout_s=5.0)
    pending = receipts.expect(generation=1)
    threading.Timer(0.05, receipts.resolve, args=(pending.id, "not authorized")).start()
    with pytest.raises(TransportError, match="send: not authorized"):
        receipts.wait(pending, "send")


def test_a_refused_receipt_raises_with_the_broker_s_reason() -> None:
    receipts = Receipts(timeout_s=5.0)
    pending = receipts.expect(generation=1)
    receipts.resolve(pending.id, "queue full")
    with pytest.raises(TransportError, match="send: queue full"):
        receipts.wait(pending, "send")


def test_an_unanswered_receipt_times_out_and_is_no_longer_awaited() -> None:
    receipts = Receipts(timeout_s=0.05)
    pending = receipts.expect(generation=1)
    with pytest.raises(NotConfirmedError, match=r"no receipt within 0\.05s"):
        receipts.wait(pending, "send")
    assert len(receipts) == 0
    receipts.resolve(pending.id, None)  # a late RECEIPT finds nothing to answer


def test_a_receipt_taken_out_at_the_deadline_counts_as_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The RECEIPT is taken out of Receipts just before the waiter's deadline and answered just
    # after it: the send was confirmed, and the waiter says so instead of "no receipt".
    answer = PendingReceipt.answer

    def late_answer(
        self: PendingReceipt, error: str | None, failure: type[TransportError] = TransportError
    ) -> None:
        time.sleep(0.2)
        answer(self, error, failure)

    monkeypatch.setattr(PendingReceipt, "answer", late_answer)
    receipts = Receipts(timeout_s=0.1)
    pending = receipts.expect(generation=1)
    answering = threading.Thread(target=receipts.resolve, args=(pending.id, None))
    answering.start()
    receipts.wait(pending, "send")
    answering.join()
    assert pending.error is None
    assert len(receipts) == 0


def test_a_receipt_is_answered_once_whoever_answers_it_next() -> None:
    # A RECEIPT, then the connection lost, then a duplicate RECEIPT: the first answer stands and
    # the later ones find nothing (a second answer would release the waiter's lock twice).
    receipts = Receipts(timeout_s=5.0)
    pending = receipts.expect(generation=1)
    receipts.resolve(pending.id, None)
    receipts.fail(1, "connection lost")
    receipts.fail(None, "transport closed")
    receipts.resolve(pending.id, "late error")
    receipts.wait(pending, "send")
    assert pending.error is None


def test_losing_a_connection_fails_its_receipts_only() -> None:
    receipts = Receipts(timeout_s=5.0)
    lost = receipts.expect(generation=1)
    kept = receipts.expect(generation=2)
    receipts.fail(1, "connection lost before the broker confirmed")
    with pytest.raises(TransportError, match="connection lost before the broker confirmed"):
        receipts.wait(lost, "send")
    assert len(receipts) == 1
    receipts.resolve(kept.id, None)
    receipts.wait(kept, "send")


def test_closing_fails_every_receipt_still_awaited() -> None:
    receipts = Receipts(timeout_s=5.0)
    waiting = [receipts.expect(generation=g) for g in (1, 2, 2)]
    receipts.fail(None, "transport closed")
    for pending in waiting:
        with pytest.raises(TransportError, match="transport closed"):
            receipts.wait(pending, "send")


def test_receipt_and_transaction_ids_are_fresh_and_plain() -> None:
    receipts = {new_receipt() for _ in range(1000)}
    transactions = {new_transaction() for _ in range(1000)}
    assert len(receipts) == 1000 and len(transactions) == 1000
    for value in receipts:
        assert value.startswith(RECEIPT_PREFIX) and len(value) == len(RECEIPT_PREFIX) + 32
        int(value[len(RECEIPT_PREFIX) :], 16)
    for value in transactions:
        assert value.startswith("tx-") and len(value) == 35
        int(value[3:], 16)


def test_an_error_without_receipt_for_a_closing_connection_is_a_loss() -> None:
    """Artemis answers a frame after the refused one with 'AMQ339010 Connection is not valid.'
    (measured): without a receipt-id it names no frame, and refuses none."""
    receipts = Receipts(timeout_s=1.0)
    pending = receipts.expect(generation=1)
    receipts.refused(1, None, "AMQ339010 Connection is not valid.", for_the_connection=True)
    with pytest.raises(ConnectionLostError) as lost:
        receipts.wait(pending, "send")
    assert not isinstance(lost.value, UnclaimedRefusalError)
