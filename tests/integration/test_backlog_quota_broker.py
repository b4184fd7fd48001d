"""The backlog quota against the real ActiveMQ Classic: the depth of a tenant's queue comes from
the broker's statistics plugin, a publish past the quota is refused before a byte is sent, and
the tenant publishes again once its queue is drained."""

from __future__ import annotations

import uuid

import pytest

from boost_tenancy import BacklogQuotaExceededError, PublishGuard, PublishLimits, TenantProducer
from boost_tenancy.quotas.backlog import BrokerBacklog
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until

pytestmark = [
    pytest.mark.broker,
]

ROUTING = Routing(Topology.PER_TENANT)
QUOTA = 5


def test_a_tenant_at_its_backlog_quota_is_refused_until_its_queue_drains(
    stomp_settings: StompSettings,
) -> None:
    tenant, other = f"org-{uuid.uuid4().hex[:8]}", f"org-{uuid.uuid4().hex[:8]}"
    queue = unique_queue("cmd.backlog")
    transport = StompTransport(stomp_settings)
    transport.connect()
    backlog = BrokerBacklog(transport, ROUTING, refresh_s=1)
    guard = PublishGuard(PublishLimits(max_queued_messages=QUOTA), backlog=backlog)
    producer = TenantProducer(transport, routing=ROUTING, guard=guard)
    try:
        for n in range(QUOTA):
            producer.send(queue, tenant, {"n": n})
        backlog.refresh()
        assert backlog.queued(tenant, queue) == QUOTA
        with pytest.raises(BacklogQuotaExceededError, match=f"its quota is {QUOTA}"):
            producer.send(queue, tenant, {"n": QUOTA})
        producer.send(queue, other, {"n": 0})  # another tenant's queue is its own
        taken: list[object] = []
        transport.subscribe(
            ROUTING.physical(queue, tenant),
            selector=None,
            prefetch=QUOTA,
            on_delivery=lambda delivery: (transport.ack(delivery), taken.append(delivery)),
        )
        assert wait_until(lambda: len(taken) == QUOTA, timeout=10)

        def drained() -> bool:
            backlog.refresh()
            return backlog.queued(tenant, queue) == 0

        assert wait_until(drained, timeout=10)
        producer.send(queue, tenant, {"n": QUOTA})
    finally:
        transport.close()
