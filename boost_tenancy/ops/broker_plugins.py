"""The broker plugins a transport needs, checked on its broker when a runner starts.

Some guarantees hold on a broker only with a plugin of the project running there (STOMP on
Artemis 2.44: StompLossPlugin gives back what a lost connection held, docs/interop.md). The
transport declares them (TransportCapabilities.broker_plugins_needed) and, where its broker can
say, lists what the broker runs (BrokerPluginLister). A missing one is warned of, with what goes
wrong without it; the runner runs on, as it did before the check.
"""

from __future__ import annotations

import structlog

from boost_tenancy.errors import TransportError
from boost_tenancy.transports.base import BrokerPluginLister, Transport

log = structlog.get_logger("boost_tenancy.ops.broker_plugins")


def missing_broker_plugins(transport: Transport) -> list[str] | None:
    """The class names of the plugins the connected transport needs that its broker does not
    run, each logged as a warning; None when the broker could not be asked (logged too)."""
    needed = transport.capabilities.broker_plugins_needed
    if not needed:
        return []
    if not isinstance(transport, BrokerPluginLister):
        return None
    try:
        running = set(transport.broker_plugins())
    except TransportError as exc:  # no manage permission, say: the check is advice, not a gate
        log.info(
            "broker_plugins_not_checked",
            needed=[plugin.class_name for plugin in needed],
            error=str(exc),
        )
        return None
    missing = [plugin for plugin in needed if plugin.class_name not in running]
    for plugin in missing:
        log.warning(
            "broker_plugin_missing",
            plugin=plugin.class_name,
            without_it=plugin.without_it,
            see=plugin.see,
        )
    return [plugin.class_name for plugin in missing]


__all__ = ["missing_broker_plugins"]
