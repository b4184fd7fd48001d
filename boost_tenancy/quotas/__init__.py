"""Publishing-side limits per tenant: messages/s and bytes/s token buckets (per tenant and,
optionally, per queue) and a maximum message size, enforced where the toolkit sends: the
TenantProducer, a handler's ctx.publish, and what is built on them (the IntegrationsServer);
and how long each tenant's messages may wait on the broker (MessageTtl), stamped there too.
"""

from boost_tenancy.quotas.backlog import BrokerBacklog
from boost_tenancy.quotas.guard import PUBLISH_REFUSAL_REASONS, PublishGuard, wire_size
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.policy import LIMIT_FIELDS, PolicyResolver, TenantPolicy
from boost_tenancy.quotas.shared import RedisPublishBuckets
from boost_tenancy.quotas.ttl import MessageTtl, effective_ttl

__all__ = [
    "LIMIT_FIELDS",
    "PUBLISH_REFUSAL_REASONS",
    "BrokerBacklog",
    "MessageTtl",
    "PolicyResolver",
    "PublishGuard",
    "PublishLimits",
    "RedisPublishBuckets",
    "TenantPolicy",
    "effective_ttl",
    "wire_size",
]
