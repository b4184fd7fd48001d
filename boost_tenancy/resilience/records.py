"""Failure records: what the error store keeps of each handling failure, and the store protocol.

The SQL stores live in error_store.py; the bounded writer every caller goes through in
recorder.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from boost_tenancy.errors import ErrorStoreError
from boost_tenancy.tenancy import TenantId


class FailureOutcome(enum.StrEnum):
    """What the toolkit did with a message after a handling failure."""

    RETRY = "retry"
    """The message will be redelivered after a backoff."""
    DEAD_LETTER = "dead_letter"
    """The message was moved to the dead-letter queue."""
    QUARANTINE = "quarantine"
    """Tenancy violation (missing or mismatched tenantUUID); the message was moved to the DLQ."""
    REDRIVE = "redrive"
    """An operator re-drove the message from the DLQ to its queue."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRecord:
    """One failed handling attempt of one message, as the error store keeps it."""

    tenant: TenantId | None
    """The message's tenant; None only for quarantined messages that carry no valid tenant."""
    queue: str
    """The source queue, e.g. "cmd.document.process"."""
    message_id: str
    """The toolkit's stable message id."""
    correlation_id: str | None
    attempt: int
    """The 1-based attempt number that failed."""
    outcome: FailureOutcome
    error_type: str
    """The error's type, e.g. "TransientError" or "builtins.ValueError"."""
    error_text: str
    occurred_at: datetime
    """When the attempt failed; timezone-aware, normalised to UTC."""
    raw_tenant: str | None = None
    """For quarantine: the offending tenantUUID value as received (may be invalid); else None."""
    trace: str | None = None
    """The formatted traceback of the handler's exception, if there was one.

    Stored cut to its last 8,000 characters (the innermost frames and the exception itself).
    """

    def __post_init__(self) -> None:
        when: object = self.occurred_at
        if not isinstance(when, datetime):
            raise ErrorStoreError(f"occurred_at must be a datetime, got {type(when).__name__}")
        if when.utcoffset() is None:
            raise ErrorStoreError(
                f"occurred_at {when.isoformat()} is naive; it must be timezone-aware (UTC)"
            )
        # Normalising here makes a record equal to its stored round trip whatever zone it came in.
        object.__setattr__(self, "occurred_at", when.astimezone(UTC))

        tenant: object = self.tenant
        outcome: object = self.outcome
        if not isinstance(outcome, FailureOutcome):
            raise ErrorStoreError(f"outcome must be a FailureOutcome, got {outcome!r}")
        if tenant is None and outcome is not FailureOutcome.QUARANTINE:
            raise ErrorStoreError(
                f"a {outcome.value} record needs a tenant; only quarantine records may have none"
            )
        if tenant is not None and not isinstance(tenant, TenantId):
            raise ErrorStoreError(f"tenant must be a TenantId or None, got {type(tenant).__name__}")
        attempt: object = self.attempt
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ErrorStoreError(f"attempt must be an integer of at least 1, got {attempt!r}")
        for name in ("queue", "message_id"):
            value: object = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ErrorStoreError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("error_type", "error_text"):
            if not isinstance(getattr(self, name), str):
                raise ErrorStoreError(f"{name} must be a string")
        for name in ("correlation_id", "raw_tenant", "trace"):
            optional: object = getattr(self, name)
            if optional is not None and not isinstance(optional, str):
                raise ErrorStoreError(f"{name} must be a string or None, got {optional!r}")


class ErrorStore(Protocol):
    """Where handling failures are recorded before the message is retried or dead-lettered."""

    def record(self, record: FailureRecord) -> None:
        """Store one failure; it is durable (committed) when this returns."""
        ...

    def failures(
        self,
        *,
        tenant: TenantId | None,
        queue: str | None = None,
        message_id: str | None = None,
        outcome: FailureOutcome | None = None,
        limit: int = 1000,
    ) -> list[FailureRecord]:
        """One tenant's failures, oldest first; tenant=None gives the tenantless quarantine ones."""
        ...

    def close(self) -> None:
        """Release the connection; the store cannot be used afterwards."""
        ...


__all__ = ["ErrorStore", "FailureOutcome", "FailureRecord"]
