"""Every queue the toolkit makes by sending or subscribing is durable on the real broker, so
that a persistent message outlives a broker restart: asked of the broker itself (RabbitMQ's
rabbitmqctl, Artemis's listQueues), over each protocol.

RabbitMQ's AMQP 1.0 plugin makes a queue durable only when the link's terminus says so; before
the transport said it, every queue it made there was transient (64 of 64 after a run of the
suite)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.artemis_management import Runs
from boost_tenancy.transports.artemis_queues import list_queues_operation
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.registry import open_transport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import Inbox, unique_queue, wait_until


def _rabbitmq_queues() -> dict[str, dict[str, str]]:
    """Every queue of the local RabbitMQ with its durable, auto_delete and exclusive flags."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not on PATH: the queues of this RabbitMQ cannot be read")
    listed = subprocess.run(
        [
            "rabbitmqctl",
            "-q",
            "list_queues",
            "name",
            "durable",
            "auto_delete",
            "exclusive",
            "--formatter",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {row["name"]: row for row in json.loads(listed.stdout)}


def _artemis_queue(transport: Transport, name: str) -> dict[str, object]:
    def ask(session: Runs) -> dict[str, object]:
        answer = json.loads(str(session.run([list_queues_operation("EQUALS", name)])[0]))
        rows: list[dict[str, object]] = answer["data"]
        return rows[0] if rows else {}

    return transport.management_session(ask)  # type: ignore[attr-defined, no-any-return]


def _make_queues(transport: Transport) -> tuple[str, str]:
    """A queue made by a send, and one made by a subscription (which keeps it open)."""
    sent, subscribed = unique_queue("durable.sent"), unique_queue("durable.subscribed")
    transport.send(sent, WireMessage(body="kept", properties={"tenantUUID": "t1"}))
    inbox = Inbox()
    transport.subscribe(subscribed, selector=None, prefetch=1, on_delivery=inbox)
    return sent, subscribed


@pytest.fixture
def amqp(amqp_url: str) -> Iterator[AmqpTransport]:
    transport = open_transport(amqp_url)
    assert isinstance(transport, AmqpTransport)
    transport.connect()
    yield transport
    transport.close()


@pytest.mark.amqp_broker
def test_queues_made_over_amqp_are_durable(amqp: AmqpTransport) -> None:
    sent, subscribed = _make_queues(amqp)
    if amqp.flavour is AmqpFlavour.RABBITMQ:
        flags = (True, False, False)

        def listed() -> bool:
            queues = _rabbitmq_queues()
            return all(
                q in queues
                and (queues[q]["durable"], queues[q]["auto_delete"], queues[q]["exclusive"])
                == flags
                for q in (sent, subscribed)
            )

        assert wait_until(listed, timeout=10), {
            q: _rabbitmq_queues().get(q) for q in (sent, subscribed)
        }
    elif amqp.flavour is AmqpFlavour.ARTEMIS:
        for queue in (sent, subscribed):
            row = _artemis_queue(amqp, queue)
            assert (row.get("durable"), row.get("exclusive")) == ("true", "false"), row
    else:
        pytest.skip(f"no way to read the queues of {amqp.server}")


@pytest.mark.broker
def test_queues_made_over_stomp_are_durable_on_artemis(stomp_settings: StompSettings) -> None:
    transport = StompTransport(stomp_settings)
    transport.connect()
    try:
        if not transport.capabilities.send_time_routes:
            pytest.skip("Classic's queues are durable by nature; it has no management address")
        for queue in _make_queues(transport):
            row = _artemis_queue(transport, queue)
            assert (row.get("durable"), row.get("exclusive")) == ("true", "false"), row
    finally:
        transport.close()
