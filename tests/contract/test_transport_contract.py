"""The transport contract the toolkit relies on, proven on the in-memory models of Classic and
Artemis and on the STOMP broker; where brokers differ, the capabilities say how."""

from __future__ import annotations

import time
import uuid

import pytest

from boost_tenancy import TenantId
from boost_tenancy.errors import BoostTenancyError, QueueStatsUnavailableError
from boost_tenancy.expiry import now_ms
from boost_tenancy.messages import WireMessage
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.transports.base import (
    ConnectionStatus,
    Outgoing,
    Transport,
    queue_lister,
    queue_stats_reader,
)
from boost_tenancy.transports.options import DEFAULT_ARTEMIS_WINDOW_BYTES
from tests.conftest import Inbox, TransportFactory, unique_queue, wait_until
from tests.contract.conftest import LoseConnection, QueueFlagsOf, lose_connection_now
from tests.queue_flags import KEPT


def wire(tenant: str, body: str | bytes = "{}", **props: str) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": tenant, **props}, correlation_id="c-1")


def needs(transport: Transport, capability: str) -> None:
    """Skip where the broker lacks capability; the refusal tests below prove that the transport
    then says no instead of pretending."""
    if not getattr(transport.capabilities, capability):
        pytest.skip(f"the broker has no {capability} (its refusal is tested instead)")


def test_round_trip_keeps_text_body_properties_and_correlation_id(
    transport_factory: TransportFactory,
) -> None:
    queue = unique_queue()
    sender, receiver = transport_factory(), transport_factory()
    inbox = Inbox()
    receiver.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    sender.send(queue, wire("t1", '{"text": "Zürich"}', boostMessageId="m-1", colour="blue"))
    assert wait_until(lambda: len(inbox) == 1)
    delivery = inbox.items[0]
    assert delivery.body == '{"text": "Zürich"}'
    assert isinstance(delivery.body, str)
    assert delivery.properties["tenantUUID"] == "t1"
    assert delivery.properties["boostMessageId"] == "m-1"
    assert delivery.properties["colour"] == "blue"
    assert delivery.correlation_id == "c-1"
    assert delivery.redelivered is False
    assert delivery.queue == queue


def test_bytes_body_round_trips_unchanged(transport_factory: TransportFactory) -> None:
    queue = unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    payload = bytes(range(256))
    transport.send(queue, wire("t1", payload))
    assert wait_until(lambda: len(inbox) == 1)
    assert inbox.items[0].body == payload


def test_selector_delivers_only_its_tenants_messages(transport_factory: TransportFactory) -> None:
    queue = unique_queue()
    sender = transport_factory()
    needs(sender, "server_side_selectors")
    inboxes = {name: Inbox() for name in ("org-A", "org-B", "org-C")}
    for name, inbox in inboxes.items():
        transport_factory().subscribe(
            queue, selector=tenant_selector(name), prefetch=50, on_delivery=inbox
        )
    for index in range(30):
        tenant = ("org-A", "org-B", "org-C")[index % 3]
        sender.send(queue, wire(tenant, f'{{"n": {index}}}'))
    assert wait_until(lambda: sum(len(i) for i in inboxes.values()) == 30)
    for name, inbox in inboxes.items():
        assert len(inbox) == 10
        assert {d.properties["tenantUUID"] for d in inbox.items} == {name}


def test_selector_with_quote_in_value_matches_only_that_literal(
    transport_factory: TransportFactory,
) -> None:
    """The builder escapes literals: a clause value with quotes cannot widen the selector."""
    queue = unique_queue()
    sender, receiver = transport_factory(), transport_factory()
    needs(receiver, "server_side_selectors")
    inbox = Inbox()
    selector = tenant_selector("org-A").and_equals("kind", "x' OR '1'='1")
    receiver.subscribe(queue, selector=selector, prefetch=10, on_delivery=inbox)
    sender.send(queue, wire("org-B", "b", kind="x' OR '1'='1"))
    sender.send(queue, wire("org-A", "a-other", kind="other"))
    sender.send(queue, wire("org-A", "a-match", kind="x' OR '1'='1"))
    assert wait_until(lambda: len(inbox) >= 1)
    time.sleep(0.5)
    assert inbox.bodies() == ["a-match"]


