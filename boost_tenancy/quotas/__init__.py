"""Publishing-side limits per tenant: messages/s and bytes/s token buckets (per tenant and,
optionally, per queue) and a maximum message size, enforced where the toolkit sends: the
TenantProducer, a handler's ctx.publish, and what is built on them (the IntegrationsServer).
"""

from boost_tenancy.quotas.guard import PUBLISH_REFUSAL_REASONS, PublishGuard, wire_size
from boost_tenancy.quotas.limits import PublishLimits

__all__ = ["PUBLISH_REFUSAL_REASONS", "PublishGuard", "PublishLimits", "wire_size"]
