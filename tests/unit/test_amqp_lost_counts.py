"""The AMQP transport's ledger of deliveries its lost connections left unsettled."""

from __future__ import annotations

from boost_tenancy.transports.amqp.lost_counts import LostDeliveries


def test_a_delivery_left_by_a_lost_connection_comes_back_counted_once_more() -> None:
    ledger = LostDeliveries()
    ledger.left(("q", "m-1"), 1)
    assert ledger.count(("q", "m-1"), 1) == 2  # the broker took the loss back
    assert ledger.count(("q", "m-1"), 1) == 1  # forgotten once it came back


def test_the_brokers_count_wins_when_it_is_higher_and_unknown_keys_pass_through() -> None:
    ledger = LostDeliveries()
    ledger.left(("q", "m-1"), 1)
    assert ledger.count(("q", "m-1"), 4) == 4
    assert ledger.count(("q", "other"), 3) == 3
    assert ledger.count(None, 2) == 2


def test_the_ledger_forgets_its_oldest_beyond_its_limit() -> None:
    ledger = LostDeliveries(limit=2)
    for n in range(3):
        ledger.left(("q", f"m-{n}"), 0)
    assert ledger.count(("q", "m-0"), 0) == 0
    assert ledger.count(("q", "m-2"), 0) == 1