def test_acked_delivery_is_gone_and_unacked_comes_back_redelivered(
    transport_factory: TransportFactory,
) -> None:
    queue = unique_queue()
    sender, first = transport_factory(), transport_factory()
    inbox = Inbox()
    first.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    sender.send(queue, wire("t1", "acked"))
    sender.send(queue, wire("t1", "unacked"))
    assert wait_until(lambda: len(inbox) == 2)
    acked = next(d for d in inbox.items if d.body == "acked")
    first.ack(acked)
    time.sleep(0.2)
    first.close()
    second = transport_factory()
    again = Inbox()
    second.subscribe(queue, selector=None, prefetch=10, on_delivery=again)
    assert wait_until(lambda: len(again) == 1)
    time.sleep(0.5)
    assert again.bodies() == ["unacked"]
    if second.capabilities.native_delivery_count:
        # the broker counts failed deliveries only: one handed back by an orderly close is not
        # a failure, and Artemis takes its count back (ServerConsumerImpl: the delivery count
        # is decremented unless the client failed), so no attempt is used up by a shutdown
        assert again.items[0].delivery_count == 0
    else:
        assert again.items[0].redelivered is True


def test_a_message_is_named_alike_on_each_of_its_deliveries(
    transport_factory: TransportFactory,
) -> None:
    """A message without the toolkit's id gets one derived from the broker's name for it, so
    that name must outlive the subscription: Artemis's STOMP message-id starts with the
    consumer's id, which once gave a quarantined message a new id at every listing."""
    queue = unique_queue()
    sender, first = transport_factory(), transport_factory()
    inbox = Inbox()
    first.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    sender.send(queue, wire("t1", "foreign"))
    assert wait_until(lambda: len(inbox) == 1)
    first.close()
    second = transport_factory()
    again = Inbox()
    second.subscribe(queue, selector=None, prefetch=10, on_delivery=again)
    assert wait_until(lambda: len(again) == 1)
    (before,), (after,) = inbox.items, again.items
    assert before.broker_message_id is not None
    assert after.broker_message_id == before.broker_message_id


def test_a_delivery_left_unsettled_by_a_lost_connection_comes_back_counted(
    transport_factory: TransportFactory,
) -> None:
    """As when the worker holding it dies: the broker takes the delivery back, marks it
    redelivered and, where it counts deliveries, counts each loss. The message carries an id,
    as every message the toolkit sends does: Artemis's AMQP count misses losses, and the
    transport makes up for it by the id (transports/amqp/lost_counts.py)."""
    queue = unique_queue()
    sender, receiver = transport_factory(), transport_factory()
    inbox = Inbox()
    receiver.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    sender.send(queue, wire("t1", "held when the worker died", boostMessageId="m-lost"))
    for lost in (1, 2):
        assert wait_until(lambda lost=lost: len(inbox) == lost)
        lose_connection_now(receiver)
    assert wait_until(lambda: len(inbox) == 3)
    first, _, third = inbox.items
    assert third.body == "held when the worker died"
    assert third.redelivered is True
    assert not receiver.is_live(first)
    if receiver.capabilities.native_delivery_count:
        assert [d.delivery_count for d in inbox.items] == [0, 1, 2]
    receiver.ack(third)
    time.sleep(0.3)
    assert len(inbox) == 3


def test_prefetch_bounds_unacknowledged_messages_of_the_expected_size(
    transport_factory: TransportFactory,
) -> None:
    """Prefetch means messages on both brokers for messages of the expected size (Artemis counts
    bytes: the transport asks for prefetch times the expected size)."""
    queue = unique_queue()
    sender, receiver = transport_factory(), transport_factory()
    inbox = Inbox()
    receiver.subscribe(queue, selector=None, prefetch=2, on_delivery=inbox)
    for index in range(6):
        sender.send(queue, wire("t1", f"{index}:".ljust(DEFAULT_ARTEMIS_WINDOW_BYTES, "x")))
    assert wait_until(lambda: len(inbox) == 2)
    time.sleep(0.5)
    assert len(inbox) == 2
    receiver.ack(inbox.items[0])
    assert wait_until(lambda: len(inbox) == 3)
    time.sleep(0.3)
    assert len(inbox) == 3
    assert [str(b).split(":")[0] for b in inbox.bodies()] == ["0", "1", "2"]


