"""Publishing buckets shared through Redis (quotas/shared.py): two guards standing for two
producing processes admit a tenant's rate once, a publish takes all its buckets or none in Redis,
other tenants and run-time policies behave as in one process, and a Redis that is down or hangs
costs one socket timeout, then the process's own buckets decide, logged once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from boost_tenancy import (
    ConfigError,
    PublishGuard,
    PublishLimits,
    PublishRateExceededError,
    TenantId,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.fairness.breaker import BreakerPolicy, Phase
from boost_tenancy.fairness.redis_backend import redis_breaker, redis_client
from boost_tenancy.messages import WireMessage, build_message
from boost_tenancy.quotas.guard import wire_size
from boost_tenancy.quotas.policy import TenantPolicy
from boost_tenancy.quotas.shared import RedisPublishBuckets
from tests.redis_support import REDIS_URL, RedisSwitch, connect_redis, fresh_prefix

A = TenantId("org-a")
B = TenantId("org-b")
QUEUE = "orders"


@pytest.fixture
def client() -> Any:
    return connect_redis()


@pytest.fixture
def prefix(client: Any) -> Iterator[str]:
    yield from fresh_prefix(client)


def wire(tenant: TenantId, pad: int = 0) -> WireMessage:
    return build_message(tenant, {"pad": "x" * pad}).to_wire()


def admitted(guard: PublishGuard, tenant: TenantId, message: WireMessage) -> bool:
    try:
        guard.check(tenant, QUEUE, (message,))
    except PublishRateExceededError:
        return False
    return True


def shared_guard(client: Any, prefix: str, limits: PublishLimits, **kwargs: Any) -> PublishGuard:
    return PublishGuard(limits, shared=RedisPublishBuckets(client, prefix=prefix), **kwargs)


@pytest.mark.redis
def test_two_guards_sharing_redis_admit_a_tenants_rate_once_not_twice(
    client: Any, prefix: str
) -> None:
    """Two guards (two processes) publishing as fast as they can for a second admit one bucket's
    worth: capacity plus rate x elapsed, where guards of their own would admit twice that."""
    limits = PublishLimits(messages_per_s=50, burst_s=0.2)  # capacity 10
    first, second = (shared_guard(client, prefix, limits) for _ in range(2))
    message = wire(A)
    counts = [0, 0]
    started = time.monotonic()
    while time.monotonic() - started < 1.0:
        for index, guard in enumerate((first, second)):
            counts[index] += admitted(guard, A, message)
    elapsed = time.monotonic() - started
    ceiling = 10 + 50 * elapsed
    assert sum(counts) <= ceiling + 1, (counts, elapsed)
    assert sum(counts) >= 0.8 * ceiling, (counts, elapsed)
    assert min(counts) > 0  # both took from the one bucket


@pytest.mark.redis
def test_a_publish_refused_for_its_bytes_takes_no_message_token_in_redis(
    client: Any, prefix: str
) -> None:
    """All or nothing across the four buckets of a publish (the tenant's and the queue's,
    messages and bytes): refused for the tenant's bytes, every bucket in Redis is unchanged."""
    message = wire(A, pad=40)
    size = wire_size(message)
    # Room for one message's bytes, not two; the message buckets and the queue's are ample.
    limits = PublishLimits(messages_per_s=100, bytes_per_s=size * 1.5 / 10)
    guard = shared_guard(client, prefix, limits)
    guard.set_limits(PublishLimits(messages_per_s=100, bytes_per_s=1e6), queue=QUEUE)
    shared = RedisPublishBuckets(client, prefix=prefix)
    keys = [
        shared.key(A.value, meter, queue)
        for queue in (None, QUEUE)
        for meter in ("messages", "bytes")
    ]
    assert admitted(guard, A, message)
    before = [client.hgetall(key) for key in keys]
    assert all(before)  # the first publish took from all four
    with pytest.raises(PublishRateExceededError) as refused:
        guard.check(A, QUEUE, (message,))
    assert refused.value.retry_after_s > 0
    assert [client.hgetall(key) for key in keys] == before
    assert float(before[0][b"tokens"]) == pytest.approx(999, abs=0.5)


@pytest.mark.redis
def test_another_tenant_is_unaffected_by_one_at_its_limit(client: Any, prefix: str) -> None:
    limits = PublishLimits(messages_per_s=1, burst_s=5)  # capacity 5
    first, second = (shared_guard(client, prefix, limits) for _ in range(2))
    message_a, message_b = wire(A), wire(B)
    assert sum(admitted(g, A, message_a) for g in (first, second) for _ in range(5)) == 5
    assert sum(admitted(g, B, message_b) for g in (first, second) for _ in range(3)) == 5


@pytest.mark.redis
def test_a_run_time_policy_change_applies_to_the_shared_buckets(client: Any, prefix: str) -> None:
    """A tenant's policy lowered at run time is applied on its next publish in every process,
    its balance in Redis clamped to the new capacity (not refilled); other tenants keep theirs."""
    policies: dict[TenantId, TenantPolicy] = {}

    def policy_of(tenant: TenantId) -> TenantPolicy:
        return policies.get(tenant, TenantPolicy())

    limits = PublishLimits(messages_per_s=100, burst_s=1)  # capacity 100
    first, second = (shared_guard(client, prefix, limits, policy_of=policy_of) for _ in range(2))
    message = wire(A)
    assert all(admitted(first, A, message) for _ in range(10))
    policies[A] = TenantPolicy(messages_per_s=0.5, burst_s=6)  # capacity 3, 0.5 a second
    assert [admitted(g, A, message) for g in (first, second, first, second)] == [
        True,
        True,
        True,
        False,
    ]
    assert all(admitted(second, B, wire(B)) for _ in range(20))


