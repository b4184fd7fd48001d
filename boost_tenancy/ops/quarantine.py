"""Operator actions on quarantined messages: list a logical queue's quarantine with the recorded
failures, and re-drive chosen messages to the tenant an operator assigns them to.

A quarantined message names no valid tenant, or another than the queue's, so the quarantine is
read without a selector: the quarantine queue itself is the boundary (the shared queue's, or one
tenant's own). Reading takes the messages and returns them unacknowledged, as the dead-letter
admin does; nothing is counted as an attempt.
"""

from __future__ import annotations

import builtins
import enum
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import structlog

from boost_tenancy import codec
from boost_tenancy.errors import (
    BoostTenancyError,
    ConfigError,
    MessageDecodeError,
    TenantMismatchError,
)
from boost_tenancy.header_values import check_id, header_text
from boost_tenancy.messages import (
    ERROR_TEXT_PROPERTY,
    ERROR_TYPE_PROPERTY,
    Body,
    WireMessage,
    body_text,
)
from boost_tenancy.ops.dead_letters import _Collector, queue_depth
from boost_tenancy.processing.inbound import Adopted, adopt
from boost_tenancy.resilience.dead_letter import quarantine_queue, redrive_copy
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, FailureRecord
from boost_tenancy.resilience.recorder import record_failure
from boost_tenancy.routing import DEFAULT_ROUTING, Routing, check_logical_queue
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId, check_body_tenant, claimed_tenant
from boost_tenancy.transports.base import (
    Delivery,
    Outgoing,
    PartlyForwardedError,
    Subscription,
    Transport,
)

log = structlog.get_logger("boost_tenancy.ops.quarantine")

REDRIVE_ERROR_TYPE = "QuarantineRedrive"
"""The error type of the error store's record of an operator's re-drive from quarantine."""


class QuarantineRedriveError(BoostTenancyError):
    """A re-drive from quarantine that moved nothing: ids not found, or messages that may not go
    to the tenant named."""


class Cause(enum.StrEnum):
    """Why a message is in quarantine, read off its tenantUUID property and the queue."""

    MISSING = "missing-tenant"
    """No tenantUUID property at all."""
    INVALID = "invalid-tenant"
    """A tenantUUID that is not a valid tenant id."""
    OTHER_TENANT = "other-tenant"
    """A valid tenant other than the one whose queue it was delivered on."""
    UNROUTABLE = "unroutable"
    """A valid tenant on a shared queue's quarantine: its subscription refused it (shared
    topology) or the router found no queue of its own (the name would be too long)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantinedView:
    """One quarantined message as an operator sees it."""

    message_id: str
    quarantine_queue: str
    cause: Cause
    tenant_property: str | None
    """The tenantUUID property exactly as it arrived (None when it had none): untrusted text, to
    be escaped before it is printed."""
    error_type: str
    error: str
    """Why the toolkit quarantined it, as the quarantine copy carries it."""
    quarantined_at: datetime | None
    """When, from the error store's quarantine record; None when none was recorded."""
    body: Body
    failures: tuple[FailureRecord, ...]
    """Every record the error store holds for its message id and claimed tenant."""


def _cause(raw: str | None, queue_tenant: TenantId | None) -> Cause:
    if raw is None:
        return Cause.MISSING
    claimed = claimed_tenant(raw)
    if claimed is None:
        return Cause.INVALID
    if queue_tenant is not None and claimed != queue_tenant:
        return Cause.OTHER_TENANT
    return Cause.UNROUTABLE


