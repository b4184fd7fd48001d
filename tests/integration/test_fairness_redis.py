"""The Redis fairness backend against a real Redis: a concurrency limit and a token bucket shared by
two processes, the lease that frees the slots of a process killed while holding them, and the
circuit breaker against a Redis that hangs, then answers again."""

from __future__ import annotations

import math
import os
import queue as queue_mod
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from structlog.testing import capture_logs

from boost_tenancy import ConfigError, TenantId
from boost_tenancy.fairness import (
    Admitted,
    FairnessGate,
    RatePolicy,
    RedisConcurrencyLimiter,
    RedisTokenBucketLimiter,
    redis_client,
)
from boost_tenancy.fairness.breaker import BreakerPolicy, CircuitOpenError, Phase
from boost_tenancy.fairness.redis_backend import redis_breaker
from boost_tenancy.transports.base import Delivery
from tests.conftest import unavailable, wait_until
from tests.fairness_support import Admissions, Events
from tests.redis_support import REDIS_URL, RedisSwitch, connect_redis, fresh_prefix

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
TENANT = TenantId("org-shared")


@pytest.fixture
def client() -> Any:
    return connect_redis()


@pytest.fixture
def prefix(client: Any) -> Iterator[str]:
    """A key prefix of this test alone; its keys are deleted afterwards."""
    yield from fresh_prefix(client)


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code, REDIS_URL, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 30) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


# Three threads per process contend for 2 slots; each holder bumps a shared counter in Redis and
# records the highest value it saw, so the peak counts holders across both processes.
HOLDER = r"""
import sys, threading, time
import redis
from boost_tenancy import TenantId
from boost_tenancy.fairness import RedisConcurrencyLimiter

url, prefix, name, duration = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
client = redis.Redis.from_url(url)
limiter = RedisConcurrencyLimiter(client, prefix=prefix, lease_s=30)
tenant = TenantId("org-shared")
enter = client.register_script('''
local now = redis.call('INCR', KEYS[1])
local peak = tonumber(redis.call('GET', KEYS[2]) or '0')
if now > peak then redis.call('SET', KEYS[2], now) end
return now
''')
held = [0, 0, 0]
while not client.exists(prefix + ":go"):
    time.sleep(0.002)
deadline = time.monotonic() + duration

def work(index):
    n = 0
    while time.monotonic() < deadline:
        n += 1
        message_id = f"{name}-{index}-{n}"
        if limiter.try_acquire(tenant, message_id, 2):
            enter(keys=[prefix + ":holders", prefix + ":peak"])
            held[index] += 1
            time.sleep(0.01)
            client.decr(prefix + ":holders")
            limiter.release(tenant, message_id)
        else:
            time.sleep(0.001)

threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(held))
"""


def test_concurrency_limit_holds_across_two_processes(client: Any, prefix: str) -> None:
    workers = [spawn(HOLDER, prefix, name, "2.0") for name in ("p1", "p2")]
    time.sleep(1.0)  # both started and waiting (imports take a moment)
    client.set(f"{prefix}:go", "1")
    held = [int(finish(worker)) for worker in workers]
    peak = int(client.get(f"{prefix}:peak"))
    assert peak <= 2
    assert peak == 2  # six contenders really did compete for the two slots
    assert all(count > 10 for count in held), held  # both processes made progress
    assert client.zcard(f"{prefix}:slots:{TENANT.value}") == 0  # every slot given back


# Counts what a shared bucket admits to this process during the window, with the window's ends.
TAKER = r"""
import sys, time
import redis
from boost_tenancy import TenantId
from boost_tenancy.fairness import RatePolicy, RedisTokenBucketLimiter

url, prefix, duration = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = redis.Redis.from_url(url)
limiter = RedisTokenBucketLimiter(client, RatePolicy(rate_per_s=20, burst_s=0.5), prefix=prefix)
tenant = TenantId("org-shared")
while not client.exists(prefix + ":go"):
    time.sleep(0.002)
first = time.time()
deadline = time.monotonic() + duration
admitted = 0
last = first
while time.monotonic() < deadline:
    if limiter.take(tenant).admitted:
        admitted += 1
    last = time.time()
    time.sleep(0.002)
print(admitted, first, last)
"""


def test_token_bucket_admits_the_configured_rate_shared_by_two_processes(
    client: Any, prefix: str
) -> None:
    workers = [spawn(TAKER, prefix, "2.0") for _ in range(2)]
    time.sleep(1.0)
    client.set(f"{prefix}:go", "1")
    results = [finish(worker).split() for worker in workers]
    admitted = [int(result[0]) for result in results]
    window = max(float(r[2]) for r in results) - min(float(r[1]) for r in results)
    expected = 10 + 20 * window  # capacity 20/s x 0.5 s, then 20/s for the window
    assert abs(sum(admitted) - expected) <= 3, (admitted, window)
    assert all(count > 0 for count in admitted)  # both processes drew from the one bucket


