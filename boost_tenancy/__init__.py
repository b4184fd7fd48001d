"""boost-tenancy: tenant-isolated messaging on ActiveMQ for Python services.

Producers stamp the tenantUUID property, TenantProcessors consume through per-tenant selectors,
and failures are retried, recorded and dead-lettered instead of lost.
"""

from boost_tenancy.auth import AuthenticationError, JwtSettings, TenantAuthenticator
from boost_tenancy.consumer import ProcessorRunner, RunnerSettings
from boost_tenancy.errors import (
    BoostTenancyError,
    ConfigError,
    ErrorStoreError,
    HandlerError,
    InvalidTenantError,
    MessageDecodeError,
    NotConfirmedError,
    PermanentError,
    TenantMismatchError,
    TransientError,
    TransportError,
)
from boost_tenancy.messages import IncomingMessage, Message
from boost_tenancy.parking import ParkingSweeper
from boost_tenancy.processor import (
    Ack,
    DeadLetter,
    Defer,
    DispatchSettings,
    HandlerContext,
    Middleware,
    Outcome,
    Retry,
    TenantProcessor,
)
from boost_tenancy.producer import TenantProducer, TenantPublisher
from boost_tenancy.resilience.dead_letter import (
    DeadLetterReason,
    dead_letter_queue,
    quarantine_queue,
)
from boost_tenancy.resilience.error_store import (
    ErrorStore,
    FailureOutcome,
    FailureRecord,
    open_error_store,
)
from boost_tenancy.resilience.retry import RetryPolicy
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.selectors import (
    TENANT_PROPERTY,
    Selector,
    SelectorLike,
    TenantExclusion,
    tenant_selector,
)
from boost_tenancy.storage import StoreUrl, parse_store_url, redact_url
from boost_tenancy.tenancy import TenantId, parse_tenants
from boost_tenancy.transports.base import Transport, TransportCapabilities
from boost_tenancy.transports.stomp import StompSettings, StompTransport

__all__ = [
    "TENANT_PROPERTY",
    "Ack",
    "AuthenticationError",
    "BoostTenancyError",
    "ConfigError",
    "DeadLetter",
    "DeadLetterReason",
    "Defer",
    "DispatchSettings",
    "ErrorStore",
    "ErrorStoreError",
    "FailureOutcome",
    "FailureRecord",
    "HandlerContext",
    "HandlerError",
    "IncomingMessage",
    "InvalidTenantError",
    "JwtSettings",
    "Message",
    "MessageDecodeError",
    "Middleware",
    "NotConfirmedError",
    "Outcome",
    "ParkingSweeper",
    "PermanentError",
    "ProcessorRunner",
    "Retry",
    "RetryPolicy",
    "Routing",
    "RunnerSettings",
    "Selector",
    "SelectorLike",
    "StompSettings",
    "StompTransport",
    "StoreUrl",
    "TenantAuthenticator",
    "TenantExclusion",
    "TenantId",
    "TenantMismatchError",
    "TenantProcessor",
    "TenantProducer",
    "TenantPublisher",
    "Topology",
    "TransientError",
    "Transport",
    "TransportCapabilities",
    "TransportError",
    "dead_letter_queue",
    "open_error_store",
    "parse_store_url",
    "parse_tenants",
    "quarantine_queue",
    "redact_url",
    "tenant_selector",
]
