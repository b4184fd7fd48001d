"""The kill storm charges each extra handling to the failure that caused it: the latest failure
between a message's two handlings, or the node crash when RabbitMQ's is one of them (it brings
back what it took as acknowledged long before); a repeat with no failure between is charged to
none, which the storm refuses."""

from __future__ import annotations

from tests.integration.test_kill_storm import NO_FAILURE, Record, Struck, extra_by_failure


def handlings(*ids: str) -> list[Record]:
    return [Record("t", m, 1, "t", "t", 1) for m in ids]


def test_a_repeat_is_charged_to_the_latest_failure_between_its_handlings() -> None:
    records = handlings("a", "b", "c", "a", "d", "b")
    struck = [Struck(1, 2, "kill"), Struck(2, 3, "broker-restart")]
    # a: handled at 0 and 3, both failures between -> the latest; b: 1 and 5 -> the latest too.
    assert extra_by_failure(records, struck) == {1: 2}


def test_the_preferred_failure_wins_when_it_is_between() -> None:
    records = handlings("a", "b", "c", "d", "a")
    struck = [Struck(1, 1, "broker-kill"), Struck(3, 3, "kill")]
    assert extra_by_failure(records, struck) == {1: 1}
    assert extra_by_failure(records, struck, prefer="broker-kill") == {0: 1}


def test_a_repeat_with_no_failure_between_is_charged_to_none() -> None:
    records = handlings("a", "b", "a")
    assert extra_by_failure(records, [Struck(0, 0, "kill")]) == {NO_FAILURE: 1}
    assert extra_by_failure(records, []) == {NO_FAILURE: 1}


def test_a_failure_still_under_way_counts_for_handlings_during_it() -> None:
    # Handled at 1 while the broker was restarting (began 1, ended 3), again at 3 after it.
    records = handlings("x", "a", "y", "a")
    assert extra_by_failure(records, [Struck(1, 3, "broker-restart")]) == {0: 1}
