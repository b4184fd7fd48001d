"""The tenant router on the in-memory broker: which runners start one, what it refuses, what it
quarantines even with a default tenant, and a message the wire cannot carry moved on its own.
(What it does on every transport is in tests/contract/test_routing_contract.py.)"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    Routing,
    TenantId,
    TenantProcessor,
)
from boost_tenancy.errors import (
    ConfigError,
    InvalidTenantError,
    MessageEncodeError,
    TransportError,
)
from boost_tenancy.header_values import check_id
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.routing import MAX_LOGICAL_QUEUE, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, Outgoing, PartlyForwardedError
from tests.conftest import Inbox, recorded, wait_until


class Nothing(TenantProcessor):
    queues = ("cmd.a", "cmd.b")

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Never called here."""


def connected(broker: InMemoryBroker) -> InMemoryTransport:
    transport = InMemoryTransport(broker)
    transport.connect()
    return transport


def collect(broker: InMemoryBroker, queue: str) -> Inbox:
    inbox = Inbox()
    connected(broker).subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
    return inbox


@pytest.mark.parametrize(
    ("routing", "routed"),
    [
        (Routing(), ("cmd.a", "cmd.b")),
        (Routing(Topology.SHARED), None),
        (Routing(Topology.PER_TENANT), None),
        (Routing(Topology.SHARED, overrides={"cmd.b": Topology.ROUTED}), ("cmd.b",)),
    ],
)
def test_a_runner_routes_exactly_its_routed_queues(
    broker: InMemoryBroker,
    store: ErrorStore,
    routing: Routing,
    routed: tuple[str, ...] | None,
) -> None:
    runner = ProcessorRunner(
        Nothing(), connected(broker), ["org-a"], error_store=store, routing=routing
    )
    assert (None if runner.router is None else runner.router.queues) == routed
    off = ProcessorRunner(
        Nothing(), connected(broker), ["org-a"], error_store=store, route_shared=False
    )
    assert off.router is None


