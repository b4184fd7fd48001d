"""The in-process AMQP peer (boost_tenancy.testing.amqp_peer) against raw python-qpid-proton
clients: each Artemis behaviour it models, and each RabbitMQ 3.10 behaviour checked by running
the same scenario against the model and against the real RabbitMQ (marker amqp_broker)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from proton import Condition, Delivery, Described, Endpoint, Message, symbol, ulong
from proton.handlers import TransactionHandler
from proton.reactor import AtMostOnce, LinkOption
from proton.reactor import Selector as ProtonSelector
from proton.utils import LinkDetached

from boost_tenancy.selectors import Selector, TenantExclusion
from boost_tenancy.testing.amqp_peer import AmqpPeer, PeerFlavour
from tests.conftest import port_open, unavailable, wait_until
from tests.unit.amqp_raw import (
    REAL_RABBITMQ_URL,
    Capability,
    Client,
    Collector,
    data_object,
    die_holding,
    receive,
    selector_filter,
    settle,
)

MAX_ATTEMPTS = 3


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def peer() -> Iterator[AmqpPeer]:
    with AmqpPeer(max_delivery_attempts=MAX_ATTEMPTS) as made:
        yield made


@pytest.fixture
def client(peer: AmqpPeer) -> Iterator[Client]:
    made = Client(peer.url)
    yield made
    made.close()


@pytest.fixture
def queue() -> str:
    return f"peer-test.{uuid.uuid4().hex[:10]}"


def refusal(
    client: Client, address: str | None, *, receiving: bool, options: list[LinkOption] | None = None
) -> Condition | None:
    """The condition a refused attach comes back with: on the link's detach or the session's end."""
    link = client.attach(address, receiving=receiving, options=options)
    closed = Endpoint.REMOTE_CLOSED
    client.wait(lambda: link.state & closed or link.session.state & closed)
    if link.session.state & closed:
        return link.session.remote_condition
    return link.remote_condition if link.state & closed else None


# -- Artemis: the connection --------------------------------------------------------------------
def test_artemis_open_frame_names_the_broker_and_offers_its_capabilities(client: Client) -> None:
    conn = client.connection.conn
    assert conn.remote_properties == {
        symbol("product"): "apache-activemq-artemis",
        symbol("version"): "2.44.0",
    }
    assert set(conn.remote_offered_capabilities) == {
        symbol("DELAYED_DELIVERY"),
        symbol("ANONYMOUS-RELAY"),
        symbol("SHARED-SUBS"),
    }
    assert conn.remote_container


def test_plain_sasl_with_any_credentials_and_anonymous_are_accepted(peer: AmqpPeer) -> None:
    plain = Client(f"amqp://anyone:whatever@127.0.0.1:{peer.port}", allowed_mechs="PLAIN")
    anonymous = Client(peer.url, allowed_mechs="ANONYMOUS")
    assert plain.connection.conn.state & Endpoint.REMOTE_ACTIVE
    assert anonymous.connection.conn.state & Endpoint.REMOTE_ACTIVE
    assert peer.connections_opened == 2
    plain.close()
    anonymous.close()


# -- Artemis: addresses -------------------------------------------------------------------------
def test_sender_without_queue_capability_makes_a_multicast_address_that_drops(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "dropped")  # accepted: send raises unless the peer settles it accepted

    assert peer.routing_type(queue) == "multicast"
    assert peer.depth(queue) == 0
    subscriber = client.receiver(queue)  # no capability: a subscription on the address
    assert receive(subscriber, timeout=0.3) is None
    condition = refusal(client, queue, receiving=True, options=[Capability("queue")])
    assert condition is not None
    assert condition.name == "amqp:illegal-state"


def test_sender_with_queue_capability_makes_an_anycast_queue_that_keeps(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    sender = client.sender(queue, "queue")
    delivery = sender.send(Message(body="kept"))

    assert delivery.remote_state == Delivery.ACCEPTED
    assert delivery.settled
    assert peer.routing_type(queue) == "anycast"
    assert [m.body for m in peer.messages(queue)] == ["kept"]
    received = receive(client.receiver(queue, "queue"))
    assert received is not None
    assert received.body == "kept"


def test_receiver_creates_the_anycast_queue(peer: AmqpPeer, client: Client, queue: str) -> None:
    assert peer.routing_type(queue) is None
    client.receiver(queue, "queue")
    assert peer.routing_type(queue) == "anycast"
    assert peer.depth(queue) == 0


def test_anonymous_relay_routes_by_the_message_address(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.receiver(queue, "queue")
    relay = client.sender(None)
    relay.send(Message(address=queue, body="relayed"))
    assert [m.body for m in peer.messages(queue)] == ["relayed"]


# -- Artemis: selectors -------------------------------------------------------------------------
def test_selector_is_echoed_and_applied_and_the_rest_stays_for_others(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    sender = client.sender(queue, "queue")
    for tenant in ("org-a", "org-b", "org-a"):
        sender.send(Message(body=tenant, properties={"tenantUUID": tenant}))
    text = Selector("org-b").render()

    receiver = client.receiver(queue, "queue", selector=text)

    assert data_object(receiver.link.remote_source.filter) == selector_filter(text)
    received = receive(receiver)
    assert received is not None
    assert received.body == "org-b"
    assert receive(receiver, timeout=0.2) is None
    assert [m.body for m in peer.messages(queue)] == ["org-a", "org-b", "org-a"]
    others = client.receiver(queue, "queue", credit=5)
    assert [receive(others), receive(others)] != [None, None]


def test_tenant_exclusion_selects_untagged_and_other_tenants(client: Client, queue: str) -> None:
    sender = client.sender(queue, "queue")
    sender.send(Message(body="excluded", properties={"tenantUUID": "org-a"}))
    sender.send(Message(body="untagged"))
    sender.send(Message(body="other", properties={"tenantUUID": "org-c"}))
    text = TenantExclusion(("org-a", "org-b")).render()

    receiver = client.receiver(queue, "queue", selector=text, credit=5)

    got = [receive(receiver), receive(receiver), receive(receiver, timeout=0.2)]
    assert [m.body if m else None for m in got] == ["untagged", "other", None]


def test_a_selector_outside_the_modelled_subset_refuses_the_attach(
    client: Client, queue: str
) -> None:
    with pytest.raises(LinkDetached):
        client.receiver(queue, "queue", selector="priority > 4")
    options = [Capability("queue"), ProtonSelector("name LIKE 'a%'")]
    condition = refusal(client, queue, receiving=True, options=options)
    assert condition is not None
    assert condition.name == "amqp:not-implemented"


def test_only_the_selector_filter_is_echoed(client: Client, queue: str) -> None:
    filters = {
        **selector_filter("tenantUUID = 'org-a'"),
        symbol("other"): Described(symbol("example:unknown-filter"), "x"),
    }
    receiver = client.receiver(queue, "queue", filters=filters)
    assert data_object(receiver.link.remote_source.filter) == selector_filter(
        "tenantUUID = 'org-a'"
    )


# -- Artemis: flow ------------------------------------------------------------------------------
def test_deliveries_wait_for_credit(client: Client, queue: str) -> None:
    client.send(queue, "1", "2", "3", capability="queue")
    collector = Collector()
    receiver = client.receiver(queue, "queue", handler=collector, credit=1)
    client.wait(lambda: collector.received)
    client.pump(0.1)
    assert collector.bodies() == ["1"]

    receiver.link.flow(2)
    assert client.wait(lambda: len(collector.received) == 3)


def test_a_drain_is_answered_by_giving_up_the_unused_credit(client: Client, queue: str) -> None:
    receiver = client.receiver(queue, "queue", handler=Collector(), credit=3)
    assert client.wait(lambda: receiver.link.credit == 3)
    receiver.link.drain(0)
    assert client.wait(lambda: receiver.link.credit == 0)
    assert not receiver.link.draining()


def test_receivers_of_a_queue_take_turns(client: Client, queue: str) -> None:
    first, second = Collector(), Collector()
    links = [client.receiver(queue, "queue", handler=c, credit=10) for c in (first, second)]
    client.send(queue, "1", "2", "3", "4", capability="queue")
    assert client.wait(lambda: len(first.received) + len(second.received) == 4)
    assert (first.bodies(), second.bodies()) == (["1", "3"], ["2", "4"])
    assert all(link.link.credit == 8 for link in links)


def test_an_at_most_once_receiver_gets_settled_deliveries(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "once", capability="queue")
    receiver = client.connection.create_receiver(queue, name="amo", options=[AtMostOnce()])
    assert receive(receiver) is not None
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=2)


# -- Artemis: delivery count and outcomes -------------------------------------------------------
def test_modified_delivery_failed_counts_then_dead_letters_with_the_origin(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "poison", capability="queue")
    receiver = client.receiver(queue, "queue")
    seen = []
    for _ in range(MAX_ATTEMPTS):
        message = receive(receiver)
        assert message is not None
        seen.append((message.delivery_count, message.first_acquirer, message.durable))
        settle(receiver, Delivery.MODIFIED, failed=True)
    assert seen == [(0, True, True), (1, False, True), (2, False, True)]
    assert receive(receiver, timeout=0.2) is None
    assert peer.depth(queue) == 0
    (dead,) = peer.messages("DLA")
    assert dead.body == "poison"
    assert dead.annotations[symbol("x-opt-ORIG-QUEUE")] == queue
    assert dead.annotations[symbol("x-opt-ORIG-ADDRESS")] == queue
    assert peer.routing_type("DLA") == "anycast"


@pytest.mark.parametrize(
    ("state", "failed"), [(Delivery.RELEASED, False), (Delivery.MODIFIED, False)]
)
def test_released_or_modified_without_failure_redelivers_uncounted_without_limit(
    peer: AmqpPeer, client: Client, queue: str, state: int, failed: bool
) -> None:
    client.send(queue, "again", capability="queue")
    receiver = client.receiver(queue, "queue")
    counts = []
    for _ in range(MAX_ATTEMPTS + 2):
        message = receive(receiver)
        assert message is not None
        counts.append(message.delivery_count)
        settle(receiver, state, failed=failed)
    assert counts == [0] * (MAX_ATTEMPTS + 2)
    assert peer.depth("DLA") == 0


def test_rejected_goes_straight_to_the_dead_letter_address(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "bad", capability="queue")
    receiver = client.receiver(queue, "queue")
    assert receive(receiver) is not None
    settle(receiver, Delivery.REJECTED)
    client.pump()
    assert peer.depth(queue) == 0
    (dead,) = peer.messages("DLA")
    assert dead.annotations[symbol("x-opt-ORIG-QUEUE")] == queue


def test_modified_undeliverable_here_goes_to_another_consumer(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "elsewhere", capability="queue")
    first = client.receiver(queue, "queue")
    assert receive(first) is not None
    settle(first, Delivery.MODIFIED, undeliverable=True)
    assert receive(first, timeout=0.3) is None
    second = client.receiver(queue, "queue")
    message = receive(second)
    assert message is not None
    assert message.delivery_count == 0


def test_a_settlement_without_outcome_leaves_the_message_with_its_consumer(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "held", capability="queue")
    receiver = client.receiver(queue, "queue")
    assert receive(receiver) is not None
    settle(receiver, None)
    other = client.receiver(queue, "queue")
    assert receive(other, timeout=0.3) is None
    assert peer.depth(queue) == 1
    receiver.link.close()
    message = receive(other)
    assert message is not None
    assert message.delivery_count == 0


@pytest.mark.parametrize("ending", ["detach", "connection close"])
def test_a_clean_ending_returns_unsettled_messages_uncounted(
    peer: AmqpPeer, client: Client, queue: str, ending: str
) -> None:
    client.send(queue, "unsettled", capability="queue")
    holder = Client(peer.url)
    receiver = holder.receiver(queue, "queue")
    assert receive(receiver) is not None
    if ending == "detach":
        receiver.close()
    holder.close()

    message = receive(client.receiver(queue, "queue"))
    assert message is not None
    assert (message.delivery_count, message.first_acquirer) == (0, False)


def test_a_dropped_connection_counts_its_unsettled_messages_then_dead_letters(
    peer: AmqpPeer, queue: str
) -> None:
    feeder = Client(peer.url)
    feeder.send(queue, "lost", capability="queue")
    feeder.close()
    # Artemis counts every other loss of an AMQP connection (measured on 2.44: 0, 1, 1 and
    # 1, 1, 2, 2, 3), so the cap takes twice as many losses, less one.
    losses = 2 * MAX_ATTEMPTS - 1
    counts = []
    for attempt in range(losses):
        holder = Client(peer.url)
        message = receive(holder.receiver(queue, "queue"))
        assert message is not None
        counts.append(message.delivery_count)
        peer.drop_connections()
        assert holder.wait(lambda h=holder: h.connection.disconnected)  # no close frame came
        holder.close()
        if attempt < losses - 1:
            assert wait_until(lambda: peer.depth(queue) == 1, timeout=2)
    assert counts == [0, 1, 1, 2, 2]
    assert wait_until(lambda: peer.depth("DLA") == 1, timeout=2)
    assert peer.depth(queue) == 0
    assert peer.connections_opened == 1 + losses


def test_a_killed_client_counts_its_unsettled_message(peer: AmqpPeer, queue: str) -> None:
    feeder = Client(peer.url)
    feeder.send(queue, "killed", capability="queue")
    assert die_holding(peer.url, queue) == "killed"
    message = receive(feeder.receiver(queue, "queue"))
    feeder.close()
    assert message is not None
    assert (message.delivery_count, message.first_acquirer) == (1, False)


# -- Artemis: delayed delivery ------------------------------------------------------------------
@pytest.mark.parametrize("annotation", ["x-opt-delivery-delay", "x-opt-delivery-time"])
def test_a_scheduled_message_waits_for_the_clock(queue: str, annotation: str) -> None:
    clock = FakeClock()
    with AmqpPeer(clock=clock) as peer:
        client = Client(peer.url)
        value = 60_000 if annotation.endswith("delay") else int(time.time() * 1000) + 60_000
        sender = client.sender(queue, "queue")
        sender.send(Message(body="later", annotations={symbol(annotation): value}))
        receiver = client.receiver(queue, "queue")
        assert receive(receiver, timeout=0.3) is None
        assert peer.depth(queue) == 1

        clock.now += 61
        message = receive(receiver)
        client.close()
    assert message is not None
    assert message.body == "later"


def test_a_delay_ends_by_the_real_clock(client: Client, queue: str) -> None:
    sender = client.sender(queue, "queue")
    sender.send(Message(body="soon", annotations={symbol("x-opt-delivery-delay"): 300}))
    receiver = client.receiver(queue, "queue")
    started = time.monotonic()
    message = receive(receiver, timeout=3)
    assert message is not None
    assert 0.25 <= time.monotonic() - started < 2


# -- Artemis: expiry ----------------------------------------------------------------------------
def expiring(body: str, *, ttl_s: float = 0, in_s: float = 0) -> Message:
    """A message with a header ttl and/or an absolute expiry in_s from now (wall clock)."""
    message = Message(body=body, durable=True)
    if ttl_s:
        message.ttl = ttl_s
    if in_s:
        message.expiry_time = time.time() + in_s
    return message


@pytest.mark.parametrize("kind", ["absolute", "ttl", "absolute before ttl"])
def test_artemis_never_delivers_an_expired_message_and_drops_it(queue: str, kind: str) -> None:
    clock = FakeClock()
    with AmqpPeer(clock=clock) as peer:
        client = Client(peer.url)
        sender = client.sender(queue, "queue")
        if kind == "absolute":
            sender.send(expiring("expires", in_s=60))
        elif kind == "ttl":
            sender.send(expiring("expires", ttl_s=60))
        else:  # the absolute time wins over a longer ttl (AMQPMessage.scanMessageData)
            sender.send(expiring("expires", ttl_s=3_600, in_s=60))
        sender.send(expiring("kept", ttl_s=3_600))
        clock.now += 61
        receiver = client.receiver(queue, "queue")
        first = receive(receiver)
        receiver.settle(Delivery.ACCEPTED)
        second = receive(receiver, timeout=0.3)
        depth = peer.depth(queue)
        client.close()
    assert first is not None
    assert first.body == "kept"
    assert second is None
    assert depth == 0


def test_artemis_moves_an_expired_message_to_its_expiry_address_without_an_expiry(
    queue: str,
) -> None:
    clock = FakeClock()
    with AmqpPeer(clock=clock, expiry_address="ExpiryQueue") as peer:
        client = Client(peer.url)
        client.sender(queue, "queue").send(expiring("expired", ttl_s=5, in_s=5))
        clock.now += 6
        assert receive(client.receiver(queue, "queue"), timeout=0.3) is None
        expired = receive(client.receiver("ExpiryQueue", "queue"))
        client.close()
    assert expired is not None
    assert expired.body == "expired"
    assert (expired.ttl, expired.expiry_time) == (0, 0)
    annotations = expired.annotations or {}
    assert annotations[symbol("x-opt-ORIG-QUEUE")] == queue
    assert annotations[symbol("x-opt-ORIG-ADDRESS")] == queue
    assert symbol("x-opt-ACTUAL-EXPIRY") in annotations


# -- Artemis: transactions ----------------------------------------------------------------------
class TxnEvents(TransactionHandler):
    def __init__(self) -> None:
        self.events: list[str] = []
        self.transaction: object = None

    def on_transaction_declared(self, event: object) -> None:
        self.transaction = event.transaction  # type: ignore[attr-defined]
        self.events.append("declared")

    def on_transaction_committed(self, event: object) -> None:
        self.events.append("committed")

    def on_transaction_aborted(self, event: object) -> None:
        self.events.append("aborted")

    def on_transaction_commit_failed(self, event: object) -> None:
        self.events.append("commit failed")

    def on_transaction_declare_failed(self, event: object) -> None:
        self.events.append("declare failed")


def declare(client: Client) -> tuple[object, TxnEvents]:
    events = TxnEvents()
    conn = client.connection
    conn.container.declare_transaction(conn.conn, handler=events)
    assert client.wait(lambda: events.events), "no answer to the declare"
    assert events.events == ["declared"]
    return events.transaction, events


@pytest.mark.parametrize("discharge", ["commit", "abort"])
def test_transactional_sends_are_stored_on_commit_only(
    peer: AmqpPeer, client: Client, queue: str, discharge: str
) -> None:
    txn, events = declare(client)
    sender = client.sender(queue, "queue")
    delivery = txn.send(sender.link, Message(body="in txn"))  # type: ignore[attr-defined]
    assert client.wait(lambda: delivery.settled)
    assert delivery.remote_state == 0x34  # transactional-state
    assert delivery.remote.data[1] == Described(ulong(0x24), [])  # its outcome: accepted
    assert peer.depth(queue) == 0

    getattr(txn, discharge)()
    assert client.wait(lambda: len(events.events) == 2)

    expected = ("committed", 1) if discharge == "commit" else ("aborted", 0)
    assert (events.events[1], peer.depth(queue)) == expected


def test_a_transactional_accept_removes_the_message_on_commit(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "taken", capability="queue")
    txn, events = declare(client)
    receiver = client.receiver(queue, "queue")
    assert receive(receiver) is not None
    delivery = receiver.fetcher.unsettled.popleft()
    txn.accept(delivery)  # type: ignore[attr-defined]
    assert client.wait(lambda: delivery.remote_state == 0x34)  # confirmed, not yet settled
    assert not delivery.settled
    assert peer.depth(queue) == 1

    txn.commit()  # type: ignore[attr-defined]
    assert client.wait(lambda: "committed" in events.events)
    assert wait_until(lambda: peer.depth(queue) == 0, timeout=2)


def test_an_aborted_accept_makes_the_message_deliverable_again_uncounted(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    client.send(queue, "kept", capability="queue")
    txn, events = declare(client)
    receiver = client.receiver(queue, "queue")
    assert receive(receiver) is not None
    txn.accept(receiver.fetcher.unsettled.popleft())  # type: ignore[attr-defined]

    txn.abort()  # type: ignore[attr-defined]
    assert client.wait(lambda: "aborted" in events.events)

    message = receive(receiver)
    assert message is not None
    assert (message.body, message.delivery_count, message.first_acquirer) == ("kept", 0, False)
    assert peer.depth(queue) == 1


def test_discharging_an_unknown_transaction_is_rejected(client: Client) -> None:
    txn, events = declare(client)
    txn.id = b"no-such-txn"  # type: ignore[attr-defined]
    txn.commit()  # type: ignore[attr-defined]
    assert client.wait(lambda: len(events.events) == 2)
    assert events.events[1] == "commit failed"


# -- Artemis: inspection and lifecycle ----------------------------------------------------------
def test_messages_lists_ready_scheduled_and_in_flight_in_order(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    sender = client.sender(queue, "queue")
    sender.send(Message(body="in flight"))
    sender.send(Message(body="scheduled", annotations={symbol("x-opt-delivery-delay"): 60_000}))
    sender.send(Message(body="ready", properties={"tenantUUID": "org-b"}))
    receiver = client.receiver(queue, "queue", selector="tenantUUID IS NULL")
    assert receive(receiver) is not None
    assert [m.body for m in peer.messages(queue)] == ["in flight", "scheduled", "ready"]
    assert peer.depth(queue) == 3
    assert peer.messages("no-such-queue") == []


def test_a_stomp_message_reads_like_artemis_hands_it_to_amqp(
    peer: AmqpPeer, client: Client, queue: str
) -> None:
    peer.put_over_stomp(queue, b'{"a": 1}', {"tenantUUID": "org-a"})
    message = receive(client.receiver(queue, "queue"))
    assert message is not None
    assert message.body == b'{"a": 1}'
    assert message.properties == {
        "tenantUUID": "org-a",
        "content-length": "8",
        "destination": f"/queue/{queue}",
    }


def test_close_stops_listening_and_disconnects_clients() -> None:
    peer = AmqpPeer()
    client = Client(peer.url)
    peer.close()
    assert client.wait(lambda: client.connection.disconnected)
    assert not port_open("127.0.0.1", peer.port)
    peer.close()  # a second close is harmless
    client.close()


# -- RabbitMQ 3.10: the model and the real broker -----------------------------------------------
@pytest.fixture(params=["model", pytest.param("real", marks=pytest.mark.amqp_broker)])
def rabbitmq(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of RabbitMQ 3.10 with rabbitmq_amqp1_0: the peer's model of it, or the real one."""
    if request.param == "model":
        with AmqpPeer(PeerFlavour.RABBITMQ) as peer:
            yield peer.url
        return
    parts = urlsplit(REAL_RABBITMQ_URL)
    if not port_open(parts.hostname or "127.0.0.1", parts.port or 5672):
        unavailable(f"no RabbitMQ at {REAL_RABBITMQ_URL} (BOOST_TEST_AMQP_URL)")
    yield REAL_RABBITMQ_URL


