"""What the broker behind a transport does natively, declared by the transport after it
connects; the toolkit above adapts to it and never asks which broker it is."""

from __future__ import annotations

from dataclasses import dataclass

from boost_tenancy.selectors import SelectorLike


@dataclass(frozen=True, slots=True)
class NeededPlugin:
    """A broker plugin a transport needs on its broker, and what goes wrong without it."""

    class_name: str
    without_it: str
    see: str
    """Where the documentation says why, and how to run it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportCapabilities:
    """What the broker behind a transport does natively; the toolkit adapts to it.

    A transport derives them from the broker it is connected to (STOMP: from CONNECTED's server
    header), so read them after connect().
    """

    server_side_selectors: bool
    """The broker filters by selector; otherwise the consumer-side tenant check is all there is.
    Read by the dispatcher, which must not rely on a selector the broker does not apply."""
    native_delivery_count: bool
    """The broker counts delivery attempts (AMQP header.delivery_count); STOMP exposes none.
    Read by resilience.redelivery.strategy_for: the broker's count is added to boostAttempt."""
    delayed_delivery: bool
    """The broker holds a message back for a delay (scheduled delivery).
    Read by resilience.redelivery.strategy_for: without it a retry holds the original
    unacknowledged for its backoff (HeldRedelivery) instead of scheduling a copy."""
    atomic_forward: bool
    """Sending a copy and acknowledging the original can be one transaction (Classic STOMP).
    Read by the transport's own send_then_ack and send_then_ack_many; where it is False (Artemis
    STOMP ignores ACK inside a transaction) every copy is confirmed before the ack, so a crash
    between the two duplicates a message, with the same boostMessageId, and never loses one."""
    atomic_batches: bool
    """An atomic batch is one broker transaction, all of it stored or none (STOMP on both
    ActiveMQs, AMQP on Artemis). Where it is False (RabbitMQ's AMQP 1.0 plugin has no
    transactions) open_batch and send_batch refuse atomic=True instead of pretending."""
    prefetch_counts_messages: bool
    """prefetch bounds the unacknowledged messages of a subscription exactly (Classic). Where it
    is False the broker bounds bytes (Artemis consumer-window-size): the transport asks for
    prefetch times an expected message size, so smaller messages are more in flight and one
    larger than the window still comes alone. Read by the contract suite; the runner's work
    queue takes whatever arrives and never blocks the receiving thread."""
    queue_statistics: bool = False
    """The transport implements QueueStatsReader: the broker reports how many messages a named
    queue holds and how many are in flight (Classic with its statistics plugin). Read by
    ops.stats through queue_stats_reader; where the broker is configured without the means
    (Classic without the plugin) queue_stats raises QueueStatsUnavailableError."""
    queue_listing: bool = False
    """The transport implements QueueLister: the broker lists every queue whose name starts with
    a prefix, with its counts and consumers (Classic's statistics plugin asked with a wildcard).
    Read by ops.queue_admin through queue_lister; where it is False the tenant's queues cannot
    be listed nor a drain watched, and those commands refuse with the capability named."""

    send_time_routes: bool = False
    """The transport implements SendRouteInstaller: the broker can be told at run time to store
    a tenant's messages sent to a shared queue in the tenant's queue (Artemis: an exclusive
    divert per tenant, made through its management address). Read by the ProcessorRunner,
    which installs its tenants' routes at start where it holds; elsewhere the TenantRouter
    moves those messages after they are stored (docs/fairness.md)."""

    broker_plugins_needed: tuple[NeededPlugin, ...] = ()
    """Broker plugins without which one of the transport's guarantees does not hold on its
    broker (STOMP on Artemis 2.44: the project's StompLossPlugin, without which a lost
    connection may hold messages until the broker restarts). Read by ops.broker_plugins, which
    the ProcessorRunner asks at start: it warns, naming each the broker does not run, where the
    transport implements BrokerPluginLister."""

    def guard_selector(self, selector: SelectorLike) -> SelectorLike | None:
        """selector where the broker applies it, else None: for reads kept apart by the tenant
        guard anyway (a per-tenant parked or dead-letter queue, an operator's read that leaves
        other tenants' messages unacknowledged), so that they work on a broker without
        selectors. A shared queue's consumers never use this: there the selector is what keeps
        tenants apart, and a broker without it is refused."""
        return selector if self.server_side_selectors else None


__all__ = ["NeededPlugin", "TransportCapabilities"]
