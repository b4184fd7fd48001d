"""boost-tenancy: tenant-isolated messaging on ActiveMQ for Python services.

Producers stamp the tenantUUID property, TenantProcessors consume through per-tenant selectors,
and failures are retried, recorded and dead-lettered instead of lost. This module holds what a
service author needs; the rest lives in topical modules (docs/architecture.md): outcomes and
middleware in boost_tenancy.processing, dead letters and the error store in
boost_tenancy.resilience, transports in boost_tenancy.transports, selectors in
boost_tenancy.selectors, fairness in boost_tenancy.fairness, publishing limits in
boost_tenancy.quotas.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from boost_tenancy.application.brokers import open_transport
    from boost_tenancy.application.runner import ProcessorRunner
    from boost_tenancy.application.wiring import start_metrics_server
    from boost_tenancy.async_producer import AsyncTenantProducer
    from boost_tenancy.chain_order import place
    from boost_tenancy.errors import (
        BacklogQuotaExceededError,
        BoostTenancyError,
        ConfigError,
        DependencyNotOpenError,
        InvalidTenantError,
        MessageEncodeError,
        MessageTooLargeError,
        ModelValidationError,
        PermanentError,
        PublishRateExceededError,
        PublishRefusedError,
        RequestTimeoutError,
        TenantMismatchError,
        TransientError,
        TransportError,
    )
    from boost_tenancy.messages import IncomingMessage, Message, MessageBody
    from boost_tenancy.processing.aio import AsyncMiddleware
    from boost_tenancy.processing.dependencies import Dependency
    from boost_tenancy.processing.dispatcher import DispatchSettings
    from boost_tenancy.processing.middleware import Middleware
    from boost_tenancy.processing.processor import HandlerContext, TenantProcessor
    from boost_tenancy.processing.retry import RetryPolicy
    from boost_tenancy.processing.runner_settings import RunnerSettings
    from boost_tenancy.producer import TenantProducer
    from boost_tenancy.publishing import AdmittedSend, Draft
    from boost_tenancy.quotas import MessageTtl, PublishGuard, PublishLimits
    from boost_tenancy.requests import Reply, TenantRequester
    from boost_tenancy.resilience.error_store import open_error_store
    from boost_tenancy.routing import Routing
    from boost_tenancy.tenancy import TenantId

_HOMES = {
    "AdmittedSend": "boost_tenancy.publishing",
    "AsyncMiddleware": "boost_tenancy.processing.aio",
    "AsyncTenantProducer": "boost_tenancy.async_producer",
    "BacklogQuotaExceededError": "boost_tenancy.errors",
    "BoostTenancyError": "boost_tenancy.errors",
    "ConfigError": "boost_tenancy.errors",
    "Dependency": "boost_tenancy.processing.dependencies",
    "DependencyNotOpenError": "boost_tenancy.errors",
    "DispatchSettings": "boost_tenancy.processing.dispatcher",
    "Draft": "boost_tenancy.publishing",
    "HandlerContext": "boost_tenancy.processing.processor",
    "IncomingMessage": "boost_tenancy.messages",
    "InvalidTenantError": "boost_tenancy.errors",
    "Message": "boost_tenancy.messages",
    "MessageBody": "boost_tenancy.messages",
    "MessageEncodeError": "boost_tenancy.errors",
    "MessageTooLargeError": "boost_tenancy.errors",
    "MessageTtl": "boost_tenancy.quotas",
    "Middleware": "boost_tenancy.processing.middleware",
    "ModelValidationError": "boost_tenancy.errors",
    "PermanentError": "boost_tenancy.errors",
    "ProcessorRunner": "boost_tenancy.application.runner",
    "PublishGuard": "boost_tenancy.quotas",
    "PublishLimits": "boost_tenancy.quotas",
    "PublishRateExceededError": "boost_tenancy.errors",
    "PublishRefusedError": "boost_tenancy.errors",
    "Reply": "boost_tenancy.requests",
    "RequestTimeoutError": "boost_tenancy.errors",
    "RetryPolicy": "boost_tenancy.processing.retry",
    "Routing": "boost_tenancy.routing",
    "RunnerSettings": "boost_tenancy.processing.runner_settings",
    "TenantId": "boost_tenancy.tenancy",
    "TenantMismatchError": "boost_tenancy.errors",
    "TenantProcessor": "boost_tenancy.processing.processor",
    "TenantProducer": "boost_tenancy.producer",
    "TenantRequester": "boost_tenancy.requests",
    "TransientError": "boost_tenancy.errors",
    "TransportError": "boost_tenancy.errors",
    "open_error_store": "boost_tenancy.resilience.error_store",
    "open_transport": "boost_tenancy.application.brokers",
    "place": "boost_tenancy.chain_order",
    "start_metrics_server": "boost_tenancy.application.wiring",
}
"""Where each exported name lives: imported from there when first asked for, so `import
boost_tenancy` loads nothing of the broker clients, the runner or the stores until a name that
needs them is used (the command line starts faster for it)."""


if not TYPE_CHECKING:  # the type checker reads the imports above, and refuses any other name

    def __getattr__(name: str) -> object:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        globals()[name] = value  # asked once: later reads are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_HOMES})


__all__ = [
    "AdmittedSend",
    "AsyncMiddleware",
    "AsyncTenantProducer",
    "BacklogQuotaExceededError",
    "BoostTenancyError",
    "ConfigError",
    "Dependency",
    "DependencyNotOpenError",
    "DispatchSettings",
    "Draft",
    "HandlerContext",
    "IncomingMessage",
    "InvalidTenantError",
    "Message",
    "MessageBody",
    "MessageEncodeError",
    "MessageTooLargeError",
    "MessageTtl",
    "Middleware",
    "ModelValidationError",
    "PermanentError",
    "ProcessorRunner",
    "PublishGuard",
    "PublishLimits",
    "PublishRateExceededError",
    "PublishRefusedError",
    "Reply",
    "RequestTimeoutError",
    "RetryPolicy",
    "Routing",
    "RunnerSettings",
    "TenantId",
    "TenantMismatchError",
    "TenantProcessor",
    "TenantProducer",
    "TenantRequester",
    "TransientError",
    "TransportError",
    "open_error_store",
    "open_transport",
    "place",
    "start_metrics_server",
]
