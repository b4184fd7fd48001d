"""The parked re-drive a runner starts: it subscribes, on a thread of its own, only to the parked
queues that hold messages where the broker lists its queues, and to every one of its tenants'
where it cannot; start() never waits for it. Subscribing makes a queue that is not there, so
subscribing to every tenant's made a thousand parked queues at each start of a runner of a
thousand tenants."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from boost_tenancy.errors import QueueStatsUnavailableError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.parking import ParkedMove, ParkedRedrive
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.routing import parked_queue
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, ListedQueue, Outgoing, SubscribeRequest
from tests.conftest import Inbox, unique_queue, wait_until
from tests.no_statistics import without_statistics

ORG_A, ORG_B, ORG_C = TenantId("org-a"), TenantId("org-b"), TenantId("org-c")


class Recording(InMemoryTransport):
    """Records the broker queues of every subscription asked for; list_queues can be held."""

    def __init__(self, broker: InMemoryBroker) -> None:
        super().__init__(broker)
        self.subscribed: list[str] = []
        self.listing_may_answer = threading.Event()
        self.listing_may_answer.set()
        self.listing_fails: Exception | None = None

    def subscribe_many(self, requests: Sequence[SubscribeRequest]) -> list[Any]:
        self.subscribed.extend(request.queue for request in requests)
        return super().subscribe_many(requests)

    def list_queues(self, prefixes: Sequence[str]) -> list[ListedQueue]:
        assert self.listing_may_answer.wait(10)
        if self.listing_fails is not None:
            raise self.listing_fails
        return super().list_queues(prefixes)


@pytest.fixture
def transport(broker: InMemoryBroker) -> Iterator[Recording]:
    """A Recording transport to the in-memory broker of tests/unit/conftest.py."""
    recording = Recording(broker)
    recording.connect()
    yield recording
    recording.close()


def park(transport: InMemoryTransport, queue: str, tenant: TenantId, count: int) -> None:
    for n in range(count):
        transport.send(
            parked_queue(queue, tenant),
            WireMessage(
                body=json.dumps({"n": n, "tenantUUID": tenant.value}),
                properties={"tenantUUID": tenant.value},
            ),
        )


def consume(transport: InMemoryTransport, broker_queue: str, count: int) -> None:
    """Take count messages off broker_queue and acknowledge them; the queue stays, empty."""
    inbox = Inbox()
    subscription = transport.subscribe(broker_queue, selector=None, prefetch=10, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) == count)
    for delivery in inbox.items:
        transport.ack(delivery)
    transport.unsubscribe(subscription)
    (stats,) = transport.queue_stats([broker_queue]).values()
    assert stats is not None and stats.stored == 0


def moves(queue: str, *tenants: TenantId) -> list[ParkedMove]:
    return [ParkedMove(t, parked_queue(queue, t), f"tenant.{t.value}.{queue}") for t in tenants]


def test_only_the_parked_queues_holding_messages_are_subscribed_where_the_broker_lists(
    transport: Recording,
) -> None:
    queue = unique_queue("cmd")
    park(transport, queue, ORG_A, 3)
    # B's parked queue is there and empty: nothing to move back.
    park(transport, queue, ORG_B, 1)
    consume(transport, parked_queue(queue, ORG_B), 1)
    redrive = ParkedRedrive(transport, moves(queue, ORG_A, ORG_B, ORG_C), idle_s=0.2)
    redrive.start()
    assert redrive.wait(10)
    assert transport.subscribed == [parked_queue(queue, ORG_A)]
    assert redrive.moved == {(ORG_A, f"tenant.org-a.{queue}"): 3}
    assert transport.queue_stats([parked_queue(queue, ORG_C)]) == {parked_queue(queue, ORG_C): None}


def test_nothing_parked_subscribes_to_nothing(transport: Recording) -> None:
    redrive = ParkedRedrive(transport, moves(unique_queue("cmd"), ORG_A, ORG_B), idle_s=0.2)
    redrive.start()
    assert redrive.wait(10)
    assert transport.subscribed == []


@pytest.mark.parametrize("why", ["no listing", "listing refused", "listing broken"])
def test_without_a_listing_every_parked_queue_is_subscribed(transport: Recording, why: str) -> None:
    queue = unique_queue("cmd")
    park(transport, queue, ORG_B, 2)
    if why == "no listing":
        without_statistics(transport)
    elif why == "listing refused":
        transport.listing_fails = QueueStatsUnavailableError("the statistics plugin did not answer")
    else:
        transport.listing_fails = KeyError("count")
    redrive = ParkedRedrive(transport, moves(queue, ORG_A, ORG_B), idle_s=0.2)
    redrive.start()
    assert redrive.wait(10)
    assert sorted(transport.subscribed) == sorted(
        [parked_queue(queue, ORG_A), parked_queue(queue, ORG_B)]
    )
    assert redrive.moved == {(ORG_B, f"tenant.org-b.{queue}"): 2}


def started_while_the_listing_waits(transport: Recording) -> tuple[str, ParkedRedrive]:
    """A re-drive of ORG_A's one parked message, started while the broker's listing waits."""
    queue = unique_queue("cmd")
    park(transport, queue, ORG_A, 1)
    transport.listing_may_answer.clear()
    redrive = ParkedRedrive(transport, moves(queue, ORG_A), idle_s=0.2)
    redrive.start()
    return queue, redrive


def test_start_returns_before_the_broker_answers(transport: Recording) -> None:
    queue, redrive = started_while_the_listing_waits(transport)
    assert transport.subscribed == []
    assert not redrive.wait(0)
    transport.listing_may_answer.set()
    assert redrive.wait(10)
    assert redrive.moved == {(ORG_A, f"tenant.org-a.{queue}"): 1}


def test_a_stop_while_the_broker_is_asked_subscribes_to_nothing(transport: Recording) -> None:
    queue, redrive = started_while_the_listing_waits(transport)
    stopped = time.monotonic()
    redrive.stop(timeout=5)  # nothing is being moved: it does not wait for the listing
    assert time.monotonic() - stopped < 1
    transport.listing_may_answer.set()
    assert redrive.wait(10)
    assert transport.subscribed == []
    (left,) = transport.queue_stats([parked_queue(queue, ORG_A)]).values()
    assert left is not None and left.stored == 1


class RefusesOne(Recording):
    """A broker refusing the copy of one parked message (n == 3) toward the tenant's queue."""

    def _refused(self, items: Sequence[Outgoing]) -> bool:
        return any(
            q.startswith("tenant.") and json.loads(str(m.body)).get("n") == 3 for q, m, _ in items
        )

    def send_then_ack_many(
        self, moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]
    ) -> Sequence[Delivery]:
        if any(self._refused(items) for _, items in moves):
            raise TransportError("the broker rejected the message: queue full")
        return super().send_then_ack_many(moves)

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        if self._refused(items):
            raise TransportError("the broker rejected the message: queue full")
        super().send_then_ack(delivery, items)


def test_one_refused_message_no_longer_holds_back_the_tenants_parked_backlog(
    broker: InMemoryBroker,
) -> None:
    """The refused batch stayed unacknowledged, filled the subscription's window, and came back
    first at every start: nothing of that tenant moved again. The rest now moves, and the
    refused one goes to its tenant queue's dead-letter queue with its bytes."""
    transport = RefusesOne(broker)
    transport.connect()
    try:
        queue = unique_queue("cmd")
        park(transport, queue, ORG_A, 150)
        redrive = ParkedRedrive(transport, moves(queue, ORG_A), idle_s=0.3)
        redrive.start()
        assert redrive.wait(20)
        target = f"tenant.org-a.{queue}"
        assert redrive.moved == {(ORG_A, target): 149}
        assert broker.depth(target) == 149
        assert broker.depth(parked_queue(queue, ORG_A)) == 0
        [dead] = broker.messages(dead_letter_queue(target))
        assert json.loads(dead.body if isinstance(dead.body, str) else dead.body.decode())["n"] == 3
        assert dead.properties["boostDeadLetterReason"] == "unsettleable"
        assert "queue full" in dead.properties["boostError"]
    finally:
        transport.close()