def test_prefetch_of_small_messages_follows_the_brokers_unit(
    transport_factory: TransportFactory,
) -> None:
    """Counted in messages, prefetch holds exactly; counted in bytes, small messages fill the
    window of prefetch times the expected size, so all 20 arrive unacknowledged."""
    queue = unique_queue()
    sender, receiver = transport_factory(), transport_factory()
    inbox = Inbox()
    receiver.subscribe(queue, selector=None, prefetch=2, on_delivery=inbox)
    atomic = sender.capabilities.atomic_batches
    sender.send_batch([(queue, wire("t1", f"small-{i}")) for i in range(20)], atomic=atomic)
    expected = 2 if receiver.capabilities.prefetch_counts_messages else 20
    assert wait_until(lambda: len(inbox) == expected)
    time.sleep(0.5)
    assert len(inbox) == expected


def test_delayed_delivery_is_held_back(transport_factory: TransportFactory) -> None:
    queue = unique_queue()
    transport = transport_factory()
    needs(transport, "delayed_delivery")
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    started = time.monotonic()
    transport.send(queue, wire("t1", "later"), delay_ms=1500)
    transport.send(queue, wire("t1", "now"))
    assert wait_until(lambda: len(inbox) == 1)
    assert inbox.bodies() == ["now"]
    assert wait_until(lambda: len(inbox) == 2, timeout=10)
    assert time.monotonic() - started >= 1.4
    assert inbox.bodies()[1] == "later"


def test_a_sent_expiry_is_honoured_and_kept_by_a_forwarded_copy(
    transport_factory: TransportFactory,
) -> None:
    """A message past its expiry is never delivered (what the broker does with it instead
    differs: tests/unit/test_memory_expiry.py); one before it comes with its expiry, which a
    forwarded copy keeps."""
    queue, other = unique_queue(), unique_queue()
    transport = transport_factory()
    now = now_ms()
    short, long = now + 400, now + 600_000
    transport.send(queue, WireMessage(body="short", properties={}, expires_at_ms=short))
    transport.send_batch(
        [
            (queue, WireMessage(body="long", properties={}, expires_at_ms=long)),
            (queue, WireMessage(body="never", properties={})),
        ],
        atomic=transport.capabilities.atomic_batches,
    )
    time.sleep(1.0)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) >= 2)
    time.sleep(0.3)
    assert [(d.body, d.expires_at_ms) for d in inbox.items] == [("long", long), ("never", None)]
    copies = Inbox()
    transport.subscribe(other, selector=None, prefetch=5, on_delivery=copies)
    kept = inbox.items[0]
    copy = WireMessage(body=kept.body, properties={}, expires_at_ms=kept.expires_at_ms)
    transport.send_then_ack(kept, [Outgoing(other, copy)])
    assert wait_until(lambda: len(copies) == 1)
    assert copies.items[0].expires_at_ms == long


def test_send_batch_delivers_every_message_in_order(transport_factory: TransportFactory) -> None:
    queue = unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    atomic = transport.capabilities.atomic_batches
    transport.send_batch([(queue, wire("t1", str(i))) for i in range(50)], atomic=atomic)
    assert wait_until(lambda: len(inbox) == 50)
    assert inbox.bodies() == [str(i) for i in range(50)]


def test_forward_sends_copies_and_acknowledges_the_original(
    transport_factory: TransportFactory,
) -> None:
    queue, other = unique_queue(), unique_queue()
    transport = transport_factory()
    inbox, out = Inbox(), Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    transport.subscribe(other, selector=None, prefetch=5, on_delivery=out)
    transport.send(queue, wire("t1", "original"))
    assert wait_until(lambda: len(inbox) == 1)
    transport.send_then_ack(
        inbox.items[0], [(other, wire("t1", "copy-1"), 0), (other, wire("t1", "copy-2"), 0)]
    )
    assert wait_until(lambda: len(out) == 2)
    assert out.bodies() == ["copy-1", "copy-2"]
    transport.close()
    reader = transport_factory()
    again = Inbox()
    reader.subscribe(queue, selector=None, prefetch=5, on_delivery=again)
    time.sleep(0.8)
    assert len(again) == 0, "the forwarded original was acknowledged and must not come back"


