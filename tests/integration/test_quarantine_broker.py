"""Quarantine list and re-drive on the real broker: what the router and a tenant's runner
quarantined is listed as it arrived, twice, without being consumed or reordered; a re-drive
refused moves nothing; one assigned to a tenant is handled by that tenant's processor."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantProcessor,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.quarantine import Cause, QuarantineAdmin, QuarantineRedriveError
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import recorded, unique_queue, wait_until

pytestmark = [pytest.mark.broker]

IDLE = 1.0


class Recorder(TenantProcessor):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.seen: list[tuple[str, str, object]] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append((ctx.tenant.value, message.message_id, message.data["n"]))

    def ids(self) -> list[str]:
        with self._lock:
            return [message_id for _, message_id, _ in self.seen]


@pytest.fixture
def transport(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    opened = StompTransport(stomp_settings)
    opened.connect()
    yield opened
    opened.close()


def test_quarantine_is_listed_unconsumed_and_redriven_to_the_assigned_tenant(
    stomp_settings: StompSettings, transport: StompTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd.quarantine")
    suffix = uuid.uuid4().hex[:8]
    org_a, org_b = TenantId(f"org-a-{suffix}"), TenantId(f"org-b-{suffix}")
    hostile = "\u00e9vil' OR '1'='1"
    transport.send(queue, WireMessage(body='{"n": 1}', properties={}))
    transport.send(queue, WireMessage(body='{"n": 2}', properties={TENANT_PROPERTY: hostile}))
    transport.send(
        queue, WireMessage(body=b"\x00\xff\x1b", properties={TENANT_PROPERTY: "not valid"})
    )
    # Arrived on org-a's own queue claiming org-b: org-a's runner quarantines it there.
    transport.send(
        f"tenant.{org_a.value}.{queue}",
        WireMessage(body='{"n": 4}', properties={TENANT_PROPERTY: org_b.value}),
    )
    router = TenantRouter(transport, [queue], error_store=store)
    router.start()
    processor = Recorder(queue)
    runner = ProcessorRunner(
        processor,
        StompTransport(stomp_settings),
        [org_a],
        error_store=store,
        settings=RunnerSettings(workers=2),
        route_shared=False,
    )
    runner.start()
    try:
        assert wait_until(lambda: router.quarantined == 3)
        router.stop()
        recorded(store, 3, tenant=None, outcome=FailureOutcome.QUARANTINE)
        recorded(store, 1, tenant=org_b, outcome=FailureOutcome.QUARANTINE)
        admin = QuarantineAdmin(transport, store)

        views = admin.list(queue, idle_s=IDLE)
        assert [(v.cause, v.tenant_property) for v in views] == [
            (Cause.MISSING, None),
            (Cause.INVALID, hostile),
            (Cause.INVALID, "not valid"),
        ]
        assert views[2].body == b"\x00\xff\x1b"
        assert all(v.quarantined_at is not None for v in views)
        assert all(v.quarantine_queue == f"DLQ.{queue}.quarantine" for v in views)
        # Nothing consumed, nothing reordered: a second read sees the same, in the same order.
        again = admin.list(queue, idle_s=IDLE)
        assert [v.message_id for v in again] == [v.message_id for v in views]

        (foreign,) = admin.list(queue, tenant=org_a, idle_s=IDLE)
        assert (foreign.cause, foreign.tenant_property) == (Cause.OTHER_TENANT, org_b.value)

        missing = views[0].message_id
        with pytest.raises(QuarantineRedriveError, match="unknown-1"):
            admin.redrive(
                queue,
                tenant=org_a,
                message_ids=[missing, "unknown-1"],
                actor="ops",
                idle_s=IDLE,
            )
        with pytest.raises(QuarantineRedriveError, match="give --force"):
            admin.redrive(
                queue,
                tenant=org_a,
                message_ids=[foreign.message_id],
                actor="ops",
                from_tenant=org_a,
                idle_s=IDLE,
            )
        assert [v.message_id for v in admin.list(queue, idle_s=IDLE)] == [
            v.message_id for v in views
        ]
        assert processor.ids() == []

        assert admin.redrive(
            queue, tenant=org_a, message_ids=[missing], actor="ops", idle_s=IDLE
        ) == [missing]
        assert admin.redrive(
            queue,
            tenant=org_a,
            message_ids=[foreign.message_id],
            actor="ops",
            from_tenant=org_a,
            force=True,
            idle_s=IDLE,
        ) == [foreign.message_id]
        # Handled by the tenant assigned, once each.
        assert wait_until(lambda: len(processor.ids()) == 2)
        assert sorted(processor.seen, key=lambda seen: str(seen[2])) == sorted(
            [(org_a.value, missing, 1), (org_a.value, foreign.message_id, 4)],
            key=lambda seen: str(seen[2]),
        )
        assert [v.message_id for v in admin.list(queue, idle_s=IDLE)] == [
            v.message_id for v in views[1:]
        ]
        assert admin.list(queue, tenant=org_a, idle_s=IDLE) == []
        records = recorded(store, 2, tenant=org_a, outcome=FailureOutcome.REDRIVE)
        assert {r.message_id for r in records} == {missing, foreign.message_id}
        assert all("by ops" in r.error_text for r in records)
    finally:
        router.stop()
        runner.stop(grace_s=5)
