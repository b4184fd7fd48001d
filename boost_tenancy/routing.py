"""Routing topologies: which broker queue a (queue, tenant) pair uses, chosen per logical queue.

ROUTED (the default) stores each tenant's messages in tenant.<tenant>.<queue> while the Java
services keep sending to the shared <queue>, which the runners' TenantRouter empties into the
tenants' queues; PER_TENANT is the same storage with no router; SHARED keeps one queue for all
tenants, read through per-tenant selectors.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.messages import check_queue_name
from boost_tenancy.tenancy import MAX_TENANT_LENGTH, TenantId

DLQ_PREFIX: Final = "DLQ."
"""DLQ.<queue>: the dead-letter queue of a broker queue."""
QUARANTINE_SUFFIX: Final = ".quarantine"
"""DLQ.<queue>.quarantine: where messages of a missing or foreign tenant go."""
TENANT_QUEUE_PREFIX: Final = "tenant."
"""Per-tenant queues: tenant.<tenant>.<queue>; Classic secures tenant.<t>.>, Artemis tenant.<t>.#"""
PARKED_QUEUE_PREFIX: Final = "parked."
"""Messages of tenants without a running processor wait in parked.<tenant>.<queue>."""
MAX_QUEUE_NAME: Final = 200
"""The longest broker queue name the toolkit makes (messages.check_queue_name)."""
MAX_LOGICAL_QUEUE: Final = MAX_QUEUE_NAME - len(
    f"{DLQ_PREFIX}{TENANT_QUEUE_PREFIX}{'t' * MAX_TENANT_LENGTH}.{QUARANTINE_SUFFIX}"
)
"""The longest logical queue whose every derived queue fits for every tenant: the quarantine of
a tenant's queue, DLQ.tenant.<tenant>.<queue>.quarantine, is the longest of them."""
BROKER_RESERVED: Final = (
    ("ActiveMQ.", "ActiveMQ Classic's own destinations: ActiveMQ.DLQ, advisories, statistics"),
    ("activemq.", "Artemis's management and notification addresses"),
    ("BROKER.DLQ.", "the dead letters Artemis keeps per address (the project's broker.xml)"),
    ("EXP.", "the expired messages Artemis keeps per address (the project's broker.xml)"),
)
"""Name prefixes the brokers use for themselves: a queue of the toolkit there would take over
a broker destination (a composite queue named ActiveMQ.DLQ would capture Classic's dead letters,
and the Classic plugin configured with it stops the broker at start)."""
BROKER_RESERVED_NAMES: Final = frozenset({"DLA", "ExpiryQueue"})
"""Artemis's dead-letter and expiry addresses."""


class Topology(enum.StrEnum):
    """How a logical queue maps to broker queues."""

    ROUTED = "routed"
    """Stored per tenant like PER_TENANT; what arrives on the shared queue is routed there."""
    SHARED = "shared"
    PER_TENANT = "per_tenant"


def parse_topology(value: object, what: str) -> Topology:
    if isinstance(value, str) and value in Topology.__members__.values():
        return Topology(value)
    choices = ", ".join(t.value for t in Topology)
    raise ConfigError(f"{what}: unknown topology {value!r}; expected one of {choices}")


def _split_tenant_prefix(name: str, prefix: str) -> tuple[TenantId, str] | None:
    """(tenant, rest) when name is <prefix><tenant>.<rest> with a valid tenant, else None."""
    if not name.startswith(prefix):
        return None
    # The tenant grammar has no dot, so the first dot after the prefix ends the tenant.
    raw_tenant, dot, rest = name[len(prefix) :].partition(".")
    if not dot or not rest:
        return None
    try:
        return TenantId.parse(raw_tenant), rest
    except InvalidTenantError:
        return None


def check_logical_queue(queue: str) -> str:
    """A queue name services may use: valid, and outside the per-tenant, parked, dead-letter and
    quarantine namespaces.

    A shared queue named tenant.<t>.x would fall under tenant t's broker permissions, and the
    dispatcher would read it as t's per-tenant queue x; parked.<t>.x belongs to the sweeper.
    """
    check_queue_name(queue)
    _checked_logical_queue(queue)
    return queue


