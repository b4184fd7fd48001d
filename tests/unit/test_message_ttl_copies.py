"""Which copies keep a message's absolute expiry, on the in-memory broker: a retry copy, a
deferral and a held retry, a router move and a parking move keep the original one (no hop
extends a time-to-live); a dead letter, a quarantined copy, a raw dead letter and a re-driven
dead letter carry none (a dead letter that expired would be lost evidence)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TransientError,
)
from boost_tenancy.expiry import now_ms
from boost_tenancy.messages import ATTEMPT_PROPERTY, WireMessage
from boost_tenancy.ops.parking import ParkingSweeper
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.resilience.dead_letter import (
    dead_letter_queue,
    quarantine_queue,
    raw_dead_letter_copy,
    redrive_copy,
)
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.resilience.redelivery import HeldRedelivery, RepublishRedelivery
from boost_tenancy.routing import Topology, parked_queue
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, Outgoing
from tests.conftest import Inbox, unique_queue, wait_until

A, B = TenantId("org-A"), TenantId("org-B")
SHARED = Routing(Topology.SHARED)
LATER = RetryPolicy(max_attempts=3, base_delay_ms=60_000, max_delay_ms=60_000, jitter=0.0)
"""A retry copy waits a minute on the broker: long enough to be read there."""


def expiring(tenant: TenantId, in_s: float, body: str = '{"n": 1}') -> WireMessage:
    return WireMessage(
        body=body,
        properties={"tenantUUID": tenant.value},
        expires_at_ms=now_ms() + round(in_s * 1000),
    )


def connected(broker: InMemoryBroker) -> InMemoryTransport:
    transport = InMemoryTransport(broker)
    transport.connect()
    return transport


def collect(broker: InMemoryBroker, queue: str) -> Inbox:
    inbox = Inbox()
    connected(broker).subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    return inbox


class Failing(TenantProcessor):
    """Raises what it was given, every time."""

    def __init__(self, queue: str, error: Exception) -> None:
        self.queues = (queue,)
        self.error = error

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise self.error


@pytest.fixture
def runners() -> Iterator[list[ProcessorRunner]]:
    started: list[ProcessorRunner] = []
    yield started
    for runner in started:
        assert runner.stop(grace_s=5)


def run(
    runners: list[ProcessorRunner],
    broker: InMemoryBroker,
    store: ErrorStore,
    processor: TenantProcessor,
) -> None:
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [A],
        error_store=store,
        settings=RunnerSettings(workers=1, prefetch=5, dispatch=DispatchSettings(retry=LATER)),
        routing=SHARED,
    )
    runners.append(runner)
    runner.start()


# -- copies that keep the expiry ------------------------------------------------------------------
def test_a_retry_copy_keeps_the_original_absolute_expiry(
    broker: InMemoryBroker, store: ErrorStore, runners: list[ProcessorRunner]
) -> None:
    queue = unique_queue("cmd")
    original = expiring(A, 600)
    broker.put(queue, original)
    run(runners, broker, store, Failing(queue, TransientError("again")))

    def retried() -> list[WireMessage]:
        return [m for m in broker.messages(queue) if m.properties.get(ATTEMPT_PROPERTY) == "2"]

    assert wait_until(lambda: len(retried()) == 1)
    assert retried()[0].expires_at_ms == original.expires_at_ms


class Recording:
    """The two transport operations a redelivery strategy uses, recorded."""

    def __init__(self) -> None:
        self.sent: list[Outgoing] = []

    def is_live(self, delivery: Delivery) -> bool:
        return True

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        self.sent.extend(items)


def delivered(expires_at_ms: int | None) -> Delivery:
    return Delivery(
        queue="q",
        body="{}",
        properties={"tenantUUID": "org-A", ATTEMPT_PROPERTY: "2"},
        correlation_id="c-1",
        redelivered=False,
        subscription_id="s",
        expires_at_ms=expires_at_ms,
    )


def test_a_deferral_and_a_held_retry_keep_the_original_absolute_expiry() -> None:
    transport = Recording()
    expiry = now_ms() + 600_000
    error = ErrorInfo(type="E", text="failed")
    RepublishRedelivery().defer(transport, delivered(expiry), 100)  # type: ignore[arg-type]
    RepublishRedelivery().retry(transport, delivered(expiry), 100, error)  # type: ignore[arg-type]
    HeldRedelivery().retry(transport, delivered(expiry), 0, error)  # type: ignore[arg-type]
    HeldRedelivery().defer(transport, delivered(None), 0)  # type: ignore[arg-type]
    assert [item.message.expires_at_ms for item in transport.sent] == [expiry] * 3 + [None]


def test_a_router_move_keeps_the_original_absolute_expiry(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    original = expiring(A, 600)
    connected(broker).send(queue, original)
    moved = collect(broker, f"tenant.org-A.{queue}")
    router = TenantRouter(connected(broker), [queue], error_store=store)
    router.start()
    assert wait_until(lambda: len(moved) == 1)
    router.stop()
    assert moved.items[0].expires_at_ms == original.expires_at_ms


def test_a_parking_move_keeps_the_original_absolute_expiry(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    original = expiring(B, 600)
    connected(broker).send(queue, original)
    parked = collect(broker, parked_queue(queue, B))
    sweeper = ParkingSweeper(connected(broker), [queue], [A], error_store=store)
    sweeper.start()
    assert wait_until(lambda: len(parked) == 1)
    sweeper.stop()
    assert parked.items[0].expires_at_ms == original.expires_at_ms


# -- copies that never expire ---------------------------------------------------------------------
def test_a_dead_letter_carries_no_expiry_and_outlives_the_originals(
    broker: InMemoryBroker, store: ErrorStore, runners: list[ProcessorRunner]
) -> None:
    queue = unique_queue("cmd")
    broker.put(queue, expiring(A, 0.3))
    run(runners, broker, store, Failing(queue, PermanentError("never")))
    dlq = dead_letter_queue(queue)
    assert wait_until(lambda: broker.depth(dlq) == 1)
    assert broker.messages(dlq)[0].expires_at_ms is None
    time.sleep(0.5)  # past the original's expiry: the broker would expire a copy that kept it
    reader = collect(broker, dlq)
    assert wait_until(lambda: len(reader) == 1)
    assert reader.items[0].expires_at_ms is None


def test_a_quarantined_copy_carries_no_expiry(
    broker: InMemoryBroker, store: ErrorStore, runners: list[ProcessorRunner]
) -> None:
    queue = unique_queue("cmd")
    broker.put(queue, expiring(A, 600, body='{"tenantUUID": "org-B"}'))  # the body claims B
    run(runners, broker, store, Failing(queue, PermanentError("never called")))
    quarantine = quarantine_queue(queue)
    assert wait_until(lambda: broker.depth(quarantine) == 1)
    assert broker.messages(quarantine)[0].expires_at_ms is None


def test_a_raw_dead_letter_and_a_redriven_one_carry_no_expiry() -> None:
    delivery = delivered(now_ms() + 600_000)
    raw = raw_dead_letter_copy(
        delivery, message_id="m-1", error_type="E", error_text="x", attempt=2
    )
    assert raw.expires_at_ms is None
    assert redrive_copy(delivery.properties, delivery).expires_at_ms is None