# Takes both slots and keeps them (auto-renewed leases of 1 s) until it is killed.
CRASHER = r"""
import sys, time
import redis
from boost_tenancy import TenantId
from boost_tenancy.fairness import RedisConcurrencyLimiter

url, prefix = sys.argv[1], sys.argv[2]
limiter = RedisConcurrencyLimiter(redis.Redis.from_url(url), prefix=prefix, lease_s=1.0)
tenant = TenantId("org-shared")
assert limiter.try_acquire(tenant, "crash-1", 2) and limiter.try_acquire(tenant, "crash-2", 2)
print("held", flush=True)
time.sleep(60)
"""


def test_lease_expiry_frees_the_slots_of_a_killed_holder(client: Any, prefix: str) -> None:
    crasher = spawn(CRASHER, prefix)
    try:
        assert crasher.stdout is not None
        assert crasher.stdout.readline().strip() == "held"
        limiter = RedisConcurrencyLimiter(client, prefix=prefix, lease_s=1.0)
        assert not limiter.try_acquire(TENANT, "survivor", 2)
        time.sleep(2.0)  # two leases long: renewal keeps a live holder's slots
        assert not limiter.try_acquire(TENANT, "survivor", 2)
        crasher.send_signal(signal.SIGKILL)
        crasher.wait(timeout=10)
        killed_at = time.monotonic()
        assert wait_until(lambda: limiter.try_acquire(TENANT, "survivor", 2), timeout=5)
        assert time.monotonic() - killed_at <= 2.0
        assert limiter.try_acquire(TENANT, "second", 2)
        limiter.release(TENANT, "survivor")
        limiter.release(TENANT, "second")
        limiter.close()
    finally:
        if crasher.poll() is None:
            crasher.kill()
            crasher.wait(timeout=10)
        if crasher.stdout is not None:
            crasher.stdout.close()
        if crasher.stderr is not None:
            crasher.stderr.close()


def test_redis_slots_are_idempotent_per_message_id(client: Any, prefix: str) -> None:
    limiter = RedisConcurrencyLimiter(client, prefix=prefix, auto_renew=False)
    assert limiter.try_acquire(TENANT, "m-1", 1)
    assert limiter.try_acquire(TENANT, "m-1", 1)
    assert not limiter.try_acquire(TENANT, "m-2", 1)
    assert limiter.renew(TENANT, "m-1")
    assert not limiter.renew(TENANT, "m-2")
    limiter.release(TENANT, "m-1")
    limiter.release(TENANT, "m-1")
    limiter.release(TENANT, "unknown")
    assert limiter.try_acquire(TENANT, "m-2", 1)
    with pytest.raises(ConfigError, match="limit"):
        limiter.try_acquire(TENANT, "m-3", 0)