@functools.lru_cache(maxsize=4096)
def _checked_logical_queue(queue: str) -> None:
    # Asked for every message sent and every route resolved, of the few queues a process
    # uses: a valid name is remembered (a refused one raises, and is checked again next time);
    # the caller gets its own argument back, never an equal one cached before.
    for prefix, owner in BROKER_RESERVED:
        if queue.startswith(prefix):
            raise ConfigError(
                f"invalid queue name {queue!r}: {prefix}* names are reserved for the broker, "
                f"{owner}"
            )
    if queue in BROKER_RESERVED_NAMES:
        raise ConfigError(
            f"invalid queue name {queue!r}: reserved for the broker, Artemis's own address"
        )
    if len(queue) > MAX_LOGICAL_QUEUE:
        raise ConfigError(
            f"invalid queue name {queue!r}: {len(queue)} characters, and a service queue may "
            f"have at most {MAX_LOGICAL_QUEUE} so that DLQ.tenant.<tenant>.<queue>.quarantine "
            f"fits in {MAX_QUEUE_NAME} for every tenant"
        )
    # DLQ.<queue> and DLQ.<queue>.quarantine are derived names: a service queue shaped like one
    # would share its dead letters with another queue's, and re-drive would mix them.
    if queue.startswith(DLQ_PREFIX) or queue.endswith(QUARANTINE_SUFFIX):
        raise ConfigError(
            f"invalid queue name {queue!r}: {DLQ_PREFIX}<queue> and <queue>{QUARANTINE_SUFFIX} "
            "are reserved for dead-letter and quarantine queues"
        )
    for prefix in (TENANT_QUEUE_PREFIX, PARKED_QUEUE_PREFIX):
        if _split_tenant_prefix(queue, prefix) is not None:
            raise ConfigError(
                f"invalid queue name {queue!r}: {prefix}<tenant>.<queue> names are reserved "
                "for per-tenant and parked queues"
            )


def parse_overrides(raw: str, what: str) -> dict[str, Topology]:
    """The topology of each queue of queue=topology,...: every queue a service queue
    (check_logical_queue), given once; errors name what (the variable it came from)."""
    overrides: dict[str, Topology] = {}
    for item in raw.split(","):
        entry = item.strip()
        if not entry:
            continue
        queue, eq, value = (part.strip() for part in entry.partition("="))
        if not eq or not queue or not value:
            raise ConfigError(f"{what}: expected queue=topology, got {entry!r}")
        if queue in overrides:
            raise ConfigError(f"{what}: queue {queue!r} given twice")
        try:
            check_logical_queue(queue)
        except ConfigError as exc:
            raise ConfigError(f"{what}: {exc}") from None
        overrides[queue] = parse_topology(value, what)
    return overrides


def parked_queue(queue: str, tenant: TenantId | str) -> str:
    """parked.<tenant>.<queue>: where the sweeper moves a tenant's messages of a shared queue."""
    tenant_id = TenantId.parse(tenant)
    return check_queue_name(f"{PARKED_QUEUE_PREFIX}{tenant_id.value}.{check_logical_queue(queue)}")


@dataclass(frozen=True, slots=True)
class Routing:
    """The topology of every logical queue: default, with per-queue overrides."""

    default: Topology = Topology.ROUTED
    overrides: Mapping[str, Topology] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "default", parse_topology(self.default, "Routing.default"))
        checked = {
            check_logical_queue(queue): parse_topology(topology, f"Routing.overrides[{queue!r}]")
            for queue, topology in dict(self.overrides).items()
        }
        # Read-only, so a Routing shared by producer, runner and admin cannot drift apart.
        object.__setattr__(self, "overrides", MappingProxyType(checked))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Routing):
            return NotImplemented
        return self.default is other.default and dict(self.overrides) == dict(other.overrides)

    def __hash__(self) -> int:
        return hash((self.default, frozenset(self.overrides.items())))

    def topology(self, queue: str) -> Topology:
        """The topology of a logical queue."""
        return self.overrides.get(queue, self.default)

    def routes(self, queue: str) -> bool:
        """Whether the logical queue's shared queue is emptied into the per-tenant queues by a
        TenantRouter: the queue is ROUTED."""
        return self.topology(check_logical_queue(queue)) is Topology.ROUTED

    def physical(self, queue: str, tenant: TenantId | str) -> str:
        """The broker queue that holds tenant's messages of the logical queue: the queue itself
        when SHARED, else tenant.<tenant>.<queue> (a ROUTED queue's producers of this toolkit
        send there directly, skipping the router)."""
        tenant_id = TenantId.parse(tenant)
        check_logical_queue(queue)
        if self.topology(queue) is Topology.SHARED:
            return queue
        return check_queue_name(f"{TENANT_QUEUE_PREFIX}{tenant_id.value}.{queue}")

    def logical(self, physical_queue: str) -> str:
        """The logical queue of a broker queue: tenant.<tenant>.<queue> becomes <queue>."""
        return _logical(physical_queue)


def tenant_queue_of(physical_queue: str) -> tuple[TenantId, str] | None:
    """(tenant, logical queue) of a per-tenant queue tenant.<tenant>.<queue>; None for any
    other name."""
    return _split_tenant_prefix(physical_queue, TENANT_QUEUE_PREFIX)


@functools.lru_cache(maxsize=4096)
def _logical(physical_queue: str) -> str:
    # Asked for every delivery (the dispatcher; the gate's exemptions), of the few queues a
    # runner consumes: remembered, it skips parsing the tenant each time.
    split = _split_tenant_prefix(physical_queue, TENANT_QUEUE_PREFIX)
    return physical_queue if split is None else split[1]


DEFAULT_ROUTING: Final = Routing()
"""Every queue routed: each tenant's messages are stored in tenant.<tenant>.<queue>, where this
toolkit's producers send; what Java services send to the shared <queue> is moved there by the
TenantRouter every runner of the queue starts."""
