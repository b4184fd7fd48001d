"""PublishLimits: what one tenant (or one tenant's queue) may publish."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from boost_tenancy.envvars import env_float, env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.rates import DEFAULT_BURST_S, RatePolicy, check_limit

PUBLISH_VARIABLES: Final = (
    "BOOST_PUBLISH_RATE_PER_S",
    "BOOST_PUBLISH_BYTES_PER_S",
    "BOOST_PUBLISH_BURST_S",
    "BOOST_MAX_MESSAGE_BYTES",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishLimits:
    """Token-bucket rates and a size cap; every 0 means unlimited.

    messages_per_s and bytes_per_s refill buckets holding burst_s seconds' worth (deficit
    buckets: a batch larger than the bucket passes while any token remains, then the tenant
    repays). max_message_bytes caps one message's body and properties (wire_size).
    """

    messages_per_s: float = 0.0
    bytes_per_s: float = 0.0
    burst_s: float = DEFAULT_BURST_S
    max_message_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("messages_per_s", "bytes_per_s", "burst_s", "max_message_bytes"):
            check_limit(self, name, "the default of 10" if name == "burst_s" else "unlimited")
        if not isinstance(self.max_message_bytes, int):
            raise ConfigError(
                "PublishLimits.max_message_bytes must be an integer, "
                f"got {self.max_message_bytes!r}"
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
        return not self.limits_rate and self.max_message_bytes == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PublishLimits:
        """BOOST_PUBLISH_RATE_PER_S, _BYTES_PER_S, _BURST_S and BOOST_MAX_MESSAGE_BYTES: every
        tenant's default; a negative or non-numeric value stops start-up naming the variable."""
        return cls(
            messages_per_s=env_float(env, "BOOST_PUBLISH_RATE_PER_S", 0.0),
            bytes_per_s=env_float(env, "BOOST_PUBLISH_BYTES_PER_S", 0.0),
            burst_s=env_float(env, "BOOST_PUBLISH_BURST_S", DEFAULT_BURST_S),
            max_message_bytes=env_int(env, "BOOST_MAX_MESSAGE_BYTES", 0),
        )


UNLIMITED_PUBLISHING: Final = PublishLimits()

__all__ = ["PUBLISH_VARIABLES", "UNLIMITED_PUBLISHING", "PublishLimits"]
