"""The in-memory broker's model of message expiry on each flavour: a message is delivered with
its expiry until it passes and never after. Then Classic moves a persistent one to ActiveMQ.DLQ
(as 5.17 did here: originalExpiration, dlqDeliveryFailureCause, no expiry left) and drops a
non-persistent one; Artemis drops it, or moves it to its expiry address when one is configured
(_AMQ_ORIG_*, _AMQ_ACTUAL_EXPIRY, no expiry left)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from boost_tenancy.messages import WireMessage
from boost_tenancy.testing import BrokerFlavour, InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.expiry import CLASSIC_DLQ
from tests.conftest import Inbox, ManualClock, unique_queue, wait_until

NOW_S = 1_795_000_000.0
"""The wall clock these tests start at, in epoch seconds."""
NOW_MS = int(NOW_S * 1000)
SETTLE_S = 0.3
"""How long a queue is watched for a delivery that must not come."""


class WallClock(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.now = NOW_S


@pytest.fixture
def wall() -> WallClock:
    return WallClock()


def model(
    wall: WallClock, flavour: BrokerFlavour, expiry_address: str | None = None
) -> InMemoryBroker:
    return InMemoryBroker(flavour=flavour, wall_clock=wall, expiry_address=expiry_address)


@pytest.fixture
def classic(wall: WallClock) -> Iterator[InMemoryBroker]:
    made = model(wall, BrokerFlavour.CLASSIC)
    yield made
    made.close()


def message(name: str, expires_at_ms: int | None, *, persistent: bool = True) -> WireMessage:
    return WireMessage(
        body=name,
        properties={"tenantUUID": "org-A", "name": name},
        persistent=persistent,
        expires_at_ms=expires_at_ms,
    )


def read(broker: InMemoryBroker, queue: str, expected: int) -> Inbox:
    """What a subscription to queue gets: expected deliveries, then nothing more for a while."""
    transport = InMemoryTransport(broker)
    transport.connect()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) >= expected, timeout=5)
    wait_until(lambda: len(inbox) > expected, timeout=SETTLE_S)
    return inbox


@pytest.mark.parametrize("flavour", [BrokerFlavour.CLASSIC, BrokerFlavour.ARTEMIS])
def test_before_it_expires_a_message_is_delivered_with_its_expiry(
    wall: WallClock, flavour: BrokerFlavour
) -> None:
    broker = model(wall, flavour)
    queue = unique_queue()
    broker.put(queue, message("later", NOW_MS + 1_000))
    broker.put(queue, message("never", None))
    inbox = read(broker, queue, 2)
    assert [(d.body, d.expires_at_ms) for d in inbox.items] == [
        ("later", NOW_MS + 1_000),
        ("never", None),
    ]
    broker.close()


@pytest.mark.parametrize("flavour", [BrokerFlavour.CLASSIC, BrokerFlavour.ARTEMIS])
def test_once_it_expires_a_message_is_never_delivered(
    wall: WallClock, flavour: BrokerFlavour
) -> None:
    broker = model(wall, flavour)
    queue = unique_queue()
    broker.put(queue, message("expired", NOW_MS + 1_000))
    broker.put(queue, message("kept", NOW_MS + 60_000))
    wall.advance(1.0)  # exactly at its expiry
    inbox = read(broker, queue, 1)
    assert [d.body for d in inbox.items] == ["kept"]
    broker.close()


def test_classic_moves_an_expired_persistent_message_to_activemq_dlq(
    wall: WallClock, classic: InMemoryBroker
) -> None:
    queue = unique_queue()
    expiry = NOW_MS + 500
    classic.put(queue, message("expired", expiry))
    wall.advance(1.0)
    assert len(read(classic, queue, 0)) == 0
    [dead] = read(classic, CLASSIC_DLQ, 1).items
    assert dead.body == "expired"
    assert dead.expires_at_ms is None
    assert dead.properties["originalExpiration"] == str(expiry)
    assert dead.properties["dlqDeliveryFailureCause"].endswith(f"Expiration:{expiry}")
    assert dead.properties["original-destination"] == f"/queue/{queue}"
    assert dead.properties["name"] == "expired"


def test_classic_drops_an_expired_non_persistent_message(
    wall: WallClock, classic: InMemoryBroker
) -> None:
    queue = unique_queue()
    classic.put(queue, message("gone", NOW_MS + 500, persistent=False))
    wall.advance(1.0)
    assert len(read(classic, queue, 0)) == 0
    assert classic.depth(queue) == 0
    assert classic.depth(CLASSIC_DLQ) == 0


def test_artemis_drops_an_expired_message_without_an_expiry_address(wall: WallClock) -> None:
    broker = model(wall, BrokerFlavour.ARTEMIS)
    queue = unique_queue()
    broker.put(queue, message("gone", NOW_MS + 500))
    wall.advance(1.0)
    assert len(read(broker, queue, 0)) == 0
    assert broker.depth(queue) == 0
    assert broker.depth(CLASSIC_DLQ) == 0
    broker.close()


def test_artemis_moves_an_expired_message_to_its_expiry_address(wall: WallClock) -> None:
    broker = model(wall, BrokerFlavour.ARTEMIS, expiry_address="ExpiryQueue")
    queue = unique_queue()
    broker.put(queue, message("expired", NOW_MS + 500, persistent=False))
    wall.advance(1.0)
    assert len(read(broker, queue, 0)) == 0
    [expired] = read(broker, "ExpiryQueue", 1).items
    assert expired.body == "expired"
    assert expired.expires_at_ms is None
    assert expired.properties["_AMQ_ORIG_QUEUE"] == queue
    assert expired.properties["_AMQ_ORIG_ADDRESS"] == queue
    assert expired.properties["_AMQ_ACTUAL_EXPIRY"] == str(NOW_MS + 1_000)
    broker.close()


def test_the_expiry_address_is_artemis_only(wall: WallClock) -> None:
    broker = model(wall, BrokerFlavour.CLASSIC, expiry_address="ExpiryQueue")
    queue = unique_queue()
    broker.put(queue, message("expired", NOW_MS + 500))
    wall.advance(1.0)
    assert len(read(broker, queue, 0)) == 0
    assert len(read(broker, CLASSIC_DLQ, 1)) == 1
    assert broker.depth("ExpiryQueue") == 0
    broker.close()
