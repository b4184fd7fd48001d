"""What an entry point adds to a runner for fairness: the gate (on unless BOOST_FAIRNESS=off),
the accounting observer, the metrics server and the operators' run-time policies, built from
AppSettings (config.py) and closed together; and start_metrics_server, the same metrics and
probe endpoint for a process that builds its own ProcessorRunner."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from boost_tenancy.fairness.accounting import Accounting, Event
from boost_tenancy.fairness.accounting_server import (
    DEFAULT_METRICS_HOST,
    AccountingServer,
    HealthSource,
    MetricsSource,
)
from boost_tenancy.fairness.gate import FairnessGate
from boost_tenancy.fairness.handling_metrics import HandlingMetrics
from boost_tenancy.fairness.settings import FairnessSettings, build_fairness
from boost_tenancy.fairness.usage import DEFAULT_FLUSH_S, UsageRecorder, open_usage_store
from boost_tenancy.processing.middleware import DispatchObserver
from boost_tenancy.quotas.backlog import BacklogSource
from boost_tenancy.quotas.guard import PublishGuard
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.policy import PolicyResolver
from boost_tenancy.quotas.policy_store import open_policy_store
from boost_tenancy.quotas.shared import RedisPublishBuckets
from boost_tenancy.tenancy import TenantId


@dataclass(frozen=True, slots=True, kw_only=True)
class FairnessWiring:
    """The gate and observers for ProcessorRunner, and the metrics server to start with it."""

    observers: tuple[DispatchObserver, ...]
    accounting: Accounting
    server: AccountingServer | None
    gate: FairnessGate | None = None
    policies: PolicyResolver | None = None
    """The tenants' run-time policies (BOOST_POLICY_STORE), read by the publishing guard."""
    handling: HandlingMetrics | None = None
    """Handling latency and in-flight per queue: the runner's outermost middleware."""
    usage: UsageRecorder | None = None
    """Writes the accounting's counts to the usage store (BOOST_USAGE_STORE)."""
    publish_buckets: RedisPublishBuckets | None = None
    """The publishing buckets every process shares (BOOST_PUBLISH_REDIS_URL)."""

    @property
    def middleware(self) -> tuple[HandlingMetrics, ...]:
        """What ProcessorRunner(middleware=...) gets, outermost first."""
        return () if self.handling is None else (self.handling,)

    @classmethod
    def build(
        cls,
        fairness: FairnessSettings | None,
        *,
        workers: int,
        metrics_port: int = 0,
        metrics_host: str = DEFAULT_METRICS_HOST,
        metrics_tenant_label: bool = False,
        policy_store_url: str = "",
        usage_store_url: str = "",
        usage_flush_s: float = DEFAULT_FLUSH_S,
        publish_redis_url: str = "",
    ) -> FairnessWiring:
        """The gate when fairness is given, accounting always, a metrics server on a port, the
        policy resolver when a policy store is named, the shared publishing buckets when a
        publish Redis is named."""
        accounting = Accounting()
        gate: FairnessGate | None = None
        if fairness is not None:

            def on_event(tenant: TenantId, event: str) -> None:
                # The gate names only accounting's events; record() checks at run time.
                accounting.record(tenant, cast(Event, event))

            gate = build_fairness(fairness, workers=workers, on_event=on_event)
        handling = HandlingMetrics()
        server = (
            metrics_server(
                port=metrics_port,
                host=metrics_host,
                accounting=accounting,
                handling=handling,
                tenant_label=metrics_tenant_label,
            )
            if metrics_port
            else None
        )
        policies = open_policies(policy_store_url)
        usage = (
            UsageRecorder(accounting, open_usage_store(usage_store_url), flush_s=usage_flush_s)
            if usage_store_url
            else None
        )
        publish_buckets = (
            RedisPublishBuckets.from_url(publish_redis_url) if publish_redis_url else None
        )
        return cls(
            observers=(accounting,),
            accounting=accounting,
            server=server,
            gate=gate,
            policies=policies,
            handling=handling,
            usage=usage,
            publish_buckets=publish_buckets,
        )

    def start(self, health: HealthSource | None = None, tenants: Iterable[TenantId] = ()) -> None:
        """Start serving metrics and writing usage (what build made of the settings); with
        health (ProcessorRunner.health), the server answers the probes and shows its gauges;
        tenants, those the runner serves, answer at /tenants/<tenant> (any other never counted
        is 404). A metrics port in use is a ConfigError naming it."""
        if self.server is not None:
            if health is not None:
                self.server.watch(health)
            self.server.serve_tenants(tenants)
            self.server.start()
        if self.usage is not None:
            self.usage.start()

    def publish_guard(
        self, limits: PublishLimits, *, backlog: BacklogSource | None = None
    ) -> PublishGuard:
        """A PublishGuard with limits as every tenant's default, its refusals counted in the
        accounting (publish_refused_rate, publish_refused_size), its buckets in the shared
        Redis when BOOST_PUBLISH_REDIS_URL named one."""

        def on_refused(tenant: TenantId, queue: str, reason: str) -> None:
            self.accounting.record(tenant, cast(Event, f"publish_refused_{reason}"))

        policy_of = None if self.policies is None else self.policies.policy_of
        return PublishGuard(
            limits,
            on_refused=on_refused,
            policy_of=policy_of,
            backlog=backlog,
            shared=self.publish_buckets,
        )

    def close(self) -> None:
        """Stop the metrics server, close what the gate holds (tier store, Redis) and the
        policy store, and write the last usage."""
        if self.server is not None:
            self.server.stop()
        if self.gate is not None:
            self.gate.close()
        if self.policies is not None:
            self.policies.close()
        if self.usage is not None:
            self.usage.close()  # after the runner stopped: its last counts are written
        if self.publish_buckets is not None:
            self.publish_buckets.close()


def open_policies(url: str) -> PolicyResolver | None:
    """A PolicyResolver over the policy store url names, or None for an empty url."""
    return PolicyResolver(open_policy_store(url)) if url else None


def metrics_server(
    *,
    port: int = 0,
    host: str = DEFAULT_METRICS_HOST,
    health: HealthSource | None = None,
    accounting: Accounting | None = None,
    handling: HandlingMetrics | None = None,
    tenant_label: bool = False,
    sources: Sequence[MetricsSource] = (),
) -> AccountingServer:
    """The metrics and probe endpoint, not started: the accounting's counters (an empty
    Accounting when none is given), the handling latency and in-flight when given, what each of
    sources renders (ops.stats_metrics.QueueGauges), and with health (ProcessorRunner.health)
    the runner's gauges, /healthz and /readyz."""
    handled: tuple[MetricsSource, ...] = (
        () if handling is None else (lambda label: handling.prometheus(tenant_label=label),)
    )
    return AccountingServer(
        accounting if accounting is not None else Accounting(),
        port=port,
        host=host,
        tenant_label=tenant_label,
        sources=(*handled, *sources),
        health=health,
    )


def start_metrics_server(
    *,
    port: int = 0,
    host: str = DEFAULT_METRICS_HOST,
    health: HealthSource | None = None,
    accounting: Accounting | None = None,
    handling: HandlingMetrics | None = None,
    tenant_label: bool = False,
    sources: Sequence[MetricsSource] = (),
) -> AccountingServer:
    """metrics_server, started: serving on a daemon thread until its stop(). Port 0 picks a free
    port (server.port); a port in use is a ConfigError naming it."""
    server = metrics_server(
        port=port,
        host=host,
        health=health,
        accounting=accounting,
        handling=handling,
        tenant_label=tenant_label,
        sources=sources,
    )
    server.start()
    return server
