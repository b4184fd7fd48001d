"""The backlog quota: a tenant whose queue holds its maximum of queued messages (read from the
broker's statistics) has its publishes refused, typed and counted, until its queue drains; the
in-memory broker's Classic model answers the statistics as Classic's plugin does."""

from __future__ import annotations

import pytest

from boost_tenancy import (
    BacklogQuotaExceededError,
    ConfigError,
    PublishGuard,
    PublishLimits,
    PublishRateExceededError,
    TenantId,
    TenantProducer,
)
from boost_tenancy.application.environment import publish_limits_from_env
from boost_tenancy.messages import WireMessage
from boost_tenancy.quotas.backlog import BrokerBacklog
from boost_tenancy.quotas.policy import TenantPolicy
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryTransport
from tests.conftest import ManualClock

A = TenantId("org-A")
B = TenantId("org-B")
ROUTING = Routing(Topology.PER_TENANT)


class Fixed:
    """A BacklogSource answering what the test sets."""

    refresh_s = 5.0

    def __init__(self) -> None:
        self.depth: dict[tuple[TenantId, str], int | None] = {}

    def queued(self, tenant: TenantId, queue: str) -> int | None:
        return self.depth.get((tenant, queue))


def one() -> list[WireMessage]:
    return [WireMessage(body="x", properties={})]


def test_the_quota_refuses_past_the_backlog_and_says_when_to_try_again() -> None:
    backlog = Fixed()
    refused: list[tuple[TenantId, str, str]] = []
    guard = PublishGuard(
        PublishLimits(max_queued_messages=3),
        backlog=backlog,
        on_refused=lambda t, q, r: refused.append((t, q, r)),
    )
    backlog.depth[(A, "cmd.q")] = 2
    guard.check(A, "cmd.q", one())  # 2 + 1 <= 3
    with pytest.raises(BacklogQuotaExceededError, match="holds 2 message") as caught:
        guard.check(A, "cmd.q", one() * 2)  # 2 + 2 > 3
    assert isinstance(caught.value, PublishRateExceededError)  # deferred / 429 like a rate
    assert caught.value.retry_after_s == 5.0
    assert refused == [(A, "cmd.q", "backlog")]
    assert guard.refused() == {(A, "backlog"): 1}
    guard.check(B, "cmd.q", one() * 10)  # no figure for B: fails open
    backlog.depth[(A, "cmd.q")] = 0
    guard.check(A, "cmd.q", one() * 3)


def test_the_quota_comes_from_the_policy_too() -> None:
    backlog = Fixed()
    backlog.depth[(A, "cmd.q")] = 5
    guard = PublishGuard(
        PublishLimits(),
        backlog=backlog,
        policy_of=lambda t: TenantPolicy(max_queued_messages=5) if t == A else TenantPolicy(),
    )
    with pytest.raises(BacklogQuotaExceededError):
        guard.check(A, "cmd.q", one())
    backlog.depth[(B, "cmd.q")] = 500
    guard.check(B, "cmd.q", one())


def test_the_setting_refuses_negatives() -> None:
    with pytest.raises(ConfigError, match="BOOST_MAX_QUEUED_MESSAGES"):
        publish_limits_from_env({"BOOST_MAX_QUEUED_MESSAGES": "-1"})
    assert publish_limits_from_env({"BOOST_MAX_QUEUED_MESSAGES": "7"}).max_queued_messages == 7
    assert not PublishLimits(max_queued_messages=7).unlimited


def test_broker_backlog_reads_the_tenants_queue_from_the_broker(
    transport: InMemoryTransport,
) -> None:
    clock = ManualClock()
    backlog = BrokerBacklog(transport, ROUTING, refresh_s=5, clock=clock)
    guard = PublishGuard(PublishLimits(max_queued_messages=3), backlog=backlog)
    producer = TenantProducer(transport, routing=ROUTING, guard=guard)
    assert backlog.queued(A, "cmd.q") is None  # not read yet: no refusal
    for n in range(3):
        producer.send("cmd.q", A, {"n": n})
    backlog.refresh()
    assert backlog.queued(A, "cmd.q") == 3
    with pytest.raises(BacklogQuotaExceededError):
        producer.send("cmd.q", A, {"n": 3})
    producer.send("cmd.q", B, {"n": 0})  # another tenant's queue is not A's backlog
    clock.advance(16)  # no read for longer than 3 refreshes: stale, fails open
    assert backlog.queued(A, "cmd.q") is None
    producer.send("cmd.q", A, {"n": 3})


def test_a_shared_queue_has_no_figure_per_tenant(transport: InMemoryTransport) -> None:
    backlog = BrokerBacklog(transport, Routing(Topology.SHARED))
    transport.send("cmd.s", WireMessage(body="x", properties={"tenantUUID": "org-A"}))
    backlog.refresh()
    assert backlog.queued(A, "cmd.s") is None