@pytest.mark.redis
def test_an_unreachable_redis_falls_back_to_the_process_buckets_logged_once(
    client: Any,
) -> None:
    """A closed port: the first publish pays one failed connect, then the breaker refuses at
    once; the process's own buckets decide meanwhile, and the outage is logged once."""
    closed = redis_client("redis://127.0.0.1:1/0", timeout_s=0.5)
    guard = PublishGuard(
        PublishLimits(messages_per_s=1, burst_s=10),  # capacity 10, per process now
        shared=RedisPublishBuckets(closed, breaker=redis_breaker(BreakerPolicy(cooldown_s=30))),
    )
    message = wire(A)
    with capture_logs() as logs:
        started = time.monotonic()
        results = [admitted(guard, A, message) for _ in range(50)]
        took = time.monotonic() - started
    assert took < 1.5
    assert results == [True] * 10 + [False] * 40
    events = [entry["event"] for entry in logs]
    assert events.count("publish_limits_shared_unavailable") == 1
    assert events.count("fairness_circuit_opened") == 1


@pytest.mark.redis
def test_a_hanging_redis_costs_one_socket_timeout_then_publishes_proceed(
    client: Any, prefix: str
) -> None:
    """A Redis that accepts and never answers: one publish waits the socket timeout, the rest
    go at once; when Redis answers again the shared buckets are back, logged once each way."""
    silent = RedisSwitch(REDIS_URL)  # never told to forward: a Redis that hangs
    try:
        breaker = redis_breaker(BreakerPolicy(cooldown_s=0.5, max_cooldown_s=0.5))
        hung = RedisPublishBuckets(
            redis_client(silent.url, timeout_s=0.3), prefix=prefix, breaker=breaker
        )
        guard = PublishGuard(PublishLimits(messages_per_s=1000), shared=hung)
        message = wire(A)
        with capture_logs() as logs:
            waits = []
            for _ in range(200):
                started = time.monotonic()
                assert admitted(guard, A, message)
                waits.append(time.monotonic() - started)
        assert max(waits) < 0.3 + 0.5
        assert sum(waits) < 1.0
        assert silent.accepted == 1
        events = [entry["event"] for entry in logs]
        assert events.count("publish_limits_shared_unavailable") == 1
        assert events.count("fairness_circuit_opened") == 1
    finally:
        silent.close()
    # Redis back (the same breaker, a client of the real Redis): the next probe closes it.
    back = RedisPublishBuckets(client, prefix=prefix, breaker=breaker)
    guard._shared = back  # the same guard, its Redis reachable again
    time.sleep(0.6)
    with capture_logs() as logs:
        assert admitted(guard, A, message)
    assert breaker.phase is Phase.CLOSED
    assert [e["event"] for e in logs].count("publish_limits_shared_restored") == 1
    assert client.exists(back.key(A.value, "messages"))


@pytest.mark.redis
def test_the_wiring_builds_guards_on_the_shared_redis(client: Any, prefix: str) -> None:
    """BOOST_PUBLISH_REDIS_URL through FairnessWiring (runners): two processes' guards share."""
    wirings = [FairnessWiring.build(None, workers=2, publish_redis_url=REDIS_URL) for _ in range(2)]
    try:
        limits = PublishLimits(messages_per_s=1, burst_s=3)
        guards = [w.publish_guard(limits) for w in wirings]
        tenant = TenantId(f"org-{prefix.rsplit(':', 1)[1]}")
        message = wire(tenant)
        assert sum(admitted(g, tenant, message) for g in guards for _ in range(3)) == 3
    finally:
        for wiring in wirings:
            buckets = wiring.publish_buckets
            assert buckets is not None
            for key in client.scan_iter(match=buckets.key(tenant.value, "*")):
                client.delete(key)
            wiring.close()


# -- configuration ---------------------------------------------------------------------------------
def test_the_publish_redis_url_is_read_and_allowed_without_any_limit() -> None:
    settings = AppSettings.from_env({"BOOST_PUBLISH_REDIS_URL": " redis://cache:6379/2 "})
    assert settings.publish_redis_url == "redis://cache:6379/2"
    assert settings.publish.unlimited
    assert AppSettings.from_env({}).publish_redis_url == ""


@pytest.mark.parametrize(
    "url", ["cache:6379", "http://cache:6379/0", "redis://:pw@cache:notaport/0", "redis:///0"]
)
def test_an_invalid_publish_redis_url_stops_start_up_naming_the_variable(url: str) -> None:
    with pytest.raises(ConfigError, match="BOOST_PUBLISH_REDIS_URL") as refused:
        AppSettings.from_env({"BOOST_PUBLISH_REDIS_URL": url})
    assert "pw" not in str(refused.value)
