"""The in-memory broker's model of Artemis beside Classic's, each fact as measured on Artemis
2.44: content-length on every MESSAGE (so a bare JMS TextMessage reads as bytes), flow control
in bytes, a forward that is confirmed copy then ack (a lost connection in between duplicates,
never loses), scheduled delivery, and the broker's own dead letters.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import BrokerFlavour, InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.stomp.frames import TEXT_MARKER_PROPERTY, TEXT_MARKER_VALUE
from tests.conftest import Inbox, unique_queue, wait_until

FLAVOURS = [BrokerFlavour.CLASSIC, BrokerFlavour.ARTEMIS]


@pytest.fixture(params=FLAVOURS, ids=lambda f: f.name.lower())
def broker(request: pytest.FixtureRequest) -> Iterator[InMemoryBroker]:
    made = InMemoryBroker(flavour=request.param)
    yield made
    made.close()


def wire(body: str | bytes = "{}", **props: str) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": "org-A", **props})


def test_capabilities_come_from_the_flavour(transport: InMemoryTransport) -> None:
    assert transport.capabilities == transport._broker.flavour.capabilities
    classic = transport._broker.flavour is BrokerFlavour.CLASSIC
    assert transport.capabilities.atomic_forward is classic
    assert transport.capabilities.prefetch_counts_messages is classic


def test_only_the_two_measured_flavours_are_modelled() -> None:
    with pytest.raises(ConfigError, match="models"):
        InMemoryBroker(flavour=BrokerFlavour.OTHER)


def test_a_jms_text_message_is_text_on_both_flavours_and_bytes_stay_bytes(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    """Artemis adds content-length to every MESSAGE and a JMS producer sends no content-type:
    an unmarked body there is text when it is valid UTF-8 (a Java TextMessage, whose retry copy
    and dead letter must stay TextMessages); the toolkit marks its own byte bodies, so valid
    UTF-8 sent as bytes stays bytes; a JMS producer can say bytes with boostBodyType=bytes."""
    queue = unique_queue()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    broker.put(queue, wire('{"a": 1}'), jms=True)
    broker.put(queue, wire('{"a": 2}', **{TEXT_MARKER_PROPERTY: TEXT_MARKER_VALUE}), jms=True)
    broker.put(queue, wire(b"\x00\x01"), jms=True)
    broker.put(queue, wire('{"a": 3}'))  # as the toolkit sends it
    broker.put(queue, wire(b"valid utf-8 bytes"))  # the toolkit's bytes: marked, stay bytes
    broker.put(queue, wire(b"\xff\xfe not utf-8"), jms=True)
    assert wait_until(lambda: len(inbox) == 6)
    assert inbox.bodies() == [
        '{"a": 1}',
        '{"a": 2}',
        b"\x00\x01",
        '{"a": 3}',
        b"valid utf-8 bytes",
        b"\xff\xfe not utf-8",
    ]
    assert inbox.items[1].properties[TEXT_MARKER_PROPERTY] == TEXT_MARKER_VALUE


def test_the_prefetch_header_is_a_count_on_classic_and_bytes_on_artemis(
    broker: InMemoryBroker,
) -> None:
    """Measured: activemq.prefetchSize 10 let 10 of 20 through on Classic and 1 on Artemis;
    consumer-window-size -1 let all through on Artemis (Classic ignores it: its default
    prefetch of 1000 lets all through too)."""
    connection = InMemoryTransport(broker)
    connection.connect()
    queue, unlimited = unique_queue(), unique_queue()
    for name in (queue, unlimited):
        broker.put_many([(name, wire(f"{i}".ljust(100, ".")), 0) for i in range(20)])
    inbox, everything = Inbox(), Inbox()
    broker.subscribe(connection, 1, ("s-1", queue, None, inbox), {"activemq.prefetchSize": "10"})
    window = {"consumer-window-size": "-1"}
    broker.subscribe(connection, 1, ("s-2", unlimited, None, everything), window)
    classic = broker.flavour is BrokerFlavour.CLASSIC
    assert wait_until(lambda: len(inbox) == (10 if classic else 1))
    assert wait_until(lambda: len(everything) == 20)
    assert len(inbox) == (10 if classic else 1)


def test_a_message_larger_than_the_window_still_comes_alone(broker: InMemoryBroker) -> None:
    transport = InMemoryTransport(broker, artemis_window_bytes=100)
    transport.connect()
    queue = unique_queue()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=1, on_delivery=inbox)
    for _ in range(3):
        transport.send(queue, wire(b"x" * 1000))
    assert wait_until(lambda: len(inbox) == 1)
    transport.ack(inbox.items[0])
    assert wait_until(lambda: len(inbox) == 2)
    assert broker.depth(queue) == 2


def test_a_scheduled_delay_property_holds_the_message_like_the_header(
    transport: InMemoryTransport,
) -> None:
    queue = unique_queue()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    transport.send(queue, wire("later", AMQ_SCHEDULED_DELAY="400"))
    transport.send(queue, wire("now"))
    assert wait_until(lambda: len(inbox) == 1)
    assert inbox.bodies() == ["now"]
    assert wait_until(lambda: len(inbox) == 2)
    assert "AMQ_SCHEDULED_DELAY" not in inbox.items[1].properties


def test_artemis_message_ids_are_pairs_named_by_their_message_part_and_acks_still_work() -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    transport = InMemoryTransport(broker)
    transport.connect()
    queue = unique_queue()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    transport.send(queue, wire("x"))
    assert wait_until(lambda: len(inbox) == 1)
    # '<consumer id>,<message id>' on the wire; the message's part names it on every delivery.
    assert str(inbox.items[0].broker_message_id).isdigit()
    transport.ack(inbox.items[0])
    assert wait_until(lambda: broker.depth(queue) == 0)
    broker.close()


def test_artemis_moves_a_message_delivered_too_often_to_its_dead_letter_address() -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS, max_delivery_attempts=3)
    transport = InMemoryTransport(broker)
    transport.connect()
    queue = unique_queue()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    transport.send(queue, wire("poison", boostMessageId="m-7"))
    for seen in (1, 2, 3):
        assert wait_until(lambda seen=seen: len(inbox) == seen)
        transport.drop_connection()  # unacknowledged: the broker counts a delivery
    assert wait_until(lambda: broker.depth("DLA") == 1)
    assert broker.depth(queue) == 0
    [dead] = broker.messages("DLA")
    assert dead.properties["_AMQ_ORIG_QUEUE"] == queue
    assert dead.properties["_AMQ_ORIG_ADDRESS"] == queue
    assert dead.properties["boostMessageId"] == "m-7"
    broker.close()


def test_artemis_does_not_count_a_clean_close_towards_its_dead_letter_address() -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS, max_delivery_attempts=2)
    sender = InMemoryTransport(broker)
    sender.connect()
    queue = unique_queue()
    sender.send(queue, wire("kept"))
    for seen in range(1, 6):
        consumer = InMemoryTransport(broker)
        consumer.connect()
        inbox = Inbox()
        consumer.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
        assert wait_until(lambda inbox=inbox: len(inbox) == 1), f"close {seen}"
        consumer.close()
    assert broker.depth(queue) == 1
    assert broker.depth("DLA") == 0
    broker.close()


class Publisher(TenantProcessor):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.seen: list[tuple[str, bool]] = []
        self.lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self.lock:
            self.seen.append((ctx.message_id, message.redelivered))
        ctx.publish(self.queues[0] + ".out", {"n": message.data["n"]})


def test_a_connection_lost_between_copy_and_ack_duplicates_only_where_forward_is_not_atomic(
    broker: InMemoryBroker, tmp_path: Path
) -> None:
    """The processor's output and the ack: one transaction on Classic; on Artemis the output is
    confirmed, the connection drops before the ack, the input comes back and is handled again,
    and the second output carries the same derived boostMessageId as the first."""
    queue = unique_queue("cmd")
    processor = Publisher(queue)
    transport = InMemoryTransport(broker)
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    shared = Routing(Topology.SHARED)  # the output and the input read by their names
    runner = ProcessorRunner(
        processor,
        transport,
        ["org-A"],
        error_store=store,
        settings=RunnerSettings(workers=1),
        routing=shared,
    )
    runner.start()
    out, left = Inbox(), Inbox()
    reader = InMemoryTransport(broker)
    reader.connect()
    reader.subscribe(queue + ".out", selector=None, prefetch=10, on_delivery=out)
    transport.drop_connection_before_next_ack()
    sent = TenantProducer(reader, routing=shared).send(queue, "org-A", {"n": 1})
    atomic = transport.capabilities.atomic_forward
    try:
        assert wait_until(lambda: len(out) == (1 if atomic else 2))
        assert wait_until(lambda: broker.depth(queue) == 0), "the input is acknowledged at last"
    finally:
        assert runner.stop(grace_s=5)
        store.close()
    reader.subscribe(queue, selector=None, prefetch=10, on_delivery=left)
    assert [seen[0] for seen in processor.seen] == [sent.message_id] * len(out)
    if not atomic:
        assert [seen[1] for seen in processor.seen] == [False, True]
    assert len({d.properties["boostMessageId"] for d in out.items}) == 1, "detectable duplicate"
    assert len(left) == 0
    reader.close()
