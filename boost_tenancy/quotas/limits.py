"""PublishLimits: what one tenant (or one tenant's queue) may publish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.rates import DEFAULT_BURST_S, RatePolicy, check_limit

PUBLISH_VARIABLES: Final = (
    "BOOST_PUBLISH_RATE_PER_S",
    "BOOST_PUBLISH_BYTES_PER_S",
    "BOOST_PUBLISH_BURST_S",
    "BOOST_MAX_MESSAGE_BYTES",
    "BOOST_MAX_QUEUED_MESSAGES",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishLimits:
    """Token-bucket rates and a size cap; every 0 means unlimited.

    messages_per_s and bytes_per_s refill buckets holding burst_s seconds' worth (deficit
    buckets: a batch larger than the bucket passes while any token remains, then the tenant
    repays). max_message_bytes caps one message's body and properties (wire_size).
    max_queued_messages caps what the tenant's queue of the publish holds, as the broker reports
    it (quotas/backlog.py; per-tenant queues only).
    """

    messages_per_s: float = 0.0
    bytes_per_s: float = 0.0
    burst_s: float = DEFAULT_BURST_S
    max_message_bytes: int = 0
    max_queued_messages: int = 0

    def __post_init__(self) -> None:
        names = ("messages_per_s", "bytes_per_s", "burst_s", "max_message_bytes")
        for name in (*names, "max_queued_messages"):
            check_limit(self, name, "the default of 10" if name == "burst_s" else "unlimited")
        for name in ("max_message_bytes", "max_queued_messages"):
            if not isinstance(getattr(self, name), int):
                raise ConfigError(
                    f"PublishLimits.{name} must be an integer, got {getattr(self, name)!r}"
                )

    @property
    def messages(self) -> RatePolicy:
        return RatePolicy(rate_per_s=self.messages_per_s, burst_s=self.burst_s)

    @property
    def bytes(self) -> RatePolicy:
        return RatePolicy(rate_per_s=self.bytes_per_s, burst_s=self.burst_s)

    @property
    def limits_rate(self) -> bool:
        return self.messages_per_s > 0 or self.bytes_per_s > 0

    @property
    def unlimited(self) -> bool:
        return not self.limits_rate and self.max_message_bytes == 0 and not self.max_queued_messages


UNLIMITED_PUBLISHING: Final = PublishLimits()

__all__ = ["PUBLISH_VARIABLES", "UNLIMITED_PUBLISHING", "PublishLimits"]