def _body_tenant_refusal(body: Body, tenant: TenantId) -> str | None:
    """Why body may not go to tenant (it names another), or None. A body that is not JSON text
    names no tenant."""
    try:
        data = codec.decode(body_text(body))
    except (MessageDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        check_body_tenant(data, tenant, against="the tenant assigned")
    except TenantMismatchError as exc:
        return str(exc)
    return None


class QuarantineAdmin:
    """Lists and re-drives the quarantine of a logical queue on a connected transport.

    Without a tenant the quarantine read is the shared queue's, DLQ.<queue>.quarantine (what the
    router or a shared runner found without a valid tenant); with one, that tenant's queue's,
    DLQ.tenant.<tenant>.<queue>.quarantine on a routed or per-tenant queue (the same queue as
    without on a shared one).
    """

    def __init__(
        self, transport: Transport, error_store: ErrorStore, *, routing: Routing = DEFAULT_ROUTING
    ) -> None:
        self._transport = transport
        self._store = error_store
        self._routing = routing

    def quarantine_of(self, queue: str, tenant: TenantId | str | None = None) -> str:
        """The broker queue holding queue's quarantine, the shared one or tenant's."""
        if tenant is None:
            return quarantine_queue(check_logical_queue(queue))
        return quarantine_queue(self._routing.physical(queue, tenant))

    def _read(
        self,
        quarantine: str,
        *,
        limit: int,
        idle_s: float,
        max_s: float,
        expected: int | None = None,
    ) -> tuple[Subscription, builtins.list[Delivery]]:
        if limit < 1:
            raise ConfigError(f"limit must be at least 1, got {limit}")
        collector = _Collector(limit, expected)
        # No selector: a quarantined message's tenantUUID is missing, invalid or another
        # tenant's; the quarantine queue is the boundary.
        subscription = self._transport.subscribe(
            quarantine, selector=None, prefetch=limit, on_delivery=collector
        )
        return subscription, collector.wait_idle(idle_s, max_s)[:limit]

    def list(
        self,
        queue: str,
        *,
        tenant: TenantId | str | None = None,
        limit: int = 100,
        idle_s: float = 3.0,
        max_s: float = 30.0,
    ) -> builtins.list[QuarantinedView]:
        """The first limit quarantined messages of queue, oldest first; they stay there."""
        tenant_id = None if tenant is None else TenantId.parse(tenant)
        quarantine = self.quarantine_of(queue, tenant_id)
        depth = queue_depth(self._transport, quarantine)
        if depth == 0:
            return []
        subscription, deliveries = self._read(
            quarantine, limit=limit, idle_s=idle_s, max_s=max_s, expected=depth
        )
        # Unacknowledged on purpose: unsubscribing returns them, in their order, uncounted.
        self._transport.unsubscribe(subscription)
        queue_tenant = tenant_id if quarantine != quarantine_queue(queue) else None
        return [self._view(delivery, quarantine, queue_tenant) for delivery in deliveries]

    def _view(
        self, delivery: Delivery, quarantine: str, queue_tenant: TenantId | None
    ) -> QuarantinedView:
        adopted = adopt(delivery, dead_letter=True)
        props = adopted.delivery.properties
        raw = delivery.properties.get(TENANT_PROPERTY)
        failures = tuple(
            self._store.failures(tenant=claimed_tenant(raw), message_id=adopted.message_id)
        )
        recorded = [f.occurred_at for f in failures if f.outcome is FailureOutcome.QUARANTINE]
        return QuarantinedView(
            message_id=adopted.message_id,
            quarantine_queue=quarantine,
            cause=_cause(raw, queue_tenant),
            tenant_property=raw,
            error_type=props.get(ERROR_TYPE_PROPERTY, ""),
            error=props.get(ERROR_TEXT_PROPERTY, ""),
            quarantined_at=recorded[-1] if recorded else None,
            body=delivery.body,
            failures=failures,
        )

    def redrive(
        self,
        queue: str,
        *,
        tenant: TenantId | str,
        message_ids: Collection[str],
        actor: str,
        from_tenant: TenantId | str | None = None,
        force: bool = False,
        limit: int = 1000,
        idle_s: float = 3.0,
        max_s: float = 60.0,
    ) -> builtins.list[str]:
        """Assign the quarantined messages message_ids to tenant: each goes to tenant's queue of
        queue (per the routing) stamped tenantUUID=tenant, with its error removed and attempts
        reset, and leaves the quarantine, all in one broker transaction where the transport has
        atomic_forward. from_tenant reads that tenant's queue's quarantine instead of the shared
        one.

        Refused, with nothing moved (QuarantineRedriveError naming every id and why): an id
        not among the first limit messages of the quarantine, a body naming another tenant, a
        tenantUUID property naming another valid tenant unless force. Every re-drive is recorded
        in the error store (outcome redrive, the actor and the tenantUUID it had). Returns the
        ids re-driven. Should the broker refuse some copies where forwarding is not atomic, the
        others are moved and recorded, and QuarantineRedriveError names those that stayed.
        """
        tenant_id = TenantId.parse(tenant)
        wanted = {check_id("message id", message_id) for message_id in message_ids}
        if not wanted:
            raise QuarantineRedriveError("name at least one message id to re-drive")
        quarantine = self.quarantine_of(queue, from_tenant)
        target = self._routing.physical(queue, tenant_id)
        subscription, deliveries = self._read(quarantine, limit=limit, idle_s=idle_s, max_s=max_s)
        try:
            # Adopted once each: the id a message is known by must not change between steps.
            adopted = [adopt(d, dead_letter=True) for d in deliveries]
            chosen = [a for a in adopted if a.message_id in wanted]
            _refuse(chosen, wanted, quarantine, tenant_id, force=force, read=len(deliveries))
            if not all(self._transport.is_live(a.delivery) for a in chosen):
                # Its move would be skipped (the broker takes the message back): nothing moves,
                # rather than a re-drive reported and audited that did not happen.
                raise QuarantineRedriveError(
                    f"the connection to the broker was lost while {quarantine} was read; "
                    "nothing was moved: run the re-drive again"
                )
            refused: PartlyForwardedError | None = None
            try:
                done = self._transport.send_then_ack_many(
                    [(a.delivery, [Outgoing(target, _assigned(a, tenant_id))]) for a in chosen]
                )
            except PartlyForwardedError as exc:  # forwarding not atomic: some moved
                done, refused = exc.forwarded, exc
            # A delivery whose connection was lost meanwhile was skipped, and the broker takes it
            # back: only the others are reported and audited as moved.
            moved_ids = {id(d) for d in done}
            moved = [a for a in chosen if id(a.delivery) in moved_ids]
        finally:
            # What was not chosen (and everything, after a refusal) returns to the quarantine.
            self._transport.unsubscribe(subscription)
        self._record(moved, queue, quarantine, tenant_id, actor=actor, force=force)
        if len(moved) < len(chosen):
            kept = sorted({a.message_id for a in chosen} - {a.message_id for a in moved})
            why = (
                "the connection to the broker was lost during the re-drive"
                if refused is None
                else f"the broker refused some: {refused}"
            )
            raise QuarantineRedriveError(
                f"{why}: {', '.join(kept)} stayed in {quarantine} (the others moved and are "
                "recorded): run the re-drive again for them"
            )
        return [a.message_id for a in moved]

    def _record(
        self,
        moved: Sequence[Adopted],
        queue: str,
        quarantine: str,
        tenant: TenantId,
        *,
        actor: str,
        force: bool,
    ) -> None:
        """The error store's record of each message re-driven, after the broker took them."""
        now = datetime.now(UTC)
        for adopted in moved:
            raw = adopted.delivery.properties.get(TENANT_PROPERTY)
            forced = " (forced)" if claimed_tenant(raw) not in (None, tenant) else ""
            record_failure(
                self._store,
                FailureRecord(
                    tenant=tenant,
                    raw_tenant=None if raw is None else header_text(raw, 200),
                    queue=check_logical_queue(queue),
                    message_id=adopted.message_id,
                    correlation_id=adopted.delivery.correlation_id,
                    attempt=1,
                    outcome=FailureOutcome.REDRIVE,
                    error_type=REDRIVE_ERROR_TYPE,
                    error_text=(
                        f"assigned to tenant {tenant.value} by {actor}{forced}, "
                        f"re-driven from {quarantine}"
                    ),
                    occurred_at=now,
                ),
            )
        log.warning(
            "quarantine_redriven",
            actor=actor,
            tenant=tenant.value,
            quarantine=quarantine,
            message_ids=[a.message_id for a in moved],
            forced=force,
        )


def _refuse(
    chosen: Sequence[Adopted],
    wanted: set[str],
    quarantine: str,
    tenant: TenantId,
    *,
    force: bool,
    read: int,
) -> None:
    """Raise QuarantineRedriveError naming every id not found and every message that may not
    go to tenant; nothing has been moved yet."""
    problems: list[str] = []
    missing = sorted(wanted - {a.message_id for a in chosen})
    if missing:
        problems.append(
            f"not in {quarantine} (among the {read} message(s) read): {', '.join(missing)}"
        )
    counts = Counter(a.message_id for a in chosen)
    for message_id, count in sorted(counts.items()):
        if count > 1:
            # A producer sets the id: another message may carry it, and must not be assigned to
            # the tenant with the one the operator looked at.
            problems.append(
                f"{message_id}: {count} messages in {quarantine} carry this id; re-drive one by "
                "its id only where the id is the message's alone (list them with quarantine list)"
            )
    for adopted in chosen:
        refusal = _body_tenant_refusal(adopted.delivery.body, tenant)
        if refusal is not None:
            problems.append(f"{adopted.message_id}: {refusal}")
        claimed = claimed_tenant(adopted.delivery.properties.get(TENANT_PROPERTY))
        if claimed is not None and claimed != tenant and not force:
            problems.append(
                f"{adopted.message_id}: its tenantUUID property names tenant {claimed.value!r}; "
                f"give --force to assign it to {tenant.value!r}"
            )
    if problems:
        raise QuarantineRedriveError(
            "quarantine re-drive refused, nothing moved: " + "; ".join(problems)
        )


def _assigned(adopted: Adopted, tenant: TenantId) -> WireMessage:
    """The message as it goes to tenant's queue: stamped with tenant, error removed, attempts
    reset, no expiry (redrive_copy)."""
    copy = redrive_copy(adopted.delivery.properties, adopted.delivery)
    return replace(copy, properties={**copy.properties, TENANT_PROPERTY: tenant.value})


__all__ = ["Cause", "QuarantineAdmin", "QuarantineRedriveError", "QuarantinedView"]
