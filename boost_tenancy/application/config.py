"""AppSettings: everything an entry point needs, validated at start-up. The BOOST_* variables
are read into it by application/environment.py, the one reader of the environment
(AppSettings.from_env).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.accounting_server import DEFAULT_METRICS_HOST
from boost_tenancy.fairness.settings import FairnessSettings
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.ttl import MessageTtl
from boost_tenancy.routing import Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.options import ConnectOptions

if TYPE_CHECKING:  # imported by the reader on use: AMQP-only processes never load STOMP's client
    from boost_tenancy.transports.stomp import StompSettings

DEFAULT_URL: Final = "stomp://127.0.0.1:61613"
"""The broker when BOOST_BROKER_URL is unset: the local broker of scripts/broker."""

ERROR_STORE_FILE = "boost-tenancy/errors.sqlite3"
"""The default error store's file, under the user's state folder (default_error_store)."""


def default_error_store(env: Mapping[str, str]) -> str:
    """The error store when BOOST_ERROR_STORE is unset: one SQLite file per user, wherever the
    command runs, $XDG_STATE_HOME/boost-tenancy/errors.sqlite3, else under ~/.local/state.

    Absolute on purpose: a runner and an operator's `errors` started in different folders read
    the same store. A relative XDG_STATE_HOME is ignored, as the XDG specification says.
    """
    state = env.get("XDG_STATE_HOME", "").strip()
    if not (state and os.path.isabs(state)):
        home = env.get("HOME", "").strip() or os.path.expanduser("~")
        if not os.path.isabs(home):
            raise ConfigError(
                "no absolute home folder for the default error store (HOME is "
                f"{env.get('HOME')!r}); set BOOST_ERROR_STORE"
            )
        state = os.path.join(home, ".local", "state")
    return "sqlite:///" + os.path.join(state, ERROR_STORE_FILE)


@dataclass(frozen=True, slots=True, kw_only=True)
class AppSettings:
    """Everything an entry point needs: broker, runner, error store, fairness and logging."""

    stomp: StompSettings | None
    """The STOMP transport's settings when BOOST_BROKER_URL names a STOMP broker, else None."""
    runner: RunnerSettings
    error_store_url: str
    log_format: str
    log_level: str
    routing: Routing = field(default_factory=Routing)
    """The topology of every queue (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES)."""
    default_tenant: TenantId | None = None
    """BOOST_DEFAULT_TENANT: the tenant the router gives a message sent to a routed shared queue
    with no tenantUUID at all (legacy producers); None quarantines it."""
    send_routes: bool = True
    """BOOST_SEND_ROUTES (on by default): runners make the broker store their tenants' messages
    sent to a routed shared queue in the tenants' queues at send time, where it can be told so
    at run time (Artemis: ops/send_routes.py); off leaves every such message to the router."""
    fairness: FairnessSettings | None = field(default_factory=FairnessSettings)
    """The limits (on by default); None when BOOST_FAIRNESS=off."""
    metrics_port: int = 0
    """BOOST_METRICS_PORT: where the metrics, the per-tenant accounting and the probes
    (/healthz, /readyz) are served; 0 = not served."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """BOOST_METRICS_HOST: the address the metrics server binds; the loopback one unless set,
    since its endpoints have no authentication (0.0.0.0 for Kubernetes probes)."""
    metrics_tenant_label: bool = False
    queue_gauges_s: float = 0.0
    """BOOST_QUEUE_GAUGES_S: how often a runner reads its tenants' queue statistics from the
    broker for the queue gauges of its /metrics (ops/stats_metrics.py); 0 = not served."""
    publish: PublishLimits = field(default_factory=PublishLimits)
    """Every tenant's publishing limits (BOOST_PUBLISH_*, BOOST_MAX_MESSAGE_BYTES); unlimited
    unless set."""
    publish_redis_url: str = ""
    """BOOST_PUBLISH_REDIS_URL: the Redis where every producing process takes the tenants'
    publishing buckets (quotas/shared.py); empty means each process keeps its own."""
    message_ttl: MessageTtl = field(default_factory=MessageTtl)
    """Every tenant's message time-to-live (BOOST_MESSAGE_TTL_S); no expiry unless set.
    Per-tenant overrides are set in code (MessageTtl.for_tenant)."""
    usage_store_url: str = ""
    """BOOST_USAGE_STORE: where the accounting's counts are added up per tenant and day, to
    survive restarts (fairness/usage.py); empty means they live in memory only."""
    usage_flush_s: float = 60.0
    """BOOST_USAGE_FLUSH_S: how often counts are written to the usage store."""
    policy_store_url: str = ""
    """BOOST_POLICY_STORE, else BOOST_TIER_STORE: where operators' run-time policies per tenant
    live (quotas/policy_store.py); empty means none, the defaults apply to every tenant."""
    actor: str = ""
    """BOOST_ACTOR: who an operator's command acts as (policy set, quarantine redrive), for the
    audit; empty means the command's --actor, else the user running it."""
    queue_state_poll_s: float = 5.0
    """BOOST_QUEUE_STATE_POLL_S: how often a runner reads the queue states operators set in the
    policy store (`queues drain`, `resume`, `delete`; ops/queue_states.py)."""
    broker_url: str = DEFAULT_URL
    """BOOST_BROKER_URL: the transport by URL (transports/registry.py), the one address the
    clients, the local broker (scripts/broker) and the tests share."""
    broker: ConnectOptions = field(default_factory=ConnectOptions)
    """The other BOOST_BROKER_* settings: credentials, TLS and the waits."""

    def transport_url(self) -> str:
        """The URL the transport is opened from."""
        return self.broker_url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AppSettings:
        """Read BOOST_* variables (documented in docs/configuration.md), through
        application/environment.py (app_settings_from_env).

        Entry points (the CLI, the sample services) call it once; nothing reads the environment
        at import time, and a bad value raises ConfigError naming the variable.
        """
        from boost_tenancy.application.environment import (  # noqa: PLC0415  # it imports this
            app_settings_from_env,
        )

        return app_settings_from_env(env)


__all__ = ["DEFAULT_URL", "ERROR_STORE_FILE", "AppSettings", "default_error_store"]