@pytest.fixture
def rabbit(rabbitmq: str) -> Iterator[Client]:
    made = Client(rabbitmq)
    yield made
    made.close()


@pytest.fixture
def address(queue: str) -> str:
    return f"/queue/{queue}"


def test_rabbitmq_open_frame(rabbit: Client) -> None:
    conn = rabbit.connection.conn
    assert conn.remote_properties[symbol("product")] == "RabbitMQ"
    assert conn.remote_properties[symbol("version")] == "3.10.8"
    assert conn.remote_offered_capabilities is None


def test_rabbitmq_a_bare_name_is_the_queue_of_that_name(
    rabbit: Client, queue: str, address: str
) -> None:
    rabbit.send(queue, "bare")
    receiver = rabbit.receiver(address)
    message = receive(receiver)
    receiver.settle(Delivery.ACCEPTED)
    assert message is not None
    assert message.body == "bare"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/foo/x", 'Attach rejected: {unknown_destination,"/foo/x"}'),
        ("/queue/", 'Attach rejected: {invalid_destination,queue,"/"}'),
        (None, "Attach rejected: {address_not_utf8_string,undefined}"),
    ],
)
def test_rabbitmq_an_address_it_does_not_know_ends_the_session(
    rabbit: Client, target: str | None, expected: str
) -> None:
    condition = refusal(rabbit, target, receiving=False)
    assert condition is not None
    assert (condition.name, condition.description) == ("amqp:invalid-field", expected)


