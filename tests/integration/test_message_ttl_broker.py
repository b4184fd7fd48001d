"""Message time-to-live on the real brokers: a message a TenantProducer sent with a 1 s TTL and
nobody consumed is not delivered once it expired (Classic: it is on ActiveMQ.DLQ instead, with
its original expiry recorded); a retry copy the dispatcher sends keeps the original absolute
expiry; a dead letter carries none and outlives the original's expiry. Over AMQP 1.0, the local
RabbitMQ 3.10 honours the TTL too (through header.ttl)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    MessageTtl,
    PermanentError,
    RetryPolicy,
    Routing,
    TenantId,
    TenantProcessor,
    TenantProducer,
    TransientError,
)
from boost_tenancy.messages import ATTEMPT_PROPERTY, MESSAGE_ID_PROPERTY
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import ErrorStore, SQLiteErrorStore
from boost_tenancy.routing import Topology
from boost_tenancy.selectors import string_literal
from boost_tenancy.testing.expiry import CLASSIC_DLQ
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.registry import open_transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import Inbox, unique_queue, wait_until

A, B = TenantId("ttl-a"), TenantId("ttl-b")
SHARED = Routing(Topology.SHARED)
"""The queue named is the broker queue: read back directly."""
ONE_SECOND = MessageTtl(default_s=1)
PAST_IT_S = 2.0
"""How long a test waits for a 1 s TTL to have passed on the broker."""
SETTLE_S = 1.0
"""How long a queue is watched for a delivery that must not come."""


@dataclass(frozen=True, slots=True)
class MessageIdIs:
    """A selector for one message on the broker's shared ActiveMQ.DLQ, which other tests and
    runs also fill."""

    message_id: str

    def render(self) -> str:
        return f"{MESSAGE_ID_PROPERTY} = {string_literal(self.message_id)}"

    def matches(self, properties: Mapping[str, str]) -> bool:
        return properties.get(MESSAGE_ID_PROPERTY) == self.message_id


@pytest.fixture
def transport(stomp_settings: StompSettings) -> Iterator[StompTransport]:
    connected = StompTransport(stomp_settings)
    connected.connect()
    yield connected
    connected.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ErrorStore]:
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()


def read(
    transport: Transport, queue: str, *, at_least: int, selector: MessageIdIs | None = None
) -> Inbox:
    """Everything a subscription to queue gets: at least at_least deliveries, then whatever
    else comes within SETTLE_S; all acknowledged."""
    inbox = Inbox()
    subscription = transport.subscribe(
        queue,
        selector=selector,
        prefetch=20,
        on_delivery=inbox,
    )
    try:
        assert wait_until(lambda: len(inbox) >= at_least, timeout=15), len(inbox)
        time.sleep(SETTLE_S)
        for delivery in list(inbox.items):
            transport.ack(delivery)
    finally:
        transport.unsubscribe(subscription)
    return inbox


class Failing(TenantProcessor):
    def __init__(self, queue: str, error: Exception) -> None:
        self.queues = (queue,)
        self.error = error

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise self.error


def dispatcher(transport: Transport, store: ErrorStore, processor: TenantProcessor) -> Dispatcher:
    soon = RetryPolicy(max_attempts=3, base_delay_ms=300, max_delay_ms=300, jitter=0.0)
    return Dispatcher(
        processor, transport, store, settings=DispatchSettings(retry=soon), routing=SHARED
    )


@pytest.mark.broker
def test_a_message_not_consumed_before_its_ttl_is_never_delivered(
    transport: StompTransport,
) -> None:
    queue = unique_queue("ttl")
    producer = TenantProducer(transport, routing=SHARED, ttl=ONE_SECOND.for_tenant(B, 0))
    expiring = producer.send(queue, A, {"n": 1})
    producer.send(queue, B, {"n": 2})
    assert expiring.expires_at_ms is not None
    time.sleep(PAST_IT_S)
    inbox = read(transport, queue, at_least=1)
    assert [d.properties["tenantUUID"] for d in inbox.items] == [B.value]
    assert inbox.items[0].expires_at_ms is None


@pytest.mark.broker
@pytest.mark.classic_only("Classic moves an expired persistent message to ActiveMQ.DLQ")
def test_classic_moves_the_expired_message_to_activemq_dlq_without_an_expiry(
    transport: StompTransport,
) -> None:
    queue = unique_queue("ttl")
    sent = TenantProducer(transport, routing=SHARED, ttl=ONE_SECOND).send(queue, A, {"n": 1})
    time.sleep(PAST_IT_S)
    assert len(read(transport, queue, at_least=0)) == 0  # a consumer makes the broker look
    [dead] = read(transport, CLASSIC_DLQ, at_least=1, selector=MessageIdIs(sent.message_id)).items
    assert dead.properties["originalExpiration"] == str(sent.expires_at_ms)
    assert "Message Expired" in dead.properties["dlqDeliveryFailureCause"]
    assert dead.expires_at_ms is None


@pytest.mark.broker
def test_a_retry_copy_keeps_the_original_absolute_expiry(
    transport: StompTransport, store: ErrorStore
) -> None:
    queue = unique_queue("ttl")
    sent = TenantProducer(transport, routing=SHARED, ttl=MessageTtl(default_s=600)).send(
        queue, A, {"n": 1}
    )
    handler = dispatcher(transport, store, Failing(queue, TransientError("again")))
    inbox = Inbox()
    subscription = transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    try:
        assert wait_until(lambda: len(inbox) == 1, timeout=15)
        assert handler.dispatch(A, inbox.items[0]) == "retried"
        assert wait_until(lambda: len(inbox) == 2, timeout=15), "the delayed retry copy"
        first, copy = inbox.items
        transport.ack(copy)
    finally:
        transport.unsubscribe(subscription)
    assert copy.properties[ATTEMPT_PROPERTY] == "2"
    assert first.expires_at_ms == sent.expires_at_ms
    assert copy.expires_at_ms == sent.expires_at_ms


@pytest.mark.broker
def test_a_dead_letter_carries_no_expiry_and_outlives_the_original(
    transport: StompTransport, store: ErrorStore
) -> None:
    queue = unique_queue("ttl")
    sent = TenantProducer(transport, routing=SHARED, ttl=ONE_SECOND).send(queue, A, {"n": 1})
    handler = dispatcher(transport, store, Failing(queue, PermanentError("never")))
    inbox = Inbox()
    subscription = transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
    try:
        assert wait_until(lambda: len(inbox) == 1, timeout=15)
        assert inbox.items[0].expires_at_ms == sent.expires_at_ms
        assert handler.dispatch(A, inbox.items[0]) == "dead_lettered"
    finally:
        transport.unsubscribe(subscription)
    time.sleep(PAST_IT_S)  # past the original's expiry: a copy that kept it would be gone
    [dead] = read(transport, dead_letter_queue(queue), at_least=1).items
    assert dead.properties[MESSAGE_ID_PROPERTY] == sent.message_id
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert dead.expires_at_ms is None


@pytest.mark.amqp_broker
def test_rabbitmq_over_amqp_honours_a_tenants_ttl(amqp_url: str) -> None:
    amqp = open_transport(amqp_url)
    amqp.connect()
    try:
        queue = unique_queue("ttl")
        producer = TenantProducer(amqp, routing=SHARED, ttl=MessageTtl().for_tenant(A, 1))
        producer.send(queue, A, {"n": 1})
        kept = producer.send(queue, B, {"n": 2})
        time.sleep(PAST_IT_S)
        inbox = read(amqp, queue, at_least=1)
    finally:
        amqp.close()
    assert [d.properties["tenantUUID"] for d in inbox.items] == [B.value]
    assert kept.expires_at_ms is None
