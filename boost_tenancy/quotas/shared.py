"""Publishing buckets shared by every producing process through Redis (BOOST_PUBLISH_REDIS_URL).

One publish takes from all its buckets (messages and bytes, tenant-wide and the queue's) in one
Lua script, all or nothing, with the fairness layer's bucket arithmetic and the server's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.breaker import CircuitBreaker
from boost_tenancy.fairness.rates import OVERSIZE_MARGIN_S, TOKEN_EPSILON, check_idle_s
from boost_tenancy.fairness.redis_backend import (
    BUCKET_LUA,
    DEFAULT_PREFIX,
    check_prefix,
    redis_breaker,
    redis_client,
)
from boost_tenancy.storage import redact_url

if TYPE_CHECKING:
    import redis

ENV_PUBLISH_REDIS_URL: Final = "BOOST_PUBLISH_REDIS_URL"
REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
DEFAULT_TIMEOUT_S: Final = 2.0

# KEYS: the buckets of one publish; ARGV: idle ms, epsilon, oversize margin, then rate/s, capacity
# and units of each key in turn. Every bucket is decided on its refilled balance first; only when
# all admit are the balances written, so a refused publish leaves every bucket as it was (its
# refill is a function of the stored balance and time, so nothing is lost by not writing it).
_TAKE_ALL_LUA: Final = (
    BUCKET_LUA
    + """
local idle = tonumber(ARGV[1])
local eps = tonumber(ARGV[2])
local margin = tonumber(ARGV[3])
local now = server_now_us()
local balances = {}
local refused = 0
local wait = 0
for i = 1, #KEYS do
  local rate = tonumber(ARGV[i * 3 + 1])
  local capacity = tonumber(ARGV[i * 3 + 2])
  local tokens = refilled(KEYS[i], rate, capacity, now)
  local admitted, balance, retry = step(
    tokens, rate, capacity, tonumber(ARGV[i * 3 + 3]), eps, margin)
  if admitted == 0 then
    refused = 1
    if retry > wait then wait = retry end
  end
  balances[i] = balance
end
if refused == 1 then
  return {0, string.format('%.17g', wait)}
end
for i = 1, #KEYS do
  store(KEYS[i], balances[i], tonumber(ARGV[i * 3 + 1]), tonumber(ARGV[i * 3 + 2]), now, idle)
end
return {1, '0'}
"""
)


def check_redis_url(url: str, variable: str = ENV_PUBLISH_REDIS_URL) -> str:
    """url when it names a Redis (redis://, rediss://, unix://), else ConfigError naming the
    variable; checked at start-up, before any connection."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{variable} {redact_url(url)!r} is not a Redis URL: {exc}") from None
    if parts.scheme not in REDIS_SCHEMES or not (parts.hostname or parts.path):
        raise ConfigError(
            f"{variable} {redact_url(url)!r} is not a Redis URL "
            f"(expected redis://host:port/db, rediss:// or unix://)"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{variable} {redact_url(url)!r} names no host")
    del port  # parsed only to refuse a malformed one
    return url


class RedisPublishBuckets:
    """The publish buckets of every tenant in one Redis, under prefix.

    Keys: `<prefix>:publish:{<tenant>}:<meter>` for a tenant's own buckets and
    `<prefix>:publish:{<tenant>}:queue:<queue>:<meter>` for its queue's, meter being `messages`
    or `bytes`; the tenant in braces is a Redis Cluster hash tag, so every bucket of one publish
    lives on one node. A bucket expires once idle for idle_s and refilled.

    Every call goes through `breaker` (redis_breaker(): connection errors and timeouts open it).
    Balances carry over a change of limits, clamped to the new capacity: the processes of a fleet
    see a policy change at different moments, and none of them should refill the shared buckets.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        idle_s: float = 600.0,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self._client = client
        self._prefix = check_prefix(prefix)
        self._head = (
            repr(max(1, round(check_idle_s("RedisPublishBuckets", idle_s) * 1000))),
            repr(TOKEN_EPSILON),
            repr(OVERSIZE_MARGIN_S),
        )
        self._take = client.register_script(_TAKE_ALL_LUA)
        self._breaker = breaker if breaker is not None else redis_breaker()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        variable: str = ENV_PUBLISH_REDIS_URL,
    ) -> RedisPublishBuckets:
        """Buckets in the Redis url names, with a breaker of their own; no connection is made
        until the first publish. timeout_s bounds how long one publish can wait for Redis."""
        client = redis_client(
            check_redis_url(url, variable), variable=variable, timeout_s=timeout_s
        )
        return cls(client, prefix=prefix)

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def client(self) -> redis.Redis:
        return self._client

    def key(self, tenant: str, meter: str, queue: str | None = None) -> str:
        """A bucket's Redis key (tenant as text; meter `messages` or `bytes`)."""
        if queue is None:
            return f"{self._prefix}:publish:{{{tenant}}}:{meter}"
        return f"{self._prefix}:publish:{{{tenant}}}:queue:{queue}:{meter}"

    def take_all(
        self, keys: Sequence[str], specs: Sequence[tuple[str, str]], units: Sequence[int]
    ) -> tuple[bool, float]:
        """Take units[i] from the bucket keys[i] of rate/s and capacity specs[i] (as text), all or
        none: (admitted, retry_after_s). Raises the breaker's CircuitOpenError or the client's
        errors when Redis cannot answer."""
        args: list[str | int] = [*self._head]
        for (rate, capacity), n in zip(specs, units, strict=True):
            args += (rate, capacity, n)
        result: Any = self._breaker.call(self._take, keys=list(keys), args=args)
        admitted, retry = result
        return int(admitted) == 1, float(retry)

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()


__all__ = [
    "ENV_PUBLISH_REDIS_URL",
    "RedisPublishBuckets",
    "check_redis_url",
]