def test_a_copy_of_a_transactional_send_carries_no_frame_header_and_is_stored(
    transport_factory: TransportFactory,
) -> None:
    """Artemis keeps a STOMP SEND's `transaction` header as a property; a copy that carried it
    would be filed under that long-committed transaction and never stored, its receipt
    answered all the same (shared BROKERS.md, 2026-11-28)."""
    queue, other = unique_queue(), unique_queue()
    transport = transport_factory()
    needs(transport, "atomic_batches")
    inbox, out = Inbox(), Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    transport.send_batch([(queue, wire("t1", "original"))], atomic=True)
    assert wait_until(lambda: len(inbox) == 1)
    delivery = inbox.items[0]
    frame_level = {"transaction", "receipt", "destination", "subscription", "message-id", "ack"}
    assert not frame_level & set(delivery.properties), delivery.properties
    copy = WireMessage(body=delivery.body, properties=dict(delivery.properties))
    transport.send_then_ack(delivery, [(other, copy, 0)])
    transport.subscribe(other, selector=None, prefetch=5, on_delivery=out)
    assert wait_until(lambda: len(out) == 1), "the confirmed copy was never stored"
    assert out.bodies() == ["original"]


def test_a_copy_sent_back_to_its_queue_is_stored_though_the_message_had_a_duplicate_id(
    transport_factory: TransportFactory,
) -> None:
    """Artemis drops a message whose _AMQ_DUPL_ID its address has seen, and confirms the send
    all the same (measured on 2.44, over STOMP and AMQP). A retry's copy carrying the id of the
    message it copies went back to the same address: dropped, and the message lost. No delivery
    carries the id on; the copy is stored. Elsewhere the property means nothing and the copy is
    stored anyway."""
    queue = unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    duplicate_id = f"order-{uuid.uuid4().hex[:8]}"
    first = WireMessage(body="first", properties={"tenantUUID": "t1", "_AMQ_DUPL_ID": duplicate_id})
    transport.send(queue, first)
    assert wait_until(lambda: len(inbox) == 1)
    delivery = inbox.items[0]
    retry = WireMessage(body="retried", properties=dict(delivery.properties))
    transport.send_then_ack(delivery, [(queue, retry, 0)])
    assert wait_until(lambda: len(inbox) == 2), "the confirmed copy was never stored"
    assert inbox.bodies() == ["first", "retried"]
    assert "_AMQ_DUPL_ID" not in delivery.properties


def test_delivery_of_a_closed_connection_is_not_live(transport_factory: TransportFactory) -> None:
    queue = unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    transport.send(queue, wire("t1", "x"))
    assert wait_until(lambda: len(inbox) == 1)
    assert transport.is_live(inbox.items[0]) is True
    transport.close()
    assert transport.is_live(inbox.items[0]) is False


def test_tenant_ids_are_never_rewritten_by_the_transport(
    transport_factory: TransportFactory,
) -> None:
    queue = unique_queue()
    transport = transport_factory()
    needs(transport, "server_side_selectors")
    inbox = Inbox()
    tenant = TenantId("550e8400-e29b-41d4-a716-446655440000")
    transport.subscribe(queue, selector=tenant_selector(tenant), prefetch=5, on_delivery=inbox)
    transport.send(queue, wire("550E8400-E29B-41D4-A716-446655440000", "upper"))
    transport.send(queue, wire(tenant.value, "exact"))
    assert wait_until(lambda: len(inbox) == 1)
    time.sleep(0.3)
    assert inbox.bodies() == ["exact"], "tenant ids are case-sensitive on both transports"


