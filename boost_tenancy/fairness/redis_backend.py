"""Cluster-wide fairness limits in Redis: leased concurrency slots and shared token buckets.

Each check is one Lua script (atomic in Redis) timed by the Redis server's clock, not the hosts'.
Every call goes through a circuit breaker, so an unreachable Redis costs one timeout per cool-down.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import structlog

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.breaker import BreakerPolicy, CircuitBreaker, CircuitOpenError
from boost_tenancy.fairness.concurrency import check_limit
from boost_tenancy.fairness.rates import (
    DEFAULT_METER,
    OVERSIZE_MARGIN_S,
    TOKEN_EPSILON,
    UNLIMITED,
    Admission,
    PolicyTable,
    RatePolicy,
    check_idle_s,
    check_units,
)
from boost_tenancy.storage import redact_url
from boost_tenancy.tenancy import TenantId

if TYPE_CHECKING:
    import redis

log = structlog.get_logger("boost_tenancy.fairness")

DEFAULT_PREFIX: Final = "boost:fairness"
DEFAULT_LEASE_S: Final = 300.0

# KEYS[1] the tenant's sorted set (member = message id, score = lease end in server ms);
# ARGV: message id, limit, lease ms. Expired leases (a crashed holder) are dropped first.
_ACQUIRE_LUA: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
"""

# KEYS[1] as above; ARGV: lease ms, then the message ids whose leases are extended (held ones only).
_RENEW_LUA: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) > now then
    redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
    renewed = renewed + 1
  end
end
if renewed > 0 then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return renewed
"""

# The token-bucket arithmetic every bucket script shares, in Lua: a bucket is a hash (tokens, ts in
# server microseconds) and mirrors rates.bucket_step. Numbers are written and returned as strings
# because Redis truncates Lua numbers to integers.
BUCKET_LUA: Final = """
local function server_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The balance at now: a missing bucket is full; min() also clamps a balance down to a capacity
-- lowered since the last take.
local function refilled(key, rate, capacity, now)
  local state = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if tokens == nil or ts == nil then return capacity end
  local elapsed = (now - ts) / 1000000
  if elapsed < 0 then elapsed = 0 end
  return math.min(capacity, tokens + elapsed * rate)
end
-- rates.bucket_step: admitted (1 or 0), the balance after, the retry-after in seconds.
local function step(tokens, rate, capacity, n, eps, margin)
  if tokens + eps >= n then return 1, tokens - n, 0 end
  if n > capacity then
    if tokens > 0 then return 1, tokens - n, 0 end
    return 0, tokens, -tokens / rate + margin
  end
  return 0, tokens, (n - tokens) / rate
end
-- Kept until idle AND refilled: expiring a bucket still in deficit would forgive its debt.
local function store(key, tokens, rate, capacity, now, idle)
  redis.call('HSET', key,
    'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', now))
  local refill_ms = 0
  if tokens < capacity then refill_ms = math.ceil((capacity - tokens) / rate * 1000) end
  redis.call('PEXPIRE', key, idle + refill_ms)
end
"""

# KEYS[1] the bucket hash; ARGV: rate/s, capacity, units, idle ms, epsilon, oversize margin.
_TAKE_LUA: Final = (
    BUCKET_LUA
    + """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local now = server_now_us()
local tokens = refilled(KEYS[1], rate, capacity, now)
local admitted, balance, retry = step(
  tokens, rate, capacity, tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6]))
