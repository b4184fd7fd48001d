"""A tenant's publishing buckets: the size cap and token buckets that apply to one tenant or
one tenant's queue (a lane), and taking from this process's buckets, all or nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from boost_tenancy.fairness.rates import TOKEN_EPSILON, RatePolicy, bucket_step
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.policy import TenantPolicy

if TYPE_CHECKING:
    from boost_tenancy.quotas.shared import RedisPublishBuckets


class Bucket:
    """One token bucket: its policy (rate and capacity kept as plain floats, read on every
    check) and its balance at updated_at."""

    __slots__ = ("capacity", "policy", "rate", "tokens", "updated_at")

    def __init__(self, policy: RatePolicy, now: float) -> None:
        self.policy = policy
        self.rate = policy.rate_per_s
        self.capacity = self.tokens = policy.capacity
        self.updated_at = now

    def refilled(self, now: float) -> float:
        # min() also clamps a balance down to a capacity lowered since the last take.
        elapsed = now - self.updated_at
        if elapsed <= 0:
            return self.tokens
        return min(self.capacity, self.tokens + elapsed * self.rate)

    def full(self, now: float) -> bool:
        return self.refilled(now) >= self.capacity


class Lane:
    """What applies to one tenant, or to one tenant's queue: the size cap and the buckets, and
    the run-time policy they were built with (a changed policy rebuilds the lane).

    The check is on every send's path, so a tenant's resolved limits and its buckets sit in one
    object found by the tenant's text (one dict lookup); changing any limit drops those objects
    and the next check resolves them again.
    """

    __slots__ = ("buckets", "cap", "limits", "policy", "shared_keys", "shared_specs", "used_at")

    def __init__(
        self,
        limits: PublishLimits,
        cap: int,
        now: float,
        policy: TenantPolicy | None = None,
        shared: tuple[RedisPublishBuckets, str, str | None] | None = None,
    ) -> None:
        self.limits = limits
        self.policy = policy
        self.cap = cap
        # (bucket, counts bytes): the messages/s and the bytes/s bucket, each only when limited.
        self.buckets: tuple[tuple[Bucket, bool], ...] = tuple(
            (Bucket(policy, now), counts_bytes)
            for policy, counts_bytes in ((limits.messages, False), (limits.bytes, True))
            if not policy.unlimited
        )
        # With shared buckets: each bucket's Redis key and its (rate/s, capacity) as the script
        # reads them, made once per lane rather than on every publish.
        self.shared_keys: tuple[str, ...] = ()
        self.shared_specs: tuple[tuple[str, str], ...] = ()
        if shared is not None:
            backend, tenant, queue = shared
            self.shared_keys = tuple(
                backend.key(tenant, "bytes" if counts_bytes else "messages", queue)
                for _, counts_bytes in self.buckets
            )
            self.shared_specs = tuple((repr(b.rate), repr(b.capacity)) for b, _ in self.buckets)
        self.used_at = now


def take_buckets(
    lanes: tuple[Lane, ...], count: int, total: int, now: float
) -> tuple[str | None, float]:
    """Take count messages and total bytes from every bucket, or nothing: (refusal, wait)."""
    steps: list[tuple[Bucket, float]] = []
    wait, refused = 0.0, False
    for lane in lanes:
        for bucket, counts_bytes in lane.buckets:
            elapsed = now - bucket.updated_at  # bucket.refilled(now), inlined: every send
            tokens = (
                bucket.tokens
                if elapsed <= 0
                else min(bucket.capacity, bucket.tokens + elapsed * bucket.rate)
            )
            n = total if counts_bytes else count
            if tokens + TOKEN_EPSILON >= n:  # bucket_step's first case, the common one
                steps.append((bucket, tokens - n))
                continue
            admitted, balance, after = bucket_step(tokens, bucket.policy, n)
            if admitted:
                steps.append((bucket, balance))
            else:
                refused, wait = True, max(wait, after)
                bucket.tokens, bucket.updated_at = tokens, now
    if refused:
        return "rate", wait
    for bucket, balance in steps:
        bucket.tokens, bucket.updated_at = balance, now
    return None, 0.0


def rate_text(lanes: tuple[Lane, ...]) -> str:
    """The lanes' rates as a refusal names them, e.g. "10 messages/s, 2000 bytes/s"."""
    parts = []
    for lane in lanes:
        if lane.limits.messages_per_s:
            parts.append(f"{lane.limits.messages_per_s:g} messages/s")
        if lane.limits.bytes_per_s:
            parts.append(f"{lane.limits.bytes_per_s:g} bytes/s")
    return ", ".join(parts)


__all__ = ["Bucket", "Lane", "rate_text", "take_buckets"]