def test_rabbitmq_echoes_the_selector_but_delivers_everything(rabbit: Client, address: str) -> None:
    sender = rabbit.sender(address)
    for tenant in ("org-a", "org-b"):
        sender.send(Message(body=tenant, properties={"tenantUUID": tenant}))
    text = Selector("org-a").render()

    receiver = rabbit.receiver(address, selector=text, credit=5)

    source = receiver.link.remote_source
    assert data_object(source.filter) == selector_filter(text)
    assert list(data_object(source.outcomes).elements) == [
        symbol("amqp:accepted:list"),
        symbol("amqp:rejected:list"),
        symbol("amqp:released:list"),
    ]
    got = [receive(receiver), receive(receiver)]
    receiver.settle(Delivery.ACCEPTED)
    assert [m.body if m else None for m in got] == ["org-a", "org-b"]


def test_rabbitmq_redelivers_a_released_message_without_a_count(
    rabbit: Client, address: str
) -> None:
    rabbit.send(address, "again")
    receiver = rabbit.receiver(address)
    seen = []
    for _ in range(3):
        message = receive(receiver)
        assert message is not None
        seen.append((message.delivery_count, message.first_acquirer, message.durable))
        settle(receiver, Delivery.RELEASED)
    assert seen == [(0, True, True), (0, False, True), (0, False, True)]


