"""The one error root of boost-tenancy and its precise subclasses.

Every error the toolkit raises on purpose derives from BoostTenancyError, so callers can catch
the toolkit's failures without catching their own bugs.
"""

from __future__ import annotations


class BoostTenancyError(Exception):
    """Root of every error raised by boost-tenancy."""


class InvalidTenantError(BoostTenancyError, ValueError):
    """A tenant id does not match the tenant grammar; the message shows the offending value."""

    def __init__(self, value: object, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(f"invalid tenant id {value!r}: {reason}")


class TenantMismatchError(BoostTenancyError):
    """A message claims a tenant other than the one its context or subscription is bound to."""


class ConfigError(BoostTenancyError, ValueError):
    """Configuration is missing or invalid; raised at start-up, naming the setting."""


class DependencyNotOpenError(ConfigError, AttributeError):
    """A processor's Dependency read while no runner has it open (before the start, after the
    stop); an AttributeError too, so hasattr() and introspection answer instead of raising."""


class TransportError(BoostTenancyError):
    """The broker connection failed or the broker refused an operation."""


class NotConfirmedError(TransportError):
    """No receipt came within the deadline: the broker may or may not hold the message."""


class QueueStatsUnavailableError(BoostTenancyError):
    """The broker cannot report queue statistics: the transport has no such capability on it,
    or the broker is not configured to answer (Classic without its statistics plugin)."""


class MessageDecodeError(BoostTenancyError):
    """A delivered body cannot be decoded (invalid UTF-8 or JSON); the message is dead-lettered."""


class HandlerError(BoostTenancyError):
    """Base for errors a handler raises to tell the toolkit how to treat a failed message."""


class PermanentError(HandlerError):
    """Retrying cannot help (invalid data, unknown document): dead-letter at once."""


class MessageEncodeError(PermanentError, ValueError):
    """A message cannot be put on the wire as it is: a text body that is not encodable UTF-8, or
    a body holding a value JSON cannot carry (the error names its type and where it is).

    Raised before any byte is written, so the connection stays healthy and the caller can settle
    the message another way; never reported as a lost connection. A PermanentError: a handler
    whose ctx.publish raises it has its message dead-lettered at once, since sending the same
    value again cannot succeed.
    """


class ModelValidationError(PermanentError):
    """A body does not fit its processor's message model (boost_tenancy.models): dead-lettered
    at once with reason "invalid", never retried. errors lists each problem as (path, message),
    the path naming the field ("items[0].width")."""

    def __init__(self, model: str, errors: list[tuple[str, str]]) -> None:
        self.model = model
        self.errors = tuple(errors)
        shown = "; ".join(f"{path or '(body)'}: {message}" for path, message in self.errors)
        count = len(self.errors)
        super().__init__(
            f"body does not validate as {model} ({count} error{'s' if count != 1 else ''}): {shown}"
        )


class TransientError(HandlerError):
    """Retrying may help (network, storage unavailable): retry with backoff up to the cap.

    retry_after_ms, when given, is the delay of that retry instead of the backoff (a service
    said when to come back, say), bounded by the retry policy's max_delay_ms; the attempt is
    counted all the same.
    """

    def __init__(self, *args: object, retry_after_ms: float | None = None) -> None:
        if retry_after_ms is not None and (
            isinstance(retry_after_ms, bool)
            or not isinstance(retry_after_ms, int | float)
            or not 0 <= retry_after_ms < float("inf")
        ):
            raise ValueError(
                f"retry_after_ms must be a finite number of milliseconds >= 0, got "
                f"{retry_after_ms!r}"
            )
        self.retry_after_ms = retry_after_ms
        super().__init__(*args)


class DeadLettersNotFoundError(BoostTenancyError):
    """A re-drive named message ids its tenant's dead-letter queue does not hold; nothing was
    re-driven. missing lists them."""

    def __init__(self, queue: str, missing: list[str], read: int) -> None:
        self.queue = queue
        self.missing = missing
        super().__init__(
            f"no dead letter {', '.join(map(repr, missing))} among the {read} read from "
            f"{queue}; nothing was re-driven"
        )


class HandlerCancelledError(TransientError):
    """An async handler's task was cancelled before it finished (the runner stopping past its
    grace period): retried like any transient failure, its attempt counted."""


class ErrorStoreError(BoostTenancyError):
    """The error store could not record or read a failure."""


class PublishRefusedError(BoostTenancyError):
    """A publish over one of its tenant's publishing limits (quotas/); nothing of it was sent.

    reason names the limit ("rate", "size"); retry_after_s says when the same publish would be
    admitted (0 when waiting cannot help).
    """

    reason = "refused"

    def __init__(self, tenant: str, queue: str, detail: str, *, retry_after_s: float = 0.0) -> None:
        self.tenant = tenant
        self.queue = queue
        self.detail = detail
        self.retry_after_s = retry_after_s
        super().__init__(
            f"publish of tenant {tenant} to {queue!r} refused ({self.reason}): {detail}"
        )


class PublishRateExceededError(PublishRefusedError, TransientError):
    """Over the tenant's messages/s or bytes/s: a runner defers the handler's input, without
    counting an attempt, until the rate admits it (RetryMiddleware)."""

    reason = "rate"


class BacklogQuotaExceededError(PublishRateExceededError):
    """The tenant's queue holds its maximum of queued messages: deferred and answered like a
    rate refusal (once its consumers catch up, the publish is admitted)."""

    reason = "backlog"


class MessageTooLargeError(PublishRefusedError, PermanentError):
    """Larger than the tenant's maximum message size: retrying cannot help."""

    reason = "size"


class RequestTimeoutError(BoostTenancyError, TimeoutError):
    """No reply to a request within its timeout (TenantRequester.request); names the queue, the
    tenant and the wait. The request itself was confirmed by the broker and may still be
    handled: a reply that comes later is acknowledged and logged, not delivered."""
