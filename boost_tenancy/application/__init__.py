"""The application layer: every BOOST_* variable read in one place (environment) into settings
(config), a runner assembled from them (runner, wiring) and run until a signal (run). The CLI
and the services start here."""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from boost_tenancy.application.brokers import open_broker, open_transport
    from boost_tenancy.application.config import AppSettings
    from boost_tenancy.application.environment import (
        connect_options_from_env,
        stomp_settings_from_env,
    )
    from boost_tenancy.application.run import run_processor
    from boost_tenancy.application.runner import ProcessorRunner
    from boost_tenancy.application.wiring import (
        FairnessWiring,
        open_policies,
        start_metrics_server,
    )

_HOMES = {
    "AppSettings": "config",
    "FairnessWiring": "wiring",
    "ProcessorRunner": "runner",
    "connect_options_from_env": "environment",
    "open_broker": "brokers",
    "open_policies": "wiring",
    "open_transport": "brokers",
    "run_processor": "run",
    "start_metrics_server": "wiring",
    "stomp_settings_from_env": "environment",
}


if not TYPE_CHECKING:  # the type checker reads the imports above, and refuses any other name

    def __getattr__(name: str) -> object:
        """Each name imported from its module when first asked for: `import boost_tenancy`
        loads only what it exports (the runner, open_transport and what they need)."""
        if name in _HOMES:
            return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AppSettings",
    "FairnessWiring",
    "ProcessorRunner",
    "connect_options_from_env",
    "open_broker",
    "open_policies",
    "open_transport",
    "run_processor",
    "start_metrics_server",
    "stomp_settings_from_env",
]