def test_rabbitmq_drops_a_rejected_message(rabbit: Client, address: str) -> None:
    rabbit.send(address, "bad")
    receiver = rabbit.receiver(address)
    assert receive(receiver) is not None
    settle(receiver, Delivery.REJECTED)
    assert receive(receiver, timeout=0.3) is None
    assert receive(rabbit.receiver(address), timeout=0.3) is None


@pytest.mark.parametrize(
    "outcome",
    [
        (Delivery.MODIFIED, True, "{'v1_0.modified',true,false,undefined}"),
        (Delivery.MODIFIED, False, "{'v1_0.modified',false,false,undefined}"),
        (None, False, "undefined"),
    ],
    ids=["modified-failed", "modified", "no-outcome"],
)
def test_rabbitmq_ends_the_session_on_modified_or_no_outcome_and_requeues(
    rabbitmq: str, rabbit: Client, address: str, outcome: tuple[int | None, bool, str]
) -> None:
    state, failed, shown = outcome
    rabbit.send(address, "odd")
    receiver = rabbit.receiver(address)
    assert receive(receiver) is not None
    settle(receiver, state, failed=failed)
    session = receiver.link.session
    assert rabbit.wait(lambda: session.state & Endpoint.REMOTE_CLOSED)
    assert session.remote_condition.name == "amqp:invalid-field"
    assert session.remote_condition.description.startswith(f"Unrecognised state: {shown}")

    other = Client(rabbitmq)
    receiver = other.receiver(address)
    message = receive(receiver)
    receiver.settle(Delivery.ACCEPTED)
    other.close()
    assert message is not None
    assert (message.body, message.first_acquirer, message.delivery_count) == ("odd", False, 0)


