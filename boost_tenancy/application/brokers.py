"""Opening a broker: the transport a URL names, with what the URL does not name read from the
environment (application/environment.py), not connected yet. Light on purpose: a producer that
only sends imports this, not the runner's parts."""

from __future__ import annotations

from collections.abc import Mapping

from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.environment import connect_options_from_env
from boost_tenancy.transports import registry
from boost_tenancy.transports.base import Transport


def open_transport(url: str, env: Mapping[str, str] | None = None) -> Transport:
    """The transport a URL names, not yet connected.

    env: the environment to read the settings from that the URL does not name (the
    BOOST_BROKER_* variables, application/environment.py; what the URL names wins); without it
    those settings keep their defaults, and the process environment is not read.
    """
    return registry.open_transport(url, None if env is None else connect_options_from_env(env))


def open_broker(settings: AppSettings, env: Mapping[str, str] | None = None) -> Transport:
    """The transport the settings' URL names, not yet connected; env supplies what the URL does
    not (timeouts, credentials)."""
    return open_transport(settings.transport_url(), env)


__all__ = ["open_broker", "open_transport"]