store(KEYS[1], balance, rate, capacity, now, tonumber(ARGV[4]))
return {admitted, string.format('%.17g', retry)}
"""
)


def redis_client(
    url: str, *, variable: str = "BOOST_REDIS_URL", timeout_s: float = 2.0
) -> redis.Redis:
    """A client for a redis:// or rediss:// URL; needs the `redis` extra. variable names the
    setting the URL came from in errors; timeout_s bounds every connect and every answer."""
    try:
        import redis as redis_mod  # noqa: PLC0415  # optional dependency, imported on use
    except ImportError as exc:
        raise ConfigError(
            f"{variable} needs the redis package; install the `redis` extra "
            "(pip install 'boost-tenancy[redis]')"
        ) from exc
    try:
        return redis_mod.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
    except ValueError as exc:
        raise ConfigError(f"{variable} {redact_url(url)!r} is not a Redis URL: {exc}") from exc


def redis_breaker(
    policy: BreakerPolicy | None = None, *, clock: Callable[[], float] = time.monotonic
) -> CircuitBreaker:
    """A breaker for the limiters of one Redis: pass the same one to both limiters of a client.

    Only connection errors and timeouts open it (Redis unreachable, hung, loading, refusing the
    login); an error Redis answers with (a script error) proves Redis reachable.
    """
    failures: tuple[type[BaseException], ...] = (OSError,)
    try:
        import redis.exceptions as redis_errors  # noqa: PLC0415  # optional dependency
    except ImportError:  # a stand-in client without the redis package: socket errors only
        pass
    else:
        failures = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)
    return CircuitBreaker("redis", failures=failures, policy=policy, clock=clock)


def check_prefix(prefix: object) -> str:
    """A Redis key prefix: a non-empty word."""
    if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
        raise ConfigError(f"Redis key prefix must be a non-empty word, got {prefix!r}")
    return prefix


class RedisConcurrencyLimiter:
    """Slots shared by every process using the same Redis and prefix.

    A slot is a lease of lease_s seconds in the tenant's sorted set, so the slots of a process
    that died expire by themselves. While this process holds slots, a daemon thread renews
    them every renew_every_s (default lease_s / 3); auto_renew=False turns that off (then call
    renew() from long handlers, or keep handlers shorter than the lease).

    Every Redis call goes through `breaker` (share one with the RedisTokenBucketLimiter of the
    same client, see redis_breaker; default: a breaker of this limiter's own). While it is open,
    try_acquire, release, renew and renew_all raise CircuitOpenError at once; callers treat it
    as they treat Redis's own connection errors (the middleware fails open).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        lease_s: float = DEFAULT_LEASE_S,
        auto_renew: bool = True,
        renew_every_s: float | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if not (isinstance(lease_s, int | float) and math.isfinite(lease_s) and lease_s >= 0.001):
            raise ConfigError(f"lease_s must be at least 0.001 seconds, got {lease_s!r}")
        self._client = client
        self._prefix = check_prefix(prefix)
        self._lease_ms = max(1, round(lease_s * 1000))
        every = lease_s / 3 if renew_every_s is None else renew_every_s
        if not (isinstance(every, int | float) and math.isfinite(every) and every > 0):
            raise ConfigError(f"renew_every_s must be a positive number, got {renew_every_s!r}")
        self._renew_every_s: float | None = float(every) if auto_renew else None
        self._acquire = client.register_script(_ACQUIRE_LUA)
        self._renew = client.register_script(_RENEW_LUA)
        self._held: dict[TenantId, set[str]] = {}
        self._unreleased: dict[TenantId, set[str]] = {}
        """Slots whose release failed: removed before the tenant's next acquire, and on renewal."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._breaker = breaker if breaker is not None else redis_breaker()

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    def key(self, tenant: TenantId) -> str:
        """The tenant's Redis key."""
        return f"{self._prefix}:slots:{tenant.value}"

    def try_acquire(self, tenant: TenantId, message_id: str, limit: int) -> bool:
        check_limit(limit)
        self._release_unreleased(tenant)
        result = self._breaker.call(
            self._acquire, keys=[self.key(tenant)], args=[message_id, limit, self._lease_ms]
        )
        acquired = int(result) == 1
        if acquired:
            with self._lock:
                self._held.setdefault(tenant, set()).add(message_id)
                self._start_renewer()
        return acquired

    def release(self, tenant: TenantId, message_id: str) -> None:
        with self._lock:
            held = self._held.get(tenant)
            if held is not None:
                held.discard(message_id)
                if not held:
                    del self._held[tenant]
        try:
            self._breaker.call(self._client.zrem, self.key(tenant), message_id)
        except Exception:
            # Left in Redis it counts against the tenant for its lease: retried (_unreleased).
            with self._lock:
                self._unreleased.setdefault(tenant, set()).add(message_id)
                self._start_renewer()
            raise

    def _release_unreleased(self, tenant: TenantId | None = None) -> None:
        """Remove the slots whose release failed, of tenant (None: of every tenant)."""
        if not self._unreleased:
            return  # the usual case, on every acquire: no lock taken
        for owner in list(self._unreleased) if tenant is None else [tenant]:
            with self._lock:
                ids = self._unreleased.pop(owner, set())
            try:
                if ids:
                    self._breaker.call(self._client.zrem, self.key(owner), *ids)
            except Exception:
                with self._lock:  # tried again on the next acquire or renewal pass
                    self._unreleased.setdefault(owner, set()).update(ids)
                raise

    def renew(self, tenant: TenantId, message_id: str) -> bool:
        """Extend one lease by lease_s from now; False if the slot was already lost."""
        renewed = self._breaker.call(
            self._renew, keys=[self.key(tenant)], args=[self._lease_ms, message_id]
        )
        return int(renewed) == 1

    def renew_all(self) -> int:
        """Extend every lease this limiter holds; returns how many were still held."""
        with self._lock:
            held = {tenant: sorted(ids) for tenant, ids in self._held.items()}
        renewed = 0
        for tenant, ids in held.items():
            renewed += int(
                self._breaker.call(
                    self._renew, keys=[self.key(tenant)], args=[self._lease_ms, *ids]
                )
            )
        return renewed

    def close(self) -> None:
        """Stop renewing; leases still held then expire after lease_s."""
        self._stop.set()

    def _start_renewer(self) -> None:
        # Called with the lock held.
        if self._renewer is not None or self._renew_every_s is None:
            return
        self._renewer = threading.Thread(
            target=self._renew_loop,
            args=(self._renew_every_s,),
            name="boost-fairness-lease",
            daemon=True,
        )
        self._renewer.start()

    def _renew_loop(self, every_s: float) -> None:
        # One pass per every_s whatever happens: a failed or refused pass waits like a good one,
        # so an outage never turns this thread into a busy loop.
        while not self._stop.wait(every_s):
            try:
                self._release_unreleased()
                self.renew_all()
            except CircuitOpenError:  # the breaker logged the outage; leases may lapse meanwhile
                continue
            except Exception as exc:  # Redis down: leases lapse, the next pass tries again
                log.warning("fairness_lease_renewal_failed", error=str(exc))


class RedisTokenBucketLimiter:
    """Token buckets shared by every process using the same Redis and prefix.

    The same semantics as TokenBucketLimiter (deficit, clamping, reconfiguration on the next
    take). Policies are configured in this process: every process must set the same ones. A
    bucket expires from Redis once idle for idle_s and refilled.

    Every Redis call goes through `breaker`, as for RedisConcurrencyLimiter: while it is open,
    take raises CircuitOpenError at once (the middleware then admits the message). Unlimited
    policies touch neither Redis nor the breaker.
    """

    def __init__(
        self,
        client: redis.Redis,
        default: RatePolicy = UNLIMITED,
        *,
        prefix: str = DEFAULT_PREFIX,
        idle_s: float = 600.0,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self._client = client
        self._prefix = check_prefix(prefix)
        self._idle_ms = max(1, round(check_idle_s("RedisTokenBucketLimiter", idle_s) * 1000))
        self._policies = PolicyTable(default)
        self._take = client.register_script(_TAKE_LUA)
        self._breaker = breaker if breaker is not None else redis_breaker()

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    def key(self, tenant: TenantId, meter: str = DEFAULT_METER) -> str:
        """The bucket's Redis key."""
        return f"{self._prefix}:bucket:{meter}:{tenant.value}"

    def set_policy(
        self, policy: RatePolicy, *, tenant: TenantId | None = None, meter: str = DEFAULT_METER
    ) -> None:
        """Change a limit while running: one tenant's override, or the meter's default."""
        self._policies.set(policy, tenant=tenant, meter=meter)

    def clear_policy(self, *, tenant: TenantId, meter: str = DEFAULT_METER) -> None:
        self._policies.clear(tenant=tenant, meter=meter)

    def policy_for(self, tenant: TenantId, meter: str = DEFAULT_METER) -> RatePolicy:
        return self._policies.get(tenant, meter)

    def take(self, tenant: TenantId, meter: str = DEFAULT_METER, n: int = 1) -> Admission:
        """Admit n units of the tenant's meter, or say how long until they would be admitted."""
        check_units(n)
        policy = self._policies.get(tenant, meter)
        if policy.unlimited:
            return Admission(admitted=True)
        result: Any = self._breaker.call(
            self._take,
            keys=[self.key(tenant, meter)],
            args=[
                repr(policy.rate_per_s),
                repr(policy.capacity),
                n,
                self._idle_ms,
                repr(TOKEN_EPSILON),
                repr(OVERSIZE_MARGIN_S),
            ],
        )
        admitted, retry = result
        return Admission(admitted=int(admitted) == 1, retry_after_s=float(retry))


__all__ = [
    "BUCKET_LUA",
    "DEFAULT_LEASE_S",
    "DEFAULT_PREFIX",
    "RedisConcurrencyLimiter",
    "RedisTokenBucketLimiter",
    "check_prefix",
    "redis_breaker",
    "redis_client",
]
