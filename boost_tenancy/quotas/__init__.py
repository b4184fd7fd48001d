"""Publishing-side limits per tenant: messages/s and bytes/s token buckets (per tenant and,
optionally, per queue) and a maximum message size, enforced where the toolkit sends: the
TenantProducer, a handler's ctx.publish, and what is built on them (the IntegrationsServer);
and how long each tenant's messages may wait on the broker (MessageTtl), stamped there too.
"""

from boost_tenancy.quotas.guard import PUBLISH_REFUSAL_REASONS, PublishGuard, wire_size
from boost_tenancy.quotas.limits import PublishLimits
from boost_tenancy.quotas.ttl import MessageTtl

__all__ = ["PUBLISH_REFUSAL_REASONS", "MessageTtl", "PublishGuard", "PublishLimits", "wire_size"]
