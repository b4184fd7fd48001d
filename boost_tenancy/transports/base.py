"""The transport protocol: a handful of operations and a declared set of capabilities.

Everything tenant-aware lives above this line; a transport moves bodies and string properties,
evaluates selectors and reports what the broker can and cannot do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from boost_tenancy.errors import ConfigError, QueueStatsUnavailableError, TransportError
from boost_tenancy.frozen import fast_init
from boost_tenancy.messages import Body, WireMessage, check_queue_name
from boost_tenancy.selectors import SelectorLike
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.capabilities import TransportCapabilities


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    """How many messages one broker queue holds, as its broker reports them."""

    waiting: int
    """Stored and not delivered to any consumer yet; scheduled messages are not counted."""
    in_flight: int
    """Delivered to a consumer and not acknowledged yet."""
    scheduled: int | None = None
    """Held back by the broker for a delay (delayed retries) and bound for this queue; None
    where the broker does not count them per queue (Classic's scheduler serves the whole broker)."""

    @property
    def stored(self) -> int:
        """Every message the queue holds: waiting or in flight (scheduled ones aside)."""
        return self.waiting + self.in_flight


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedQueue:
    """One broker queue a listing found: its name, counts and consumers, as its broker reports."""

    name: str
    stats: QueueStats
    consumers: int
    """Subscriptions consuming from the queue right now."""


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """A message as a transport delivered it, before any tenant check."""

    queue: str
    body: Body
    properties: Mapping[str, str]
    correlation_id: str | None
    redelivered: bool
    subscription_id: str
    delivery_count: int | None = None
    """Times delivered before, when the transport knows it (native_delivery_count)."""
    broker_message_id: str | None = None
    """The broker's own message id (changes when the toolkit re-sends a copy)."""
    expires_at_ms: int | None = None
    """When the broker would expire the message (epoch milliseconds), as it came with it; None
    when it never expires. A retry or routing copy keeps it, a dead letter never does."""
    token: object = None
    """Transport-private handle used to acknowledge this delivery."""


OnDelivery = Callable[[Delivery], None]


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """One subscription to open: queue, selector, prefetch and where deliveries go."""

    queue: str
    selector: SelectorLike | None
    prefetch: int
    on_delivery: OnDelivery


@dataclass(frozen=True, slots=True)
class SendRoute:
    """Messages of tenant sent to the shared queue source are stored in target instead."""

    source: str
    tenant: TenantId
    target: str


@dataclass(frozen=True, slots=True)
class BrokerCount:
    """One count a broker-side tenant layer keeps (the project's Artemis plugin), since its
    broker started: what it routed, refused or quarantined at send time."""

    event: str
    """routed, refused or quarantined."""
    tenant: str
    """The tenant (empty for a quarantined message, which names none)."""
    queue: str
    """The shared queue it was sent to."""
    reason: str
    """Why it was refused (rate, size, backlog) or quarantined (MissingTenant, InvalidTenant)."""
    count: int


class Outgoing(NamedTuple):
    """A message to send: to which queue, and held back by the broker for how long."""

    queue: str
    message: WireMessage
    delay_ms: int = 0


class PartlyForwardedError(TransportError):
    """send_then_ack_many without atomic_forward: the broker refused some copies. forwarded
    are the deliveries whose copies it took, their originals acknowledged; the others stay
    unacknowledged, to move again or dead-letter."""

    def __init__(self, message: str, forwarded: Sequence[Delivery]) -> None:
        super().__init__(message)
        self.forwarded = list(forwarded)


class BatchSink(Protocol):
    """An open batch of sends: add messages, then commit (confirmed) or abort (none stored)."""

    def add(self, queue: str, message: WireMessage) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


@runtime_checkable
class Subscription(Protocol):
    """A live subscription; its id is stable across reconnections."""

    @property
    def id(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def selector(self) -> SelectorLike | None: ...


class Transport(Protocol):
    """The operations the toolkit needs from a broker connection.

    on_delivery callbacks run on the transport's receiving thread: they must only hand the
    delivery over (to a worker queue) and return at once.
    """

    @property
    def capabilities(self) -> TransportCapabilities: ...

    def connect(self) -> None:
        """Open the connection; raises TransportError when the broker cannot be reached."""

    def close(self) -> None:
        """Close the connection; unacknowledged deliveries return to their queues."""

    def send(self, queue: str, message: WireMessage, *, delay_ms: int = 0) -> None:
        """Send and wait until the broker confirms it holds the message."""

    def send_batch(self, items: Sequence[tuple[str, WireMessage]], *, atomic: bool = True) -> None:
        """Send several messages, all confirmed when this returns.

        atomic: one broker transaction, all or none stored. Otherwise the frames go out in order
        and one receipt on the last confirms them all; a failure may leave a prefix stored.
        """

    def open_batch(self, *, atomic: bool = True) -> BatchSink:
        """Start a batch; atomic batches may stream to the broker inside a transaction."""

    def subscribe(
        self, queue: str, *, selector: SelectorLike | None, prefetch: int, on_delivery: OnDelivery
    ) -> Subscription:
        """Consume with individual client acknowledgement and about prefetch unacknowledged
        messages (exactly prefetch where capabilities.prefetch_counts_messages)."""

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> Sequence[Subscription]:
        """Open several subscriptions at once, confirmed together (1,000 tenants start fast)."""

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop a subscription; its unacknowledged deliveries return to the queue."""

    def ack(self, delivery: Delivery) -> None:
        """Acknowledge one delivery; the broker forgets the message."""

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        """Send items (a handler's output, a retry copy, a dead letter), then ack delivery.

        Atomic where capabilities.atomic_forward; otherwise every item is confirmed before the
        ack, so a crash in between duplicates messages and never loses one.
        """

    def send_then_ack_many(
        self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]
    ) -> Sequence[Delivery]:
        """send_then_ack() for many deliveries at once: one transaction where atomic_forward holds.

        For bulk moves (parking, re-driving), where one broker commit per message is too slow.
        A delivery whose connection is gone is skipped (the broker redelivers it); returns the
        deliveries moved, so that callers report and count only those. Where a refusal leaves
        some moved (the AMQP transport without atomic_forward; the in-memory one), it raises
        PartlyForwardedError naming them: a caller moving the rest again moves only those. A
        refused STOMP SEND ends its connection (an ERROR frame): none is live then, and what was
        stored before it may come back as a duplicate, as after a crash.
        """

    def is_live(self, delivery: Delivery) -> bool:
        """False when the connection that delivered it is gone: the broker will redeliver it."""


@runtime_checkable
class ConnectionStatus(Protocol):
    """What a transport tells of its connection now, for readiness (ProcessorRunner.health):
    every built-in transport has it; a transport without it is taken as connected once started.
    """

    @property
    def is_connected(self) -> bool:
        """True while the connection to the broker is up (False while reconnecting)."""

    def is_open(self, subscription: Subscription) -> bool:
        """True when subscription consumes on the current connection (re-created after a
        reconnection, not refused by the broker)."""


@runtime_checkable
class QueueStatsReader(Protocol):
    """The optional operation of a transport whose capabilities declare queue_statistics."""

    def queue_stats(self, queues: Sequence[str]) -> Mapping[str, QueueStats | None]:
        """The counts of each named broker queue; None for a queue the broker does not have.

        Asking creates no queue. Raises QueueStatsUnavailableError when the broker cannot
        answer (not configured for it), TransportError when the connection fails.
        """
        ...


@runtime_checkable
class QueueLister(Protocol):
    """The optional operation of a transport whose capabilities declare queue_listing."""

    def list_queues(self, prefixes: Sequence[str]) -> Sequence[ListedQueue]:
        """Every broker queue whose name starts with one of prefixes (each a queue name ending
        in a dot, see check_queue_prefix), sorted by name; a prefix no queue has lists none.

        Asking creates no queue. Raises QueueStatsUnavailableError when the broker cannot
        answer, TransportError when the connection fails.
        """
        ...


def check_queue_prefix(prefix: str) -> str:
    """A prefix of queue names a listing may ask for: a valid queue name followed by a dot, so it
    ends on a whole segment of the dotted name (what a Classic wildcard matches)."""
    if not isinstance(prefix, str) or not prefix.endswith(".") or prefix.endswith(".."):
        raise ConfigError(f"invalid queue prefix {prefix!r}: expected a queue name and a dot")
    check_queue_name(prefix[:-1])
    return prefix


@runtime_checkable
class SendRouteInstaller(Protocol):
    """The optional operation of a transport whose capabilities declare send_time_routes."""

    def install_send_routes(self, routes: Sequence[SendRoute]) -> int:
        """Make the broker route each tenant's messages sent to route.source into route.target
        from now on, creating target where it is missing; routes already in place are kept.
        Returns how many routes were added. Raises TransportError when the broker refuses (a
        missing permission) or the connection fails."""
        ...

    def send_routes(self) -> list[SendRoute]:
        """The routes the broker makes now, of the toolkit's own (sorted by target)."""
        ...

    def remove_send_routes(self, routes: Sequence[SendRoute]) -> int:
        """Stop routing routes at send time (their queues stay, with what they hold); returns how
        many the broker had."""
        ...

    def routed_by_broker(self) -> list[str]:
        """The shared queues whose every tenant the broker routes by itself (the project's broker
        plugin), which need no route per tenant (sorted)."""
        ...


@runtime_checkable
class BrokerCountsReader(Protocol):
    """The optional operation of a transport whose broker may run a tenant layer of its own
    (send_time_routes: Artemis, with the project's plugin)."""

    def broker_counts(self) -> list[BrokerCount] | None:
        """What the broker's tenant layer counted; None where none runs there."""
        ...


def broker_counts_reader(transport: Transport) -> BrokerCountsReader | None:
    """transport as a BrokerCountsReader where its capabilities declare send_time_routes (read
    them after connect()), else None."""
    if transport.capabilities.send_time_routes and isinstance(transport, BrokerCountsReader):
        return transport
    return None


@runtime_checkable
class BrokerPluginLister(Protocol):
    """The optional operation of a transport whose broker says which plugins it runs (Artemis,
    through its management address)."""

    def broker_plugins(self) -> list[str]:
        """The class names of the broker plugins the broker runs. Raises TransportError when
        the broker refuses (a missing permission) or the connection fails."""
        ...


def send_route_installer(transport: Transport) -> SendRouteInstaller | None:
    """transport as a SendRouteInstaller where its capabilities declare send_time_routes (read
    them after connect()), else None."""
    if transport.capabilities.send_time_routes and isinstance(transport, SendRouteInstaller):
        return transport
    return None


def queue_lister(transport: Transport) -> QueueLister:
    """transport as a QueueLister where its capabilities declare queue_listing (read them after
    connect()); QueueStatsUnavailableError naming the missing capability otherwise."""
    if transport.capabilities.queue_listing and isinstance(transport, QueueLister):
        return transport
    raise QueueStatsUnavailableError(
        f"{_broker_named(transport)} lists no queues to a client: listing a tenant's queues "
        "needs ActiveMQ Classic (its statistics plugin) or Artemis (its management address); "
        "read them in the broker's own console (the transport declares no queue_listing)"
    )


def queue_stats_reader(transport: Transport) -> QueueStatsReader:
    """transport as a QueueStatsReader where its capabilities declare queue_statistics (read
    them after connect()); QueueStatsUnavailableError otherwise."""
    if transport.capabilities.queue_statistics and isinstance(transport, QueueStatsReader):
        return transport
    raise QueueStatsUnavailableError(
        f"{_broker_named(transport)} gives a client no queue statistics: the counts need "
        "ActiveMQ Classic (its statistics plugin) or Artemis (its management address); read "
        "them in the broker's own console (the transport declares no queue_statistics)"
    )


def _broker_named(transport: Transport) -> str:
    """The broker as it named itself when connected (its server), else 'the broker'."""
    server = getattr(transport, "server", None)
    return f"the broker ({server})" if isinstance(server, str) and server else "the broker"
