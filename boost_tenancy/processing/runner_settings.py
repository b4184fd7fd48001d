"""RunnerSettings: a runner's concurrency, flow control and shutdown behaviour, with the
dispatch, the tenants' turns on the work queue and the event loop it runs with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from boost_tenancy.envvars import MAX_DURATION_S
from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.event_loop import EventLoopSettings
from boost_tenancy.processing.scheduling import parse_weights


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerSettings:
    """Concurrency, flow control and shutdown behaviour of a runner."""

    workers: int = 4
    prefetch: int = 10
    """Unacknowledged messages per subscription; the transport maps it to what its broker reads
    (Classic activemq.prefetchSize, Artemis consumer-window-size in bytes)."""
    shutdown_grace_s: float = 30.0
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    tenant_weights: Mapping[str, int] = field(default_factory=dict)
    """Deliveries a tenant may start per turn of the local work queue (default 1 each)."""
    event_loop: EventLoopSettings = field(default_factory=EventLoopSettings)
    """The event loop of async handlers and middleware (processing/event_loop.py)."""

    def __post_init__(self) -> None:
        parse_weights(self.tenant_weights)
        # A read-only copy: the caller's dict changing later must not change frozen settings.
        object.__setattr__(self, "tenant_weights", MappingProxyType(dict(self.tenant_weights)))
        if self.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {self.workers}")
        if self.prefetch < 1:
            raise ConfigError(f"prefetch must be at least 1, got {self.prefetch}")
        if not 0 <= self.shutdown_grace_s <= MAX_DURATION_S:  # False for nan too
            raise ConfigError(
                f"shutdown_grace_s must be a number of seconds from 0 to {MAX_DURATION_S:g}, "
                f"got {self.shutdown_grace_s}"
            )