def test_open_batch_commit_stores_every_message_in_order(
    transport_factory: TransportFactory,
) -> None:
    queue = unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=500, on_delivery=inbox)
    kinds = (True, False) if transport.capabilities.atomic_batches else (False,)
    for atomic in kinds:
        batch = transport.open_batch(atomic=atomic)
        for index in range(200):
            batch.add(queue, wire("t1", f"{atomic}-{index}" + "x" * 500))
        batch.commit()
    assert wait_until(lambda: len(inbox) == 200 * len(kinds))
    expected = [f"{atomic}-{i}" for atomic in kinds for i in range(200)]
    assert [str(b)[:-500] for b in inbox.bodies()] == expected


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "plain"])
def test_an_aborted_batch_stores_nothing(transport_factory: TransportFactory, atomic: bool) -> None:
    """200 messages of 1 KiB exceed the 64 KiB write chunk, so part of an atomic batch went out
    before abort; a plain batch writes nothing before commit. Either way none of it is stored."""
    queue = unique_queue()
    transport = transport_factory()
    if atomic:
        needs(transport, "atomic_batches")
    batch = transport.open_batch(atomic=atomic)
    for index in range(200):
        batch.add(queue, wire("t1", f"{index}" + "y" * 1024))
    batch.abort()
    transport.send(queue, wire("t1", "after"))
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=500, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) >= 1)
    time.sleep(0.5)
    assert inbox.bodies() == ["after"]


def test_forward_many_moves_every_delivery_and_acknowledges_the_originals(
    transport_factory: TransportFactory,
) -> None:
    queue, other = unique_queue(), unique_queue()
    transport = transport_factory()
    inbox, out = Inbox(), Inbox()
    transport.subscribe(queue, selector=None, prefetch=50, on_delivery=inbox)
    transport.subscribe(other, selector=None, prefetch=50, on_delivery=out)
    for index in range(30):
        transport.send(queue, wire("t1", f"m{index}"))
    assert wait_until(lambda: len(inbox) == 30)
    moved = transport.send_then_ack_many(
        [(d, [(other, wire("t1", f"copy-{d.body}"), 0)]) for d in inbox.items]
    )
    assert list(moved) == inbox.items, "it reports every delivery it moved"
    assert wait_until(lambda: len(out) == 30)
    assert sorted(map(str, out.bodies())) == sorted(f"copy-m{i}" for i in range(30))
    transport.close()
    again = Inbox()
    transport_factory().subscribe(queue, selector=None, prefetch=50, on_delivery=again)
    time.sleep(0.8)
    assert len(again) == 0, "every forwarded original was acknowledged"


def test_forward_many_skips_and_leaves_out_a_delivery_of_a_lost_connection(
    transport_factory: TransportFactory,
) -> None:
    """What a reconnection took back is not moved, and not reported as moved: the broker
    redelivers it, and a caller counting or auditing moves counts only what moved."""
    queue, other = unique_queue(), unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    transport.send(queue, wire("t1", "m"))
    assert wait_until(lambda: len(inbox) == 1)
    (stale,) = inbox.items
    lose_connection_now(transport)
    assert wait_until(lambda: len(inbox) == 2, timeout=20), "redelivered after reconnecting"
    assert transport.send_then_ack_many([(stale, [(other, wire("t1", "copy"), 0)])]) == []


def test_text_and_byte_bodies_keep_their_kind_even_when_empty_or_alike(
    transport_factory: TransportFactory,
) -> None:
    """Text comes back as str and bytes as bytes on both brokers (Artemis puts content-length on
    every MESSAGE), including empty bodies and bytes that happen to be valid UTF-8 text."""
    queue = unique_queue()
    transport = transport_factory()
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=10, on_delivery=inbox)
    sent: list[str | bytes] = ["", b"", '{"a": 1}', b'{"a": 1}', "Zürich", "Zürich".encode()]
    for body in sent:
        transport.send(queue, wire("t1", body))
    assert wait_until(lambda: len(inbox) == len(sent))
    assert [(type(b), b) for b in inbox.bodies()] == [(type(b), b) for b in sent]
    for delivery in inbox.items:
        assert "content-type" not in delivery.properties
        assert "content-length" not in delivery.properties


