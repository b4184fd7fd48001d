"""boost-tenancy: tenant-isolated messaging on ActiveMQ for Python services.

Producers stamp the tenantUUID property, TenantProcessors consume through per-tenant selectors,
and failures are retried, recorded and dead-lettered instead of lost. This module holds what a
service author needs; the rest lives in topical modules (docs/architecture.md): outcomes and
middleware in boost_tenancy.processing, dead letters and the error store in
boost_tenancy.resilience, transports in boost_tenancy.transports, selectors in
boost_tenancy.selectors, fairness in boost_tenancy.fairness, publishing limits in
boost_tenancy.quotas.
"""

from boost_tenancy.application.run import open_transport
from boost_tenancy.application.runner import ProcessorRunner
from boost_tenancy.application.wiring import start_metrics_server
from boost_tenancy.async_producer import AsyncTenantProducer
from boost_tenancy.chain_order import place
from boost_tenancy.errors import (
    BacklogQuotaExceededError,
    BoostTenancyError,
    ConfigError,
    InvalidTenantError,
    MessageEncodeError,
    MessageTooLargeError,
    ModelValidationError,
    PermanentError,
    PublishRateExceededError,
    PublishRefusedError,
    TenantMismatchError,
    TransientError,
    TransportError,
)
from boost_tenancy.messages import IncomingMessage, Message, MessageBody
from boost_tenancy.processing.aio import AsyncMiddleware
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.middleware import Middleware
from boost_tenancy.processing.processor import HandlerContext, TenantProcessor
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.producer import TenantProducer
from boost_tenancy.publishing import AdmittedSend, Draft
from boost_tenancy.quotas import MessageTtl, PublishGuard, PublishLimits
from boost_tenancy.resilience.error_store import open_error_store
from boost_tenancy.routing import Routing
from boost_tenancy.tenancy import TenantId

__all__ = [
    "AdmittedSend",
    "AsyncMiddleware",
    "AsyncTenantProducer",
    "BacklogQuotaExceededError",
    "BoostTenancyError",
    "ConfigError",
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
    "RetryPolicy",
    "Routing",
    "RunnerSettings",
    "TenantId",
    "TenantMismatchError",
    "TenantProcessor",
    "TenantProducer",
    "TransientError",
    "TransportError",
    "open_error_store",
    "open_transport",
    "place",
    "start_metrics_server",
]
