"""A message RabbitMQ 3.x refuses ends the connection it came on, and one tenant's full queue
must not touch any other tenant.

Measured on RabbitMQ 3.10.8 with a queue at max-length and overflow reject-publish: the broker's
AMQP 1.0 session has no clause for the queue's negative confirm (rabbitmq-server#2839), crashes,
and the connection ends 3 s later. When the toolkit sent on the connection of its
subscriptions, a tenant whose handler published to its full queue sent every delivery of every
tenant back, again and again: the other tenant's 200 messages were handled 57 times over 40 s,
16 distinct, and the refused tenant's messages never ended. The transport now sends on a
connection of its own there (transports/amqp/publisher.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    TenantProcessor,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.registry import open_transport
from tests.conftest import wait_until
from tests.raw_refusal import CONNECTION_ENDED, refusal_of_a_full_queue
from tests.refusing_tenant import (
    assert_only_the_refused_tenant_paid,
    drain,
    refusal_keeps_the_deliveries,
    runner_of,
    two_tenants,
)

pytestmark = pytest.mark.amqp_broker

POLICY = "boost-test-full"
PATTERN = r"boost-full\."
"""Queues whose name holds this have a length limit of 1 and refuse what goes beyond it."""


@pytest.fixture
def rabbitmq_url(amqp_url: str) -> Iterator[str]:
    """amqp_url when it is a RabbitMQ whose policies rabbitmqctl sets, with the policy above."""
    probe = open_transport(amqp_url)
    probe.connect()
    try:
        assert isinstance(probe, AmqpTransport)
        if not probe.flavour.refused_send_ends_connection:
            pytest.skip(f"{probe.server} settles a refused message; its connection stays")
    finally:
        probe.close()
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not on PATH: this RabbitMQ's policies cannot be set")
    definition = '{"max-length":1,"overflow":"reject-publish"}'
    ctl = ["rabbitmqctl", "-q"]
    subprocess.run(
        [*ctl, "set_policy", POLICY, PATTERN, definition, "--apply-to", "queues"],
        check=True,
        timeout=60,
        capture_output=True,
    )
    try:
        yield amqp_url
    finally:
        subprocess.run([*ctl, "clear_policy", POLICY], check=False, timeout=60)


def full_name() -> str:
    return f"boost-full.{uuid.uuid4().hex[:10]}"


def test_the_broker_ends_the_connection_instead_of_rejecting_the_message(
    rabbitmq_url: str,
) -> None:
    """The fact itself, with a plain proton client: should a RabbitMQ settle the refused message
    rejected instead, the flavour's refused_send_ends_connection is wrong for it."""
    address = f"/queue/{full_name()}"
    assert refusal_of_a_full_queue(rabbitmq_url, address) == CONNECTION_ENDED


def test_a_refused_send_fails_and_the_transport_keeps_its_deliveries(rabbitmq_url: str) -> None:
    transport = open_transport(rabbitmq_url)
    transport.connect()
    try:
        full = full_name()
        transport.send(full, WireMessage(body="first", properties={}))
        error = refusal_keeps_the_deliveries(
            transport, lambda: transport.send(full, WireMessage(body="second", properties={}))
        )
        assert "ends the connection when it refuses" in str(error)
    finally:
        transport.close()


def test_a_tenant_publishing_to_its_full_queue_touches_no_other_tenant(
    rabbitmq_url: str, tmp_path: Path
) -> None:
    producer = open_transport(rabbitmq_url)
    producer.connect()
    runner_transport = open_transport(rabbitmq_url)
    assert isinstance(runner_transport, AmqpTransport)
    engine = runner_transport._engine  # reached into: no API counts its connections
    try:
        result = two_tenants(
            producer,
            runner_transport,
            tmp_path,
            full_prefix="boost-full.",
            fill=lambda name: producer.send(name, WireMessage(body="x", properties={})),
            connections_lost=lambda: engine.generation - 1,
        )
    finally:
        producer.close()
    assert_only_the_refused_tenant_paid(result)


def ready_in(name: str) -> int:
    """Messages ready (not in flight) in a queue of the local RabbitMQ, by rabbitmqctl."""
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "name", "messages_ready", "--formatter", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return sum(
        int(row["messages_ready"]) for row in json.loads(listed.stdout) if row["name"] == name
    )


class _FailsOnceHeld(TenantProcessor):
    """Message 'a' fails once the test has filled its queue; every other message is handled."""

    def __init__(self, source: str) -> None:
        self.queues = (source,)
        self.started = threading.Event()
        self.go = threading.Event()
        self.handled: list[str] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        key = str(message.data["key"])
        self.handled.append(key)
        if key == "a":
            self.started.set()
            self.go.wait(30)
            raise RuntimeError("fails while its queue is full")


def test_a_held_retry_whose_copy_is_refused_is_dead_lettered(
    rabbitmq_url: str, tmp_path: Path
) -> None:
    """RabbitMQ has no delayed delivery: a retry holds the original for its backoff, then sends
    the copy to the message's queue. That queue at its limit refuses the copy; the original is
    dead-lettered (dead_letter_refused), not held for as long as its connection lives."""
    source = full_name()
    tenant_queue = DEFAULT_ROUTING.physical(source, "org-a")
    producer = open_transport(rabbitmq_url)
    producer.connect()
    processor = _FailsOnceHeld(source)
    runner_transport = open_transport(rabbitmq_url)
    store = SQLiteErrorStore(str(tmp_path / "errors.db"))
    runner = runner_of(
        processor, runner_transport, ["org-a"], store, workers=1, prefetch=1, delay_ms=300
    )
    try:
        tenant = {"tenantUUID": "org-a", "content-type": "application/json"}
        producer.send(source, WireMessage(body='{"key": "a"}', properties=tenant))
        runner.start()
        assert processor.started.wait(30), "message a was never handled"
        # a is in flight; b, moved to the tenant's queue, fills it (its limit counts ready ones).
        producer.send(source, WireMessage(body='{"key": "b"}', properties=tenant))
        assert wait_until(lambda: ready_in(tenant_queue) == 1, timeout=30, interval=0.5)
        processor.go.set()
        dead = drain(producer, dead_letter_queue(tenant_queue), 1)
        assert wait_until(lambda: "b" in processor.handled, timeout=30)
    finally:
        processor.go.set()
        runner.stop()
        runner_transport.close()
        producer.close()
    bodies = [d.body.decode() if isinstance(d.body, bytes) else d.body for d in dead]
    assert [json.loads(body)["key"] for body in bodies] == ["a"], bodies
    assert "the retry's copy could not be sent" in dead[0].properties.get("boostError", "")
    assert processor.handled == ["a", "b"], "a was handled again: its retry was not settled"