def test_rabbitmq_ignores_a_delivery_delay(rabbit: Client, address: str) -> None:
    sender = rabbit.sender(address)
    sender.send(Message(body="now", annotations={symbol("x-opt-delivery-delay"): 60_000}))
    receiver = rabbit.receiver(address)
    message = receive(receiver, timeout=1)
    receiver.settle(Delivery.ACCEPTED)
    assert message is not None


def test_rabbitmq_honours_the_header_ttl_and_ignores_an_absolute_expiry(
    rabbit: Client, address: str
) -> None:
    """Measured on 3.10.8: header.ttl is its per-message TTL (expired, never delivered);
    properties.absolute-expiry-time alone is not read, but comes back with the message."""
    sender = rabbit.sender(address)
    sender.send(expiring("ttl", ttl_s=0.3))
    sender.send(expiring("absolute", in_s=0.3))
    sender.send(expiring("both", ttl_s=0.3, in_s=0.3))
    sender.send(expiring("long", ttl_s=600, in_s=600))
    time.sleep(0.8)
    receiver = rabbit.receiver(address)
    got = []
    while (message := receive(receiver, timeout=0.5)) is not None:
        receiver.settle(Delivery.ACCEPTED)
        got.append(message)
    assert [m.body for m in got] == ["absolute", "long"]
    absolute, long = got
    assert 0 < absolute.expiry_time < time.time(), "delivered after its absolute expiry"
    assert long.ttl == 600.0, "the ttl comes back as it was sent"


