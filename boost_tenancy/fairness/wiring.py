"""What an entry point adds to a runner for fairness: the middleware (opt-in) and accounting.

Read from the environment at start-up: BOOST_FAIRNESS turns the limits on, BOOST_METRICS_PORT
serves the per-tenant accounting, BOOST_METRICS_TENANT_LABEL opts into the tenant label.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from boost_tenancy.envvars import env_int
from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.accounting import Accounting, AccountingServer, Event
from boost_tenancy.fairness.middleware import FairnessSettings, build_fairness
from boost_tenancy.processor import DispatchObserver, Middleware
from boost_tenancy.tenancy import TenantId

_TRUE, _FALSE = frozenset({"1", "true", "on", "yes"}), frozenset({"", "0", "false", "off", "no"})


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """An on/off variable; anything else names the variable."""
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name} must be on or off, got {env.get(name)!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FairnessWiring:
    """Middleware and observers for ProcessorRunner, and the metrics server to start with it."""

    middleware: tuple[Middleware, ...]
    observers: tuple[DispatchObserver, ...]
    accounting: Accounting
    server: AccountingServer | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FairnessWiring:
        accounting = Accounting()
        middleware: tuple[Middleware, ...] = ()
        if env_flag(env, "BOOST_FAIRNESS"):
            settings = FairnessSettings.from_env(env)

            def on_event(tenant: TenantId, event: str) -> None:
                # The middleware names only accounting's events; record() checks at run time.
                accounting.record(tenant, cast(Event, event))

            middleware = (build_fairness(settings, on_event=on_event),)
        port = env_int(env, "BOOST_METRICS_PORT", 0)
        if port > 65535:
            raise ConfigError(f"BOOST_METRICS_PORT must be 0 (off) or a TCP port, got {port}")
        server = (
            AccountingServer(
                accounting, port=port, tenant_label=env_flag(env, "BOOST_METRICS_TENANT_LABEL")
            )
            if port
            else None
        )
        return cls(
            middleware=middleware, observers=(accounting,), accounting=accounting, server=server
        )
