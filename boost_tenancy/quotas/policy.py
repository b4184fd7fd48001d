"""A tenant's policy set at run time by an operator: overrides of the publishing limits and of
the message time-to-live, the audit of every change, and the resolver running processes read it
through.

Where a policy sets a field, it wins over the deployment's default (BOOST_PUBLISH_* or
BOOST_MESSAGE_TTL_S, or a PublishGuard.set_limits or MessageTtl override in code); a field it
leaves unset (None) keeps that default.
The policy store (quotas/policy_store.py) holds the overrides and the audit; a running process
reads them through a PolicyResolver, from memory, refreshed in the background at most a minute
old, and keeps the last policy it read while the store is down.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.cache import TenantCache
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.ttl import check_ttl_seconds
from boost_tenancy.tenancy import TenantId

LIMIT_FIELDS: Final = (
    "messages_per_s",
    "bytes_per_s",
    "burst_s",
    "max_message_bytes",
    "max_queued_messages",
)
"""The PublishLimits fields a tenant's policy may override."""
POLICY_FIELDS: Final = (*LIMIT_FIELDS, "ttl_s")
"""Every field of a tenant's policy, as stored and as named by the CLI: the limits and the
message time-to-live in seconds (quotas.ttl.PolicyTtl; 0 = its messages never expire)."""

PolicyValue = float | int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantPolicy:
    """One tenant's overrides; None leaves the deployment's default."""

    messages_per_s: float | None = None
    bytes_per_s: float | None = None
    burst_s: float | None = None
    max_message_bytes: int | None = None
    max_queued_messages: int | None = None
    ttl_s: float | None = None

    def __post_init__(self) -> None:
        # The same rules as the limits themselves: checked here so a bad value never reaches
        # the store, and a bad stored value never reaches a guard.
        self.applied_to(PublishLimits())
        if self.ttl_s is not None:
            object.__setattr__(self, "ttl_s", check_ttl_seconds("ttl_s", self.ttl_s))

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in POLICY_FIELDS)

    def overrides(self) -> dict[str, PolicyValue]:
        """The fields this policy sets."""
        return {n: v for n in POLICY_FIELDS if (v := getattr(self, n)) is not None}

    def applied_to(self, limits: PublishLimits) -> PublishLimits:
        """limits with this policy's limit fields put in their place."""
        overrides = {n: v for n in LIMIT_FIELDS if (v := getattr(self, n)) is not None}
        return dataclasses.replace(limits, **overrides) if overrides else limits

    def changed(self, changes: Mapping[str, PolicyValue]) -> TenantPolicy:
        """This policy with changes (a field set to None is cleared); unknown fields refused."""
        unknown = set(changes) - set(POLICY_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown policy field(s) {', '.join(sorted(unknown))}; "
                f"expected {', '.join(POLICY_FIELDS)}"
            )
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


NO_POLICY: Final = TenantPolicy()


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyChange:
    """One audited change of one field of a tenant's policy (or of its tier)."""

    tenant: str
    at: datetime
    actor: str
    field: str
    old: str | None
    new: str | None


class PolicyStore(Protocol):
    """Where tenants' policies and their audit live."""

    def get(self, tenant: TenantId) -> TenantPolicy: ...

    def set(
        self, tenant: TenantId, changes: Mapping[str, PolicyValue], *, actor: str
    ) -> list[PolicyChange]: ...

    def record(
        self, tenant: TenantId, field: str, old: str | None, new: str | None, *, actor: str
    ) -> PolicyChange: ...

    def history(self, tenant: TenantId, *, limit: int = 50) -> list[PolicyChange]: ...

    def close(self) -> None: ...


class PolicyResolver(TenantCache[TenantPolicy]):
    """A tenant's policy without waiting on the store: no override until its first lookup
    completes, then cached for ttl_s (60 s: a change reaches every process within a minute),
    refreshed in the background; a failed lookup keeps the last policy read and logs
    policy_lookup_failed.

    policy_of returns the same object while the policy is unchanged (TenantCache keeps an equal
    value's object), so a caller can tell a change by identity.
    """

    def __init__(
        self,
        store: PolicyStore,
        *,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        refresh_threads: int = 1,
    ) -> None:
        self._store = store
        super().__init__(
            store.get,
            default=NO_POLICY,
            ttl_s=ttl_s,
            clock=clock,
            refresh_threads=refresh_threads,
            thread_name="boost-policy-refresh",
            failure_event="policy_lookup_failed",
            describe=TenantPolicy.overrides,
            what="PolicyResolver",
        )

    def policy_of(self, tenant: TenantId) -> TenantPolicy:
        """The tenant's policy as known now; never waits for the store."""
        return self.get(tenant)

    def close(self) -> None:
        """End the refresh thread and close the store."""
        super().close()
        self._store.close()


__all__ = [
    "LIMIT_FIELDS",
    "NO_POLICY",
    "POLICY_FIELDS",
    "PolicyChange",
    "PolicyResolver",
    "PolicyStore",
    "TenantPolicy",
]