def test_rabbitmq_refuses_a_transaction_coordinator(rabbit: Client) -> None:
    events = TxnEvents()
    conn = rabbit.connection
    conn.container.declare_transaction(conn.conn, handler=events)
    link = conn.conn.link_head(0)
    assert rabbit.wait(lambda: link.session.state & Endpoint.REMOTE_CLOSED)
    condition = link.session.remote_condition
    assert (condition.name, condition.description) == (
        "amqp:not-implemented",
        "Transactions not supported",
    )
    assert events.events == []


@pytest.mark.parametrize("ending", ["connection close", "killed client"])
def test_rabbitmq_requeues_what_an_ended_client_held(
    rabbitmq: str, rabbit: Client, address: str, ending: str
) -> None:
    rabbit.send(address, "held")
    if ending == "killed client":
        assert die_holding(rabbitmq, address) == "held"
    else:
        holder = Client(rabbitmq)
        assert receive(holder.receiver(address)) is not None
        holder.close()
    receiver = rabbit.receiver(address)
    message = receive(receiver)
    receiver.settle(Delivery.ACCEPTED)
    assert message is not None
    assert (message.first_acquirer, message.delivery_count) == (False, 0)


def test_rabbitmq_answers_a_link_close_with_a_plain_detach(rabbit: Client, address: str) -> None:
    receiver = rabbit.receiver(address)
    detached: list[str] = []
    receiver.fetcher.on_link_remote_detach = lambda event: detached.append("detach")
    receiver.link.close()
    assert rabbit.wait(lambda: detached)
    assert not receiver.link.state & Endpoint.REMOTE_CLOSED


def test_rabbitmq_model_routing_type_and_depth_use_the_queue_name(queue: str) -> None:
    with AmqpPeer(PeerFlavour.RABBITMQ) as peer:
        client = Client(peer.url)
        client.send(f"/queue/{queue}", "one")
        client.close()
        assert peer.routing_type(f"/queue/{queue}") == "anycast"
        assert [m.body for m in peer.messages(queue)] == ["one"]
        assert peer.routing_type("/queue/other") is None
