"""MessageTtl: how long a tenant's messages may wait on the broker before it expires them.

Every tenant's default (BOOST_MESSAGE_TTL_S, 0 = no expiry), per-tenant overrides set in code,
and (PolicyTtl) the tenant's run-time policy (`boost-tenancy policy set --ttl-s`), which wins over
both; the TenantProducer and ctx.publish stamp each message they send with the absolute expiry
it gives (expiry.ExpiryPolicy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.expiry import expiry_after
from boost_tenancy.tenancy import TenantId

if TYPE_CHECKING:  # quotas.policy imports this module
    from boost_tenancy.expiry import ExpiryPolicy
    from boost_tenancy.quotas.policy import TenantPolicy

TTL_VARIABLE: Final = "BOOST_MESSAGE_TTL_S"
MAX_TTL_S: Final = 10 * 365 * 86_400
"""Ten years: a longer time-to-live is no time-to-live, and a bound keeps every expiry a valid
one (expiry.LATEST_EXPIRY_MS)."""


def check_ttl_seconds(what: str, seconds: object) -> float:
    """seconds as a time-to-live: a number from 0 (no expiry) to MAX_TTL_S, else ConfigError."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigError(f"{what} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_TTL_S:
        raise ConfigError(
            f"{what} must be between 0 (no expiry) and {MAX_TTL_S} seconds, got {seconds!r}"
        )
    return float(seconds)


def _milliseconds(seconds: float) -> int | None:
    # A time-to-live shorter than a millisecond still expires: it is never rounded to none.
    return None if seconds == 0 else max(1, round(seconds * 1000))


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageTtl:
    """Seconds a message lives after it is sent: default_s for every tenant, per_tenant for
    those that differ (0 = never expires, for the default as for a tenant). Immutable: change
    it with for_tenant (a new value)."""

    default_s: float = 0.0
    per_tenant: Mapping[TenantId, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "default_s", check_ttl_seconds("MessageTtl.default_s", self.default_s)
        )
        checked: dict[TenantId, float] = {}
        for raw, seconds in dict(self.per_tenant).items():
            try:
                tenant = TenantId.parse(raw)
            except InvalidTenantError as exc:
                raise ConfigError(f"MessageTtl.per_tenant: {exc}") from None
            checked[tenant] = check_ttl_seconds(f"MessageTtl.per_tenant[{tenant.value!r}]", seconds)
        # A read-only copy: the caller's dict changing later must not change a frozen value.
        object.__setattr__(self, "per_tenant", MappingProxyType(checked))

    @property
    def applies(self) -> bool:
        """Whether any tenant's messages expire."""
        return self.default_s > 0 or any(s > 0 for s in self.per_tenant.values())

    def ttl_ms_of(self, tenant: TenantId | str) -> int | None:
        """tenant's time-to-live in milliseconds, or None: its messages never expire."""
        return _milliseconds(self.per_tenant.get(TenantId.parse(tenant), self.default_s))

    def expiry_of(self, tenant: TenantId, now: int | None = None) -> int | None:
        """The absolute expiry (epoch milliseconds) of a message tenant sends at now (epoch
        milliseconds, the wall clock by default), or None."""
        return expiry_after(self.ttl_ms_of(tenant), now)

    def for_tenant(self, tenant: TenantId | str, seconds: float) -> MessageTtl:
        """This value with tenant's time-to-live set to seconds (0: its messages never expire,
        whatever the default)."""
        return replace(self, per_tenant={**self.per_tenant, TenantId.parse(tenant): seconds})


class PolicyTtl:
    """A MessageTtl under tenants' run-time policies: a tenant whose policy sets ttl_s gets that
    (0: its messages never expire), the others the MessageTtl's. The policy is read through
    policy_of (PolicyResolver.policy_of: from memory, never waiting for the store)."""

    def __init__(self, base: MessageTtl, policy_of: Callable[[TenantId], TenantPolicy]) -> None:
        self._base = base
        self._policy_of = policy_of

    def ttl_ms_of(self, tenant: TenantId | str) -> int | None:
        """tenant's time-to-live in milliseconds, or None: its messages never expire."""
        tenant_id = TenantId.parse(tenant)
        seconds = self._policy_of(tenant_id).ttl_s
        return self._base.ttl_ms_of(tenant_id) if seconds is None else _milliseconds(seconds)

    def expiry_of(self, tenant: TenantId, now: int | None = None) -> int | None:
        """The absolute expiry (epoch milliseconds) of a message tenant sends at now, or None."""
        return expiry_after(self.ttl_ms_of(tenant), now)


def effective_ttl(
    ttl: MessageTtl, policy_of: Callable[[TenantId], TenantPolicy] | None
) -> ExpiryPolicy | None:
    """What producers and runners stamp expiries with: ttl under the tenants' policies when
    there is a policy store (a policy may set a TTL whatever the default), else ttl where it
    applies, else None (nothing to stamp)."""
    if policy_of is not None:
        return PolicyTtl(ttl, policy_of)
    return ttl if ttl.applies else None


NO_EXPIRY: Final = MessageTtl()

__all__ = [
    "MAX_TTL_S",
    "NO_EXPIRY",
    "TTL_VARIABLE",
    "MessageTtl",
    "PolicyTtl",
    "check_ttl_seconds",
    "effective_ttl",
]
