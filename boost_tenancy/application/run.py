"""Building a runner from settings: the one place where a processor is wired to its transport,
error store, fairness limits, accounting and metrics, and where all of them are closed again.
Opening the transport itself is brokers.py's.

The CLI (`boost-tenancy run`) and the sample services both call run_processor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from boost_tenancy.application.brokers import open_broker
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.runner import ProcessorRunner
from boost_tenancy.application.wiring import FairnessWiring
from boost_tenancy.errors import ConfigError, QueueStatsUnavailableError
from boost_tenancy.ops.queue_states import (
    QueueStateWatcher,
    SqlQueueStateStore,
    open_queue_state_store,
)
from boost_tenancy.ops.stats_metrics import QueueGauges
from boost_tenancy.processing.aio import AnyMiddleware
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.quotas.backlog import BrokerBacklog
from boost_tenancy.quotas.ttl import effective_ttl
from boost_tenancy.resilience.error_store import ErrorStore, open_error_store
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.base import Transport


def run_processor(
    processor: TenantProcessor,
    tenants: Sequence[TenantId],
    settings: AppSettings,
    env: Mapping[str, str] | None = None,
    *,
    store: ErrorStore | None = None,
    middleware: Sequence[AnyMiddleware] = (),
) -> int:
    """Run processor for tenants until SIGTERM/SIGINT; returns the runner's exit code.

    middleware (Middleware, AsyncMiddleware or consume functions, outermost first) goes after
    the accounting and the handling metrics and before the processor's own middleware
    (TenantProcessor.middleware), the retry middleware and the publish steps, unless a piece is
    placed before or after a named one (processing/middleware.py lists the names).

    Opens the error store (unless one is given), the transport and the fairness wiring the
    settings ask for, starts the metrics server (with the queue gauges of the tenants' queues
    once the transport is connected, when BOOST_QUEUE_GAUGES_S asks for them), and closes every
    one of them on the way out; what handlers publish gets the settings' publishing limits and
    message time-to-live.
    """
    owned_store = store is None
    error_store = open_error_store(settings.error_store_url) if store is None else store
    fairness: FairnessWiring | None = None
    backlog: BrokerBacklog | None = None
    queue_states: SqlQueueStateStore | None = None
    gauges: QueueGauges | None = None
    try:
        fairness = FairnessWiring.build(
            settings.fairness,
            workers=settings.runner.workers,
            metrics_port=settings.metrics_port,
            metrics_host=settings.metrics_host,
            metrics_tenant_label=settings.metrics_tenant_label,
            policy_store_url=settings.policy_store_url,
            usage_store_url=settings.usage_store_url,
            usage_flush_s=settings.usage_flush_s,
            publish_redis_url=settings.publish_redis_url,
        )
        transport = open_broker(settings, env)
        # The backlog quota may come from the settings or, at run time, from a tenant's policy.
        if settings.publish.max_queued_messages or settings.policy_store_url:
            backlog = BrokerBacklog(transport, settings.routing)
        # Queues operators drained or deleted (`boost-tenancy queues`) live in the policy store.
        if settings.policy_store_url:
            queue_states = open_queue_state_store(settings.policy_store_url)
        if settings.queue_gauges_s:
            gauges = _queue_gauges(processor, tenants, settings, transport, fairness)
        runner = ProcessorRunner(
            processor,
            transport,
            tenants,
            error_store=error_store,
            settings=settings.runner,
            routing=settings.routing,
            default_tenant=settings.default_tenant,
            route_at_send=settings.send_routes,
            gate=fairness.gate,
            observers=fairness.observers,
            middleware=(*fairness.middleware, *middleware),
            publish_guard=fairness.publish_guard(settings.publish, backlog=backlog),
            message_ttl=effective_ttl(
                settings.message_ttl,
                None if fairness.policies is None else fairness.policies.policy_of,
            ),
            queue_states=None
            if queue_states is None
            else QueueStateWatcher(queue_states, poll_s=settings.queue_state_poll_s),
            on_connected=() if gauges is None else (_starter(gauges),),
        )
        fairness.start(runner.health, tenants)  # a metrics port in use stops here
        if backlog is not None:
            backlog.start()
        return runner.run()
    finally:
        if gauges is not None:
            gauges.close()
        if queue_states is not None:
            queue_states.close()
        if backlog is not None:
            backlog.close()
        if fairness is not None:
            fairness.close()
        if owned_store:
            error_store.close()


def _queue_gauges(
    processor: TenantProcessor,
    tenants: Sequence[TenantId],
    settings: AppSettings,
    transport: Transport,
    fairness: FairnessWiring,
) -> QueueGauges:
    """The queue gauges of the runner's tenants and its processor's queues, on its /metrics
    with the tenant label the other families have (BOOST_METRICS_TENANT_LABEL)."""
    if fairness.server is None:  # settings built in code; from_env refuses it already
        raise ConfigError(
            "BOOST_QUEUE_GAUGES_S set without BOOST_METRICS_PORT: nothing would serve the gauges"
        )
    gauges = QueueGauges(
        transport,
        tenants,
        processor.queues,
        routing=settings.routing,
        refresh_s=settings.queue_gauges_s,
    )
    fairness.server.add_source(gauges)
    return gauges


def _starter(gauges: QueueGauges) -> Callable[[], None]:
    """Starts the gauges once the runner's transport is connected: a broker that gives no queue
    statistics stops start-up, since a setting whose mechanism is missing is an error."""

    def start() -> None:
        try:
            gauges.start()
        except QueueStatsUnavailableError as exc:
            raise ConfigError(
                f"BOOST_QUEUE_GAUGES_S={gauges.refresh_s:g} asks for queue gauges, but {exc}; "
                "set it to 0 for this broker"
            ) from None

    return start


__all__ = ["run_processor"]