def test_the_router_refuses_a_queue_that_is_not_routed(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    with pytest.raises(ConfigError, match=r"'cmd\.a' is shared, not routed"):
        TenantRouter(
            connected(broker), ["cmd.a"], error_store=store, routing=Routing(Topology.SHARED)
        )
    with pytest.raises(InvalidTenantError, match="invalid tenant id"):
        TenantRouter(connected(broker), ["cmd.a"], error_store=store, default_tenant="a b")


def test_only_a_missing_tenant_gets_the_default_tenant(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """An empty or crafted tenantUUID is quarantined even with a default tenant: never guessed."""
    told: list[tuple[TenantId, int]] = []
    router = TenantRouter(
        connected(broker),
        ["cmd.a"],
        error_store=store,
        default_tenant="default",
        on_routed=lambda tenant, count: told.append((tenant, count)),
    )
    stored = collect(broker, "tenant.default.cmd.a")
    quarantine = collect(broker, quarantine_queue("cmd.a"))
    sender = connected(broker)
    for properties in ({}, {"tenantUUID": ""}, {"tenantUUID": "x' OR '1'='1"}, {"x": "y"}):
        sender.send("cmd.a", WireMessage(body="{}", properties=properties))
    router.start()
    assert wait_until(lambda: len(stored) == 2 and len(quarantine) == 2)
    router.stop()
    assert {d.properties["tenantUUID"] for d in stored.items} == {"default"}
    assert [d.properties.get("x") for d in stored.items] == [None, "y"]
    assert (router.defaulted, router.quarantined) == (2, 2)
    assert router.routed == {TenantId("default"): 2}
    assert sum(count for _, count in told) == 2
    assert {tenant for tenant, _ in told} == {TenantId("default")}
    records = recorded(store, 2, tenant=None, outcome=FailureOutcome.QUARANTINE)
    assert sorted(str(r.raw_tenant) for r in records) == ["", "x' OR '1'='1"]


def test_a_queue_too_long_for_some_tenants_derived_queues_is_refused_up_front(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """tenant.<64 characters>.<queue> and its quarantine must fit for every tenant: a queue
    that fits for short tenant ids only is refused before anything is routed."""
    fits = "cmd." + "q" * (MAX_LOGICAL_QUEUE - 4)
    TenantRouter(connected(broker), [fits], error_store=store)
    with pytest.raises(ConfigError, match=f"at most {MAX_LOGICAL_QUEUE}"):
        TenantRouter(connected(broker), [fits + "q"], error_store=store)


def route_five_with_one_poison(
    broker: InMemoryBroker, store: ErrorStore, transport: InMemoryTransport
) -> tuple[TenantRouter, Inbox, Inbox]:
    """Routes five messages of org-a from cmd.a through transport, the third marked poison;
    returns once four are stored and one dead-lettered, the router stopped."""
    router = TenantRouter(transport, ["cmd.a"], error_store=store)
    stored = collect(broker, "tenant.org-a.cmd.a")
    dead = collect(broker, dead_letter_queue("cmd.a"))
    sender, tenant = connected(broker), {"tenantUUID": "org-a"}
    sender.send_batch(
        [
            ("cmd.a", WireMessage(body=json.dumps({"n": n, "poison": n == 2}), properties=tenant))
            for n in range(5)
        ]
    )
    router.start()
    assert wait_until(lambda: len(stored) == 4 and len(dead) == 1)
    router.stop()
    return router, stored, dead


@pytest.mark.parametrize(
    "refusal",
    [MessageEncodeError("the wire cannot carry it"), TransportError("ERROR frame: refused")],
)
def test_a_message_the_wire_or_broker_refuses_is_dead_lettered_and_the_rest_routed(
    broker: InMemoryBroker,
    store: ErrorStore,
    monkeypatch: pytest.MonkeyPatch,
    refusal: Exception,
) -> None:
    """The connection stays up: the refused message is settled, not held for good."""
    transport = connected(broker)
    real_many, real_one = transport.send_then_ack_many, transport.send_then_ack

    def refuse_poison(items: Sequence[Outgoing]) -> None:
        # Only toward the tenant's queue: the dead-letter copy must go through.
        if any(
            q.startswith("tenant.") and json.loads(str(m.body)).get("poison") for q, m, _ in items
        ):
            raise refusal

    def many(moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]) -> Sequence[Delivery]:
        for _, items in moves:
            refuse_poison(items)
        return real_many(moves)

    def one(delivery: Delivery, items: Sequence[Outgoing]) -> None:
        refuse_poison(items)
        real_one(delivery, items)

    monkeypatch.setattr(transport, "send_then_ack_many", many)
    monkeypatch.setattr(transport, "send_then_ack", one)
    router, _stored, dead = route_five_with_one_poison(broker, store, transport)
    assert router.routed == {TenantId("org-a"): 4}
    assert dead.items[0].properties["boostDeadLetterReason"] == "unsettleable"
    (record,) = recorded(store, 1, tenant=TenantId("org-a"), outcome=FailureOutcome.DEAD_LETTER)
    assert record.tenant == TenantId("org-a")


def test_a_forward_the_broker_takes_in_part_moves_the_rest_without_storing_any_twice(
    broker: InMemoryBroker, store: ErrorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where forwarding is not atomic (AMQP on RabbitMQ), a refused copy leaves the others
    stored and their originals acknowledged (PartlyForwardedError). Moving the whole batch again
    one by one stored each of them twice."""
    transport = connected(broker)
    real_many, real_one = transport.send_then_ack_many, transport.send_then_ack

    def poison(items: Sequence[Outgoing]) -> bool:
        return any(
            q.startswith("tenant.") and json.loads(str(m.body)).get("poison") for q, m, _ in items
        )

    def many(moves: Sequence[tuple[Delivery, Sequence[Outgoing]]]) -> Sequence[Delivery]:
        taken = [(d, items) for d, items in moves if not poison(items)]
        forwarded = real_many(taken)
        if len(taken) < len(moves):
            raise PartlyForwardedError("the broker rejected the message: queue full", forwarded)
        return forwarded

    def one(delivery: Delivery, items: Sequence[Outgoing]) -> None:
        if poison(items):
            raise TransportError("the broker rejected the message: queue full")
        real_one(delivery, items)

    monkeypatch.setattr(transport, "send_then_ack_many", many)
    monkeypatch.setattr(transport, "send_then_ack", one)
    router, stored, _dead = route_five_with_one_poison(broker, store, transport)
    assert sorted(json.loads(str(m.body))["n"] for m in stored.items) == [0, 1, 3, 4]
    assert router.routed == {TenantId("org-a"): 4}


def test_the_copy_carries_the_toolkit_headers_as_the_dispatcher_adopts_them(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """A producer's valid id is kept; a missing or invalid one becomes a valid id derived on the
    shared queue (the invalid value kept as foreign_boostMessageId), forged dead-letter headers
    are renamed; the tenant, the body and the application properties are unchanged."""
    router = TenantRouter(connected(broker), ["cmd.a"], error_store=store)
    stored = collect(broker, "tenant.org-a.cmd.a")
    sender = connected(broker)
    for properties in (
        {"boostMessageId": "m-1"},
        {"boostMessageId": "not an id", "boostOriginalQueue": "parked.org-b.cmd.a"},
        {"app": "kept"},
    ):
        message = WireMessage(body='{"n": 1}', properties={"tenantUUID": "org-a", **properties})
        sender.send("cmd.a", message)
    router.start()
    assert wait_until(lambda: len(stored) == 3)
    router.stop()
    kept, forged, plain = (dict(d.properties) for d in stored.items)
    assert kept["boostMessageId"] == "m-1"
    assert forged["foreign_boostMessageId"] == "not an id"
    assert forged["foreign_boostOriginalQueue"] == "parked.org-b.cmd.a"
    assert "boostOriginalQueue" not in forged
    assert check_id("id", forged["boostMessageId"]) and check_id("id", plain["boostMessageId"])
    assert plain["app"] == "kept"
    assert {d.properties["tenantUUID"] for d in stored.items} == {"org-a"}
    assert {d.body for d in stored.items} == {'{"n": 1}'}


def test_a_quarantined_message_says_in_words_why_it_names_no_tenant(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """No property at all, an empty one and a crafted one each get a reason a reader takes in
    at once: never 'tenantUUID property None'."""
    router = TenantRouter(connected(broker), ["cmd.a"], error_store=store)
    quarantine = collect(broker, quarantine_queue("cmd.a"))
    sender = connected(broker)
    for properties in ({}, {"tenantUUID": ""}, {"tenantUUID": "x' OR '1'='1"}):
        sender.send("cmd.a", WireMessage(body="{}", properties=properties))
    router.start()
    assert wait_until(lambda: len(quarantine) == 3)
    router.stop()
    reasons = sorted(r.error_text for r in recorded(store, 3, tenant=None))
    assert reasons == [
        "an empty tenantUUID property on shared queue 'cmd.a': the message names no tenant",
        "no tenantUUID property on shared queue 'cmd.a': the message names no tenant",
        "tenantUUID property \"x' OR '1'='1\" on shared queue 'cmd.a' is not a valid tenant",
    ]
