"""The circuit breaker as a state machine on a fake clock (closed, open, one probe, closed again),
its thread safety while half-open, and the Redis limiters' use of it (lease renewer included)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from structlog.testing import capture_logs

from boost_tenancy import ConfigError, TenantId
from boost_tenancy.fairness.breaker import (
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    CircuitOpenError,
    Decision,
    Phase,
    admit,
    settle,
)
from tests.conftest import wait_until

try:
    import redis.exceptions as redis_exceptions
except ImportError:  # the breaker's own tests need no redis package
    redis_exceptions = None

needs_redis = pytest.mark.skipif(redis_exceptions is None, reason="the redis package is absent")

TENANT = TenantId("org-breaker")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.reads += 1
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class Backend:
    """A store that answers "ok" while up and raises ConnectionError while down, counting calls."""

    def __init__(self) -> None:
        self.up = True
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            self.calls += 1
        if not self.up:
            raise ConnectionError("store unreachable")
        return "ok"


def breaker(clock: FakeClock, **policy: float) -> CircuitBreaker:
    return CircuitBreaker("store", policy=BreakerPolicy(**policy), clock=clock)


def trip(subject: CircuitBreaker, backend: Backend) -> None:
    backend.up = False
    with pytest.raises(ConnectionError):
        subject.call(backend)
    assert subject.phase is Phase.OPEN


def test_closed_breaker_passes_calls_arguments_and_results_through() -> None:
    subject = breaker(FakeClock())
    assert subject.call(lambda a, *, b: a + b, 2, b=3) == 5
    assert subject.phase is Phase.CLOSED


def test_one_failure_opens_and_open_calls_fail_fast_without_calling_the_store() -> None:
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock, cooldown_s=5.0)
    trip(subject, backend)
    clock.advance(4.9)
    for _ in range(100):
        with pytest.raises(CircuitOpenError) as refused:
            subject.call(backend)
    assert backend.calls == 1  # only the call that failed
    assert refused.value.probe_in_s == pytest.approx(0.1)
    assert "ConnectionError: store unreachable" in str(refused.value)


def test_after_the_cooldown_one_probe_goes_through_and_its_success_closes() -> None:
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock, cooldown_s=5.0)
    trip(subject, backend)
    backend.up = True
    clock.advance(5.0)
    assert subject.call(backend) == "ok"  # the probe
    assert subject.phase is Phase.CLOSED
    assert [subject.call(backend) for _ in range(3)] == ["ok"] * 3
    assert backend.calls == 5


def test_a_failed_probe_reopens_for_a_growing_capped_cooldown() -> None:
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock, cooldown_s=5.0, growth=2.0, max_cooldown_s=12.0)
    trip(subject, backend)
    for cooldown in (5.0, 10.0, 12.0, 12.0):
        clock.advance(cooldown - 0.25)
        with pytest.raises(CircuitOpenError):
            subject.call(backend)
        clock.advance(0.25)
        calls = backend.calls
        with pytest.raises(ConnectionError):
            subject.call(backend)  # the probe reaches the store and fails
        assert backend.calls == calls + 1
        assert subject.phase is Phase.OPEN
    # Back up: the probe closes, and the next outage starts again from the base cool-down.
    backend.up = True
    clock.advance(12.0)
    assert subject.call(backend) == "ok"
    trip(subject, backend)
    clock.advance(5.0)
    with pytest.raises(ConnectionError):
        subject.call(backend)


def test_an_answer_that_is_an_error_is_no_outage() -> None:
    """Only the failure types open the breaker; any other exception proves the store answered."""
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock)

    def refused_by_store() -> str:
        raise ValueError("WRONGTYPE")

    with pytest.raises(ValueError):
        subject.call(refused_by_store)
    assert subject.phase is Phase.CLOSED
    trip(subject, backend)
    clock.advance(5.0)
    with pytest.raises(ValueError):
        subject.call(refused_by_store)  # the probe got an answer
    assert subject.phase is Phase.CLOSED


def test_while_half_open_only_one_of_many_threads_probes() -> None:
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock, cooldown_s=5.0)
    trip(subject, backend)
    clock.advance(5.0)
    entered, release = threading.Event(), threading.Event()
    probes = Counter[str]()
    outcomes = Counter[str]()
    lock = threading.Lock()

    def slow_store() -> str:
        with lock:
            probes["calls"] += 1
        entered.set()
        release.wait(10)
        return "ok"

    start = threading.Barrier(17)

    def worker() -> None:
        start.wait()
        try:
            subject.call(slow_store)
            outcome = "ran"
        except CircuitOpenError:
            outcome = "failed fast"
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    start.wait()
    assert entered.wait(5)
    # Every thread but the probe has returned while the probe is still in the store.
    assert wait_until(lambda: outcomes["failed fast"] == 15, timeout=5)
    assert subject.phase is Phase.HALF_OPEN
    release.set()
    for thread in threads:
        thread.join(5)
    assert probes["calls"] == 1
    assert outcomes == {"ran": 1, "failed fast": 15}
    assert subject.phase is Phase.CLOSED


def test_calls_started_before_the_outage_neither_extend_nor_end_it() -> None:
    """A call admitted while closed that ends after the breaker opened changes nothing."""
    policy = BreakerPolicy(cooldown_s=5.0)
    opened = settle(BreakerState(), policy, 10.0, probe=False, reachable=False)
    assert opened == BreakerState(phase=Phase.OPEN, retry_at=15.0, cooldown_s=5.0)
    assert settle(opened, policy, 14.0, probe=False, reachable=False) == opened
    assert settle(opened, policy, 14.0, probe=False, reachable=True) == opened
    half_open, decision = admit(opened, 15.0)
    assert (half_open.phase, decision) == (Phase.HALF_OPEN, Decision.PROBE)
    assert admit(half_open, 15.5) == (half_open, Decision.FAIL_FAST)
    assert settle(half_open, policy, 16.0, probe=False, reachable=True) == half_open
    assert settle(half_open, policy, 16.0, probe=True, reachable=True) == BreakerState()


def test_an_interrupted_probe_lets_the_next_call_probe() -> None:
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock)
    trip(subject, backend)
    clock.advance(5.0)

    def interrupted() -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        subject.call(interrupted)
    backend.up = True
    assert subject.call(backend) == "ok"
    assert subject.phase is Phase.CLOSED


def test_state_changes_are_logged_once_each_and_fast_failures_not_at_all() -> None:
    clock, backend = FakeClock(), Backend()
    subject = breaker(clock, cooldown_s=5.0)
    with capture_logs() as logs:
        trip(subject, backend)
        for _ in range(500):
            with pytest.raises(CircuitOpenError):
                subject.call(backend)
        clock.advance(5.0)
        with pytest.raises(ConnectionError):
            subject.call(backend)
        backend.up = True
        clock.advance(10.0)
        subject.call(backend)
    assert [(entry["event"], entry["log_level"]) for entry in logs] == [
        ("fairness_circuit_opened", "warning"),
        ("fairness_circuit_probe_failed", "info"),
        ("fairness_circuit_closed", "info"),
    ]
    assert logs[0]["error"] == "store unreachable"
    assert logs[0]["cooldown_s"] == 5.0
    assert logs[1]["cooldown_s"] == 10.0
    assert logs[2]["failed_fast"] == 500
    assert logs[2]["open_for_s"] == 15.0


@pytest.mark.parametrize(
    "fields",
    [
        {"cooldown_s": 0},
        {"cooldown_s": float("nan")},
        {"cooldown_s": 10, "max_cooldown_s": 5},
        {"growth": 0.5},
        {"growth": True},
    ],
)
def test_bad_policies_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        BreakerPolicy(**fields)


# -- the Redis limiters ---------------------------------------------------------------------------
class HungRedis:
    """Stands in for redis.Redis: scripts answer 1 while up, and time out while down."""

    def __init__(self) -> None:
        self.up = True
        self.calls = Counter[str]()
        self._lock = threading.Lock()

    def register_script(self, lua: str) -> Any:
        name = "renew" if "renewed" in lua else "take" if "capacity" in lua else "acquire"

        def script(*, keys: list[str], args: list[Any]) -> Any:
            return self._answer(name, [1, "0"] if name == "take" else 1)

        return script

    def zrem(self, key: str, *members: str) -> int:
        return int(self._answer("zrem", len(members)))

    def _answer(self, name: str, value: Any) -> Any:
        with self._lock:
            self.calls[name] += 1
        if not self.up:
            raise redis_exceptions.TimeoutError("Timeout reading from socket")
        return value


@needs_redis
def test_redis_breaker_opens_on_timeouts_and_connection_errors_only() -> None:
    from boost_tenancy.fairness.redis_backend import redis_breaker

    clock = FakeClock()
    for error in (
        redis_exceptions.TimeoutError("Timeout reading from socket"),
        redis_exceptions.ConnectionError("Connection refused"),
        redis_exceptions.BusyLoadingError("loading"),
    ):
        subject = redis_breaker(clock=clock)

        def fail(error: Exception = error) -> None:
            raise error

        with pytest.raises(type(error)):
            subject.call(fail)
        assert subject.phase is Phase.OPEN, error
    subject = redis_breaker(clock=clock)

    def script_error() -> None:
        raise redis_exceptions.ResponseError("ERR user_script:1: bad")

    with pytest.raises(redis_exceptions.ResponseError):
        subject.call(script_error)
    assert subject.phase is Phase.CLOSED


@needs_redis
def test_both_limiters_of_a_client_share_one_breaker_and_fail_fast_together() -> None:
    from boost_tenancy.fairness import RatePolicy
    from boost_tenancy.fairness.redis_backend import (
        RedisConcurrencyLimiter,
        RedisTokenBucketLimiter,
        redis_breaker,
    )

    clock, redis = FakeClock(), HungRedis()
    shared = redis_breaker(BreakerPolicy(cooldown_s=5.0), clock=clock)
    slots = RedisConcurrencyLimiter(redis, auto_renew=False, breaker=shared)  # type: ignore[arg-type]
    rates = RedisTokenBucketLimiter(redis, RatePolicy(rate_per_s=1), breaker=shared)  # type: ignore[arg-type]
    assert slots.breaker is rates.breaker is shared
    redis.up = False
    with pytest.raises(redis_exceptions.TimeoutError):
        slots.try_acquire(TENANT, "m-1", 1)
    for index in range(50):
        with pytest.raises(CircuitOpenError):
            slots.try_acquire(TENANT, f"m-{index}", 1)
        with pytest.raises(CircuitOpenError):
            rates.take(TENANT)
        with pytest.raises(CircuitOpenError):
            slots.release(TENANT, f"m-{index}")
    assert redis.calls == {"acquire": 1}
    # The limit is checked before the breaker: a bad limit stays a configuration error.
    with pytest.raises(ConfigError):
        slots.try_acquire(TENANT, "m-x", 0)
    # Redis back and the cool-down over: the probe closes the breaker for both limiters.
    redis.up = True
    clock.advance(5.0)
    assert rates.take(TENANT).admitted
    assert slots.try_acquire(TENANT, "m-1", 1)
    # The 50 releases refused while the breaker was open go first, in one call.
    assert redis.calls["zrem"] == 1
    assert shared.phase is Phase.CLOSED
    # Each limiter alone gets a breaker of its own.
    assert RedisTokenBucketLimiter(redis).breaker is not shared  # type: ignore[arg-type]


@needs_redis
def test_lease_renewer_goes_through_the_breaker_and_never_spins() -> None:
    from boost_tenancy.fairness.redis_backend import RedisConcurrencyLimiter, redis_breaker

    clock, redis = FakeClock(), HungRedis()
    limiter = RedisConcurrencyLimiter(
        redis,  # type: ignore[arg-type]
        renew_every_s=0.01,
        breaker=redis_breaker(BreakerPolicy(cooldown_s=5.0), clock=clock),
    )
    try:
        assert limiter.try_acquire(TENANT, "m-1", 1)  # starts the renewer
        assert wait_until(lambda: redis.calls["renew"] >= 2, timeout=5)
        redis.up = False
        assert wait_until(lambda: limiter.breaker.phase is Phase.OPEN, timeout=5)
        with capture_logs() as logs:
            reads = clock.reads
            threading.Event().wait(0.3)  # about 30 renewal passes, all refused by the breaker
            passes = clock.reads - reads
        failed = redis.calls["renew"]
        assert 5 <= passes <= 40, passes  # one pass per renew_every_s: waiting, not spinning
        assert logs == []  # the breaker logged the outage once; refused passes stay quiet
        clock.advance(5.0)  # the next pass is the probe, which fails: one more call
        assert wait_until(lambda: redis.calls["renew"] == failed + 1, timeout=5)
        threading.Event().wait(0.1)
        assert redis.calls["renew"] == failed + 1
        redis.up = True
        clock.advance(10.0)
        assert wait_until(lambda: limiter.breaker.phase is Phase.CLOSED, timeout=5)
    finally:
        limiter.close()