def test_a_slot_whose_release_failed_is_released_before_the_tenants_next_acquire(
    client: Any, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release made while the breaker was open failed at once, and the slot stayed in Redis
    for the rest of its lease: a tenant limited to one slot could run nothing anywhere for up
    to five minutes after a two-second Redis hiccup."""
    limiter = RedisConcurrencyLimiter(client, prefix=prefix, auto_renew=False)
    assert limiter.try_acquire(TENANT, "m-1", 1)
    real_call = limiter.breaker.call

    def open_breaker(*_args: Any, **_kwargs: Any) -> Any:
        raise CircuitOpenError("redis", "a timeout", 5.0)

    monkeypatch.setattr(limiter.breaker, "call", open_breaker)
    with pytest.raises(CircuitOpenError):
        limiter.release(TENANT, "m-1")
    monkeypatch.setattr(limiter.breaker, "call", real_call)
    assert client.zrange(limiter.key(TENANT), 0, -1) == [b"m-1"], "still held in Redis"
    assert limiter.try_acquire(TENANT, "m-2", 1), "m-1 released first"
    assert client.zrange(limiter.key(TENANT), 0, -1) == [b"m-2"]


def test_redis_bucket_deficit_reconfiguration_and_expiry(client: Any, prefix: str) -> None:
    limiter = RedisTokenBucketLimiter(
        client, RatePolicy(rate_per_s=2, burst_s=5), prefix=prefix, idle_s=60
    )
    assert limiter.take(TENANT, n=25).admitted  # capacity 10, admitted into a deficit of 15
    denied = limiter.take(TENANT)
    assert not denied.admitted
    assert denied.retry_after_s == pytest.approx(8.0, abs=0.05)
    # A bucket in debt outlives idle_s until refilled: 60 s + (10 - -15) / 2 s.
    ttl_ms = client.pttl(limiter.key(TENANT))
    assert 72_000 < ttl_ms <= 72_500
    # Raising the tenant's rate applies on the next take.
    limiter.set_policy(RatePolicy(rate_per_s=1000, burst_s=1), tenant=TENANT)
    time.sleep(0.05)  # 50 units at 1000/s repay the 15 and more
    assert limiter.take(TENANT).admitted
    # Unlimited never touches Redis.
    other = TenantId("org-other")
    limiter.set_policy(RatePolicy(rate_per_s=0), tenant=other)
    assert all(limiter.take(other).admitted for _ in range(100))
    assert not client.exists(limiter.key(other))


# -- an unreachable Redis: the circuit breaker ----------------------------------------------------
@pytest.fixture
def switch() -> Iterator[RedisSwitch]:
    """Starts hanging; the Redis behind it is BOOST_TEST_REDIS_URL."""
    try:
        import redis  # noqa: F401
    except ImportError:
        unavailable("the redis package is not installed (pip install 'boost-tenancy[redis]')")
    made = RedisSwitch(REDIS_URL)
    yield made
    made.close()


class Built(NamedTuple):
    gate: FairnessGate
    slots: RedisConcurrencyLimiter
    rates: RedisTokenBucketLimiter
    events: Events


GateFactory = Callable[[str, str, RatePolicy, BreakerPolicy], Built]


@pytest.fixture
def gate_through() -> Iterator[GateFactory]:
    """Builds a gate (not started) on both Redis limiters of one client (production timeouts),
    sharing one breaker, every tenant limited to one slot; closes it after the test."""
    gates: list[FairnessGate] = []

    def build(url: str, prefix: str, rate: RatePolicy, policy: BreakerPolicy) -> Built:
        client = redis_client(url)
        breaker = redis_breaker(policy)
        slots = RedisConcurrencyLimiter(client, prefix=prefix, breaker=breaker)
        rates = RedisTokenBucketLimiter(client, rate, prefix=prefix, breaker=breaker)
        events = Events()
        gate = FairnessGate(
            concurrency=slots, limit_of=lambda _tenant: 1, rates=rates, on_event=events
        )
        gates.append(gate)
        return Built(gate, slots, rates, events)

    yield build
    for gate in gates:
        gate.close()


def delivery(message_id: str) -> Delivery:
    return Delivery(
        queue="cmd.test",
        body="{}",
        properties={"boostMessageId": message_id},
        correlation_id=message_id,
        redelivered=False,
        subscription_id="sub-1",
    )


def message_id(admitted: Admitted) -> str:
    return admitted.delivery.properties["boostMessageId"]


def test_hung_redis_admits_every_message_and_costs_one_timeout_per_cooldown(
    switch: RedisSwitch, gate_through: GateFactory
) -> None:
    """Without the breaker, each of 200 messages pays the 2 s socket timeout on acquire, take and
    release, one after another on the gate's admitter thread (20 minutes: 200 x 3 x 2 s); with
    it, the first call times out and opens it, and every later call is refused at once until the
    next probe."""
    prefix = f"boost-test:{uuid.uuid4().hex[:12]}"  # nothing reaches Redis: no keys to delete
    gate, slots, _rates, events = gate_through(
        switch.url, prefix, RatePolicy(rate_per_s=1, burst_s=1), BreakerPolicy(cooldown_s=1.0)
    )
    admitted: list[Admitted] = []  # appended on the admitter thread only: in admission order
    work: queue_mod.SimpleQueue[tuple[TenantId, Admitted]] = queue_mod.SimpleQueue()
    handled: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def admit(tenant: TenantId, item: Admitted) -> None:
        admitted.append(item)
        work.put((tenant, item))

    def worker() -> None:
        while not stop.is_set():
            try:
                tenant, item = work.get(timeout=0.05)
            except queue_mod.Empty:
                continue
            time.sleep(0.05)  # a handler's worth of time
            with lock:
                handled.append(message_id(item))
            gate.done(tenant, item.slot)  # the slot goes back through the (hung) Redis

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    started = time.monotonic()
    with capture_logs() as logs:
        gate.start(admit)
        for thread in workers:
            thread.start()
        for index in range(200):
            gate.offer(TENANT, delivery(f"m-{index}"))
            time.sleep(0.02)  # a stream over 4 s, so cool-downs end mid-run
        assert wait_until(lambda: len(handled) == 200, timeout=60), len(handled)
        stop.set()
        for thread in workers:
            thread.join(5)
        gate.close()  # the admitter gives back the last slots, then stops
    took = time.monotonic() - started
    # Failing open: over the rate (1/s) and the slot limit (1), every message admitted, in order.
    assert [message_id(item) for item in admitted] == [f"m-{index}" for index in range(200)]
    assert not any(item.expired for item in admitted)
    assert events.counts == {(TENANT.value, "admitted"): 200}
    assert gate.held == 0
    assert took < 20, took
    # The first call, then one probe per cool-down (1 s, 2 s, 4 s, ...), each of which first
    # waits out the 2 s timeout: at most one connection per 3 s after the first.
    assert 1 <= switch.accepted <= 1 + math.ceil(took / 3), (switch.accepted, took)
    assert slots.breaker.phase is not Phase.CLOSED
    kinds = Counter(entry["event"] for entry in logs)
    assert kinds["fairness_circuit_opened"] == 1
    assert kinds["fairness_circuit_closed"] == 0
    # The gate's own warnings stay at one per kind per minute.
    assert kinds["fairness_concurrency_unavailable"] == 1
    assert kinds["fairness_rate_unavailable"] == 1
    assert kinds["fairness_release_failed"] <= 1


def test_limits_are_enforced_again_once_redis_answers_after_the_cooldown(
    client: Any, switch: RedisSwitch, prefix: str, gate_through: GateFactory
) -> None:
    cooldown = 3.0
    gate, slots, rates, events = gate_through(
        switch.url,
        prefix,
        RatePolicy(rate_per_s=0.1, burst_s=20),
        BreakerPolicy(cooldown_s=cooldown),
    )
    admissions = Admissions()
    gate.start(admissions)
    # Hung: the first delivery waits out one timeout and opens the breaker; all are admitted,
    # though the rate's capacity is 2 and none of the slots (limit 1) has been given back.
    started = time.monotonic()
    for index in range(10):
        gate.offer(TENANT, delivery(f"hung-{index}"))
    hung = [admissions.next()[1] for _ in range(10)]
    assert [message_id(item) for item in hung] == [f"hung-{index}" for index in range(10)]
    assert time.monotonic() - started < 5
    opened_at = time.monotonic()
    # Redis answers again, but the breaker keeps refusing until the cool-down is over: the
    # slots go back and the next delivery is admitted without a connection.
    switch.forward()
    accepted = switch.accepted
    for item in hung:
        gate.done(TENANT, item.slot)
    gate.offer(TENANT, delivery("cooling"))
    _, cooling = admissions.next(timeout=1.0)
    assert message_id(cooling) == "cooling"
    gate.done(TENANT, cooling.slot)
    assert switch.accepted == accepted  # refused without a connection
    assert time.monotonic() - opened_at < cooldown  # (the assertions above were in the window)
    assert events.of(TENANT, "admitted") == 11
    time.sleep(cooldown)
    # The probe closes the breaker: the rate (capacity 2) and the slot limit (1) hold again.
    gate.offer(TENANT, delivery("back-1"))
    _, back_1 = admissions.next()
    assert message_id(back_1) == "back-1"
    assert slots.breaker.phase is Phase.CLOSED
    assert client.zcard(slots.key(TENANT)) == 1  # its slot is held in Redis now
    gate.done(TENANT, back_1.slot)
    gate.offer(TENANT, delivery("back-2"))
    _, back_2 = admissions.next()
    assert message_id(back_2) == "back-2"
    gate.done(TENANT, back_2.slot)
    # Over the rate: held, not re-sent; the next unit comes in about 10 s at 0.1/s.
    gate.offer(TENANT, delivery("back-3"))
    assert wait_until(lambda: events.of(TENANT, "held_rate") == 1, timeout=5)
    assert admissions.none_within(2.0)
    assert float(client.hget(rates.key(TENANT), "tokens")) < 1  # the bucket really is empty
    # Another tenant, its one slot taken by another holder (another process): held, and polled
    # until the holder gives it back.
    other = TenantId("org-other")
    holder = RedisConcurrencyLimiter(client, prefix=prefix, auto_renew=False)
    assert holder.try_acquire(other, "holder", 1)
    gate.offer(other, delivery("other-1"))
    assert wait_until(lambda: events.of(other, "held_concurrency") == 1, timeout=5)
    assert admissions.none_within(1.5)  # several polls, each finding the slot taken
    assert events.of(other, "held_concurrency") == 1  # once per held delivery, not per poll
    holder.release(other, "holder")
    tenant, other_1 = admissions.next()  # the gate polls at most 1 s apart
    assert (tenant, message_id(other_1)) == (other, "other-1")
    assert other_1.slot is not None and not other_1.expired
    gate.done(other, other_1.slot)
    # back-3 is still held: the rate has not allowed it yet.
    assert gate.held == 1
    assert events.of(TENANT, "held_rate") == 1
    assert events.of(TENANT, "admitted") == 13
    assert events.of(TENANT, "held_concurrency") == 0