def test_a_forward_across_a_lost_connection_loses_nothing_and_duplicates_only_if_not_atomic(
    transport_factory: TransportFactory, lose_connection_before_next_ack: LoseConnection
) -> None:
    """Atomic forward: the copy and the ack are one step, so the original never comes back.
    Otherwise the copy is confirmed first and the original comes back redelivered; forwarded
    again, the two copies carry the same boostMessageId, so the duplicate is detectable."""
    queue, other = unique_queue(), unique_queue()
    transport = transport_factory()
    inbox, out = Inbox(), Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    # The copies are read on a connection of their own, which the lost one does not disturb.
    transport_factory().subscribe(other, selector=None, prefetch=5, on_delivery=out)
    transport.send(queue, wire("t1", "original", boostMessageId="m-42"))
    assert wait_until(lambda: len(inbox) == 1)
    copy = wire("t1", "copy", boostMessageId="m-42")
    lose_connection_before_next_ack(transport)
    transport.send_then_ack(inbox.items[0], [(other, copy, 0)])
    assert wait_until(lambda: len(out) == 1)
    if transport.capabilities.atomic_forward:
        time.sleep(1.0)
        assert len(inbox) == 1, "forwarded atomically, the original is gone"
    else:
        assert wait_until(lambda: len(inbox) == 2, timeout=15), "the original comes back"
        again = inbox.items[1]
        assert (again.body, again.redelivered) == ("original", True)
        assert wait_until(lambda: transport.is_live(again))
        transport.send_then_ack(again, [(other, copy, 0)])
        assert wait_until(lambda: len(out) == 2)
    ids = {d.properties["boostMessageId"] for d in out.items}
    assert ids == {"m-42"}, "every copy carries the original's id"
    transport.close()
    reader = transport_factory()
    left = Inbox()
    reader.subscribe(queue, selector=None, prefetch=5, on_delivery=left)
    time.sleep(0.8)
    assert len(left) == 0, "the original was acknowledged in the end"


def test_a_selector_the_broker_does_not_apply_is_refused_and_nothing_is_delivered(
    transport_factory: TransportFactory,
) -> None:
    """Fail closed: where the broker does not apply selectors (RabbitMQ 3.10 echoes the filter
    and then delivers every tenant's messages), subscribing with one is an error."""
    queue = unique_queue()
    sender, receiver = transport_factory(), transport_factory()
    if receiver.capabilities.server_side_selectors:
        pytest.skip("the broker applies selectors (tested above)")
    sender.send(queue, wire("org-B", "not for org-A"))
    inbox = Inbox()
    with pytest.raises(BoostTenancyError, match="selector"):
        receiver.subscribe(queue, selector=tenant_selector("org-A"), prefetch=5, on_delivery=inbox)
    time.sleep(0.5)
    assert len(inbox) == 0


def test_without_delayed_delivery_a_delayed_send_is_refused(
    transport_factory: TransportFactory,
) -> None:
    transport = transport_factory()
    if transport.capabilities.delayed_delivery:
        pytest.skip("the broker delays messages (tested above)")
    queue = unique_queue()
    with pytest.raises(BoostTenancyError, match="delay"):
        transport.send(queue, wire("t1", "later"), delay_ms=1000)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    time.sleep(0.5)
    assert len(inbox) == 0, "a refused delayed send stores nothing"


def test_without_transactions_an_atomic_batch_is_refused(
    transport_factory: TransportFactory,
) -> None:
    transport = transport_factory()
    if transport.capabilities.atomic_batches:
        pytest.skip("the broker has transactions (tested above)")
    queue = unique_queue()
    with pytest.raises(BoostTenancyError, match="atomic"):
        transport.send_batch([(queue, wire("t1", "x"))])
    with pytest.raises(BoostTenancyError, match="atomic"):
        transport.open_batch(atomic=True)


