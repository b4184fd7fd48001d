"""FairWorkQueue: deficit round robin turns, weights, FIFO per tenant, timeouts, close, threads."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boost_tenancy import RunnerSettings, TenantId
from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.processing.scheduling import FairWorkQueue

A, B, C, D = (TenantId(f"org-{name}") for name in "ABCD")
ALL = (A, B, C, D)


def drain(work: FairWorkQueue[int]) -> list[tuple[TenantId, int]]:
    out: list[tuple[TenantId, int]] = []
    while (taken := work.get(timeout=0)) is not None:
        out.append(taken)
    return out


# Each operation is a put for tenant index i (0..3) or a get (None).
operations = st.lists(st.one_of(st.integers(0, 3), st.none()), max_size=300)
weight_lists = st.lists(st.integers(1, 4), min_size=4, max_size=4)


@settings(max_examples=300, deadline=None)
@given(ops=operations, weights=weight_lists)
def test_no_tenant_gets_more_than_its_weight_in_a_row_while_another_waits(
    ops: list[int | None], weights: list[int]
) -> None:
    work: FairWorkQueue[int] = FairWorkQueue(dict(zip(ALL, weights, strict=True)))
    pending: Counter[TenantId] = Counter()
    put_order: dict[TenantId, list[int]] = {t: [] for t in ALL}
    got_order: dict[TenantId, list[int]] = {t: [] for t in ALL}
    run_tenant: TenantId | None = None
    run = 0
    for seq, op in enumerate([*ops, *[None] * len(ops)]):  # the trailing gets drain the queue
        if op is not None:
            tenant = ALL[op]
            work.put(tenant, seq)
            pending[tenant] += 1
            put_order[tenant].append(seq)
            continue
        others_waiting = {t for t, n in pending.items() if n > 0}
        taken = work.get(timeout=0)
        if taken is None:
            assert not others_waiting
            continue
        tenant, item = taken
        others_waiting.discard(tenant)
        pending[tenant] -= 1
        got_order[tenant].append(item)
        if not others_waiting:
            run_tenant, run = None, 0  # alone: no one to be unfair to
            continue
        run = run + 1 if tenant == run_tenant else 1
        run_tenant = tenant
        assert run <= work.weight(tenant), (tenant, run)
    assert len(work) == 0
    assert got_order == put_order  # FIFO within each tenant, nothing lost or duplicated


def test_small_tenant_interleaves_with_a_large_backlog() -> None:
    work: FairWorkQueue[int] = FairWorkQueue()
    for index in range(1000):
        work.put(A, index)
    for index in range(10):
        work.put(B, index)
    order = [tenant for tenant, _ in drain(work)]
    b_positions = [i for i, tenant in enumerate(order) if tenant == B]
    assert len(b_positions) == 10
    gaps = [later - earlier - 1 for earlier, later in itertools.pairwise(b_positions)]
    assert max(gaps) <= 1  # at most weight_A (1) of A's items between two of B's
    assert b_positions[-1] < 21


@pytest.mark.parametrize(("weight_a", "weight_b"), [(3, 1), (1, 1), (5, 2)])
def test_weights_set_the_shares_under_backlog(weight_a: int, weight_b: int) -> None:
    weights: dict[TenantId | str, int] = {"org-A": weight_a, B: weight_b}
    work: FairWorkQueue[int] = FairWorkQueue(weights)
    for index in range(2000):
        work.put(A, index)
        work.put(B, index)
    rounds = 100
    first = [work.get(timeout=0) for _ in range(rounds * (weight_a + weight_b))]
    shares = Counter(taken[0] for taken in first if taken is not None)
    assert shares == {A: rounds * weight_a, B: rounds * weight_b}


def test_fifo_within_a_tenant_and_pending_counts() -> None:
    work: FairWorkQueue[str] = FairWorkQueue()
    for item in ("a1", "a2", "a3"):
        work.put(A, item)
    work.put(B, "b1")
    assert (len(work), work.pending(A), work.pending(B), work.pending(C)) == (4, 3, 1, 0)
    assert [work.get(timeout=0) for _ in range(4)] == [(A, "a1"), (B, "b1"), (A, "a2"), (A, "a3")]
    assert (len(work), work.pending(A)) == (0, 0)


def test_a_tenant_that_went_idle_does_not_bank_its_turn() -> None:
    work: FairWorkQueue[int] = FairWorkQueue({A: 3})
    work.put(A, 1)
    assert work.get(timeout=0) == (A, 1)  # A leaves the ring with two items of credit unused
    work.put(B, 1)
    work.put(A, 2)
    assert [work.get(timeout=0) for _ in range(2)] == [(B, 1), (A, 2)]


def test_get_times_out_with_none() -> None:
    work: FairWorkQueue[int] = FairWorkQueue()
    started = time.monotonic()
    assert work.get(timeout=0.1) is None
    assert time.monotonic() - started >= 0.09
    assert work.get(timeout=0) is None


def test_get_wakes_for_a_put_from_another_thread() -> None:
    work: FairWorkQueue[int] = FairWorkQueue()
    timer = threading.Timer(0.05, work.put, args=(A, 7))
    timer.start()
    started = time.monotonic()
    assert work.get(timeout=5) == (A, 7)
    assert time.monotonic() - started < 2
    timer.join()


def test_close_wakes_every_getter() -> None:
    work: FairWorkQueue[int] = FairWorkQueue()
    results: list[object] = []
    getters = [
        threading.Thread(target=lambda: results.append(work.get(timeout=30))) for _ in range(3)
    ]
    for getter in getters:
        getter.start()
    time.sleep(0.05)
    started = time.monotonic()
    work.close()
    for getter in getters:
        getter.join(timeout=2)
    assert time.monotonic() - started < 2
    assert results == [None, None, None]
    work.put(A, 1)  # still accepted after close (a receiving thread must not fail) ...
    assert work.get(timeout=0) is None  # ... but no longer handed out
    assert work.closed
    assert work.pending(A) == 1


def test_eight_producers_and_four_consumers_lose_nothing() -> None:
    work: FairWorkQueue[tuple[int, int]] = FairWorkQueue({"org-A": 2})
    tenants = [TenantId(f"t{index}") for index in range(50)]
    per_producer = 5000
    taken: list[list[tuple[TenantId, tuple[int, int]]]] = [[] for _ in range(4)]

    def produce(producer: int) -> None:
        rng = random.Random(producer)
        for index in range(per_producer):
            work.put(rng.choice(tenants), (producer, index))

    def consume(slot: int) -> None:
        while True:
            got = work.get(timeout=0.05)
            if got is None:
                if work.closed:
                    return
                continue
            taken[slot].append(got)

    consumers = [threading.Thread(target=consume, args=(slot,)) for slot in range(4)]
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(8)]
    for thread in consumers + producers:
        thread.start()
    for thread in producers:
        thread.join()
    deadline = time.monotonic() + 30
    while len(work) and time.monotonic() < deadline:
        time.sleep(0.01)
    work.close()
    for thread in consumers:
        thread.join(timeout=5)
    items = [item for slot in taken for _, item in slot]
    assert len(items) == 8 * per_producer
    assert set(items) == {(p, i) for p in range(8) for i in range(per_producer)}
    assert len(work) == 0


@pytest.mark.parametrize(
    ("weights", "error"),
    [
        ({"org-A": 0}, ConfigError),
        ({"org-A": -1}, ConfigError),
        ({"org-A": True}, ConfigError),
        ({"org-A": 1.5}, ConfigError),
        ({"not a tenant": 1}, InvalidTenantError),
    ],
)
def test_invalid_weights_are_refused(weights: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        FairWorkQueue(weights)  # type: ignore[arg-type]
    with pytest.raises(error):
        RunnerSettings(tenant_weights=weights)  # type: ignore[arg-type]


def test_runner_settings_keep_a_read_only_copy_of_the_weights() -> None:
    given_weights = {"org-A": 3}
    runner_settings = RunnerSettings(tenant_weights=given_weights)
    given_weights["org-A"] = 99
    assert dict(runner_settings.tenant_weights) == {"org-A": 3}
    with pytest.raises(TypeError):
        runner_settings.tenant_weights["org-A"] = 5  # type: ignore[index]
    assert dict(RunnerSettings().tenant_weights) == {}