def test_queue_statistics_count_waiting_and_in_flight_apart_and_create_no_queue(
    transport_factory: TransportFactory,
) -> None:
    sender, receiver = transport_factory(), transport_factory()
    reader = queue_stats_reader(sender) if sender.capabilities.queue_statistics else None
    if reader is None:
        pytest.skip("the broker reports no queue statistics (its refusal is tested instead)")
    queue, missing = unique_queue(), unique_queue()
    for index in range(5):
        sender.send(queue, wire("t1", f"m{index}"))
    inbox = Inbox()
    receiver.subscribe(queue, selector=None, prefetch=2, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) >= 2)

    def counts(acked: int) -> bool:
        # Where the broker bounds bytes in flight (Artemis) more than 2 may be delivered.
        stats = reader.queue_stats([queue, missing]).get(queue)
        held = len(inbox)
        expected = (5 - held, held - acked)
        return stats is not None and (stats.waiting, stats.in_flight) == expected

    assert wait_until(lambda: counts(0)), reader.queue_stats([queue])
    assert reader.queue_stats([queue])[queue].scheduled in (None, 0)  # type: ignore[union-attr]
    assert reader.queue_stats([missing]) == {missing: None}
    receiver.ack(inbox.items[0])
    assert wait_until(lambda: counts(1)), reader.queue_stats([queue])


def test_queue_listing_finds_every_queue_under_a_prefix_with_counts_and_consumers(
    transport_factory: TransportFactory,
) -> None:
    transport = transport_factory()
    if not transport.capabilities.queue_listing:
        pytest.skip("the broker lists no queues (its refusal is tested instead)")
    lister = queue_lister(transport)
    prefix = unique_queue("listed")
    first, second, elsewhere = f"{prefix}.a", f"{prefix}.b", unique_queue("other")
    for queue in (first, first, second, elsewhere):
        transport.send(queue, wire("t1", "waiting"))
    transport.subscribe(second, selector=None, prefetch=5, on_delivery=Inbox())

    def listed() -> list[tuple[str, int, int]]:
        return [(q.name, q.stats.stored, q.consumers) for q in lister.list_queues([f"{prefix}."])]

    assert wait_until(lambda: listed() == [(first, 2, 0), (second, 1, 1)]), listed()


def test_without_queue_statistics_asking_is_refused(transport_factory: TransportFactory) -> None:
    transport = transport_factory()
    if transport.capabilities.queue_statistics:
        pytest.skip("the broker reports queue statistics (tested above)")
    with pytest.raises(QueueStatsUnavailableError):
        queue_stats_reader(transport)


def test_connection_status_tells_which_subscriptions_consume_now(
    transport_factory: TransportFactory,
) -> None:
    """What readiness reads (ProcessorRunner.health): connected, and each subscription open
    until it is unsubscribed; nothing open once the transport is closed."""
    transport = transport_factory()
    assert isinstance(transport, ConnectionStatus)
    assert transport.is_connected
    kept = transport.subscribe(unique_queue(), selector=None, prefetch=5, on_delivery=Inbox())
    dropped = transport.subscribe(unique_queue(), selector=None, prefetch=5, on_delivery=Inbox())
    assert wait_until(lambda: transport.is_open(kept) and transport.is_open(dropped))
    transport.unsubscribe(dropped)
    assert wait_until(lambda: not transport.is_open(dropped))
    assert transport.is_open(kept)
    transport.close()
    assert wait_until(lambda: not transport.is_connected)
    assert not transport.is_open(kept)


def test_every_queue_the_transport_makes_is_durable_shared_and_kept_without_consumers(
    transport_factory: TransportFactory, queue_flags: QueueFlagsOf
) -> None:
    """A queue made by a send and one made by a subscription outlive a broker restart (durable),
    are no one consumer's (not exclusive), and are not dropped with what they hold when their
    last consumer leaves: asked of the broker itself, while the subscription is open."""
    transport = transport_factory()
    sent, subscribed = unique_queue("kept.sent"), unique_queue("kept.subscribed")
    transport.send(sent, wire("t1"))
    transport.subscribe(subscribed, selector=None, prefetch=1, on_delivery=Inbox())
    assert wait_until(lambda: queue_flags(transport, subscribed) is not None, timeout=10)
    flags = {q: queue_flags(transport, q) for q in (sent, subscribed)}
    assert flags == {sent: KEPT, subscribed: KEPT}
