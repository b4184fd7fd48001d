"""Smoke tests for the JMS peer: raw STOMP on one side, the ActiveMQ JMS client on the other.

These pin down how ActiveMQ 5.x translates between STOMP frames and JMS messages, which is
what the BOOST Java services actually see:

* a STOMP SEND without ``content-length`` becomes a ``TextMessage``; with it, a ``BytesMessage``
  (``getText()`` is then unavailable to a Java consumer);
* ``persistent:true`` maps to ``JMSDeliveryMode`` PERSISTENT (2); without it the message is
  NON_PERSISTENT (1);
* ``correlation-id`` maps to ``JMSCorrelationID`` and is not a property;
* any other header (``tenantUUID``, ``boostMessageId``, even ``content-type``) becomes a JMS
  string property;
* a JMS ``TextMessage`` with a ``tenantUUID`` string property reaches a STOMP subscriber as a
  ``tenantUUID`` header and can be selected with ``selector: tenantUUID = '...'``.
"""

from __future__ import annotations

import json
import queue
import uuid
from collections.abc import Callable, Iterator

import pytest
import stomp

from boost_tenancy.transports.stomp import StompSettings
from tests.jms.peer import JmsPeer

pytestmark = [
    pytest.mark.broker,
    pytest.mark.java,
    # Artemis maps STOMP to JMS its own way (every MESSAGE frame carries content-length, for
    # one); test_jms_interop.py proves what the Java services need through the toolkit on both.
    pytest.mark.classic_only("pins ActiveMQ 5.x's STOMP-to-JMS mapping"),
]

RECEIVE_TIMEOUT_S = 10.0
QUIET_PERIOD_S = 1.0

StompConnect = Callable[..., stomp.Connection12]


@pytest.fixture
def queue_name() -> str:
    return f"boost.test.jmspeer.{uuid.uuid4().hex}"


class FrameCollector(stomp.ConnectionListener):  # type: ignore[misc]
    """Collects MESSAGE and ERROR frames delivered on the receiver thread."""

    def __init__(self) -> None:
        self.messages: queue.Queue[stomp.utils.Frame] = queue.Queue()
        self.errors: queue.Queue[stomp.utils.Frame] = queue.Queue()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.messages.put(frame)

    def on_error(self, frame: stomp.utils.Frame) -> None:
        self.errors.put(frame)


@pytest.fixture
def stomp_connect(stomp_settings: StompSettings) -> Iterator[StompConnect]:
    connections: list[stomp.Connection12] = []

    def connect(
        *, auto_content_length: bool = True, listener: FrameCollector | None = None
    ) -> stomp.Connection12:
        connection = stomp.Connection12(
            [(stomp_settings.host, stomp_settings.port)], auto_content_length=auto_content_length
        )
        if listener is not None:
            connection.set_listener("collector", listener)
        connection.connect(stomp_settings.username, stomp_settings.password, wait=True)
        connections.append(connection)
        return connection

    yield connect
    for connection in connections:
        if connection.is_connected():
            connection.disconnect()


def _stomp_send(
    stomp_connect: StompConnect,
    destination: str,
    body: str,
    headers: dict[str, str],
    *,
    auto_content_length: bool,
) -> None:
    connection = stomp_connect(auto_content_length=auto_content_length)
    connection.send(destination, body, headers=headers)
    # DISCONNECT waits for its receipt, so the broker has taken the message once this returns.
    connection.disconnect()


def test_stomp_send_without_content_length_is_a_text_message(
    jms_peer: JmsPeer, openwire_url: str, stomp_connect: StompConnect, queue_name: str
) -> None:
    body = json.dumps({"tenant": "t1", "city": "Zürich", "amount": 1}, ensure_ascii=False)
    _stomp_send(
        stomp_connect,
        f"/queue/{queue_name}",
        body,
        {
            "tenantUUID": "t1",
            "persistent": "true",
            "correlation-id": "c-1",
            "boostMessageId": "m-1",
        },
        auto_content_length=False,
    )

    [message] = jms_peer.receive(openwire_url, queue_name, count=1, timeout_ms=10000)

    assert message["class"] == "TextMessage"
    assert message["text"] == body
    assert message["tenantUUID"] == "t1"
    assert message["correlationId"] == "c-1"
    assert message["deliveryMode"] == 2  # DeliveryMode.PERSISTENT
    # persistent and correlation-id become JMS headers, everything else a string property.
    assert message["properties"] == {"tenantUUID": "t1", "boostMessageId": "m-1"}


def test_stomp_send_with_content_length_is_a_bytes_message(
    jms_peer: JmsPeer, openwire_url: str, stomp_connect: StompConnect, queue_name: str
) -> None:
    body = json.dumps({"tenant": "t1", "amount": 2})
    _stomp_send(
        stomp_connect,
        f"/queue/{queue_name}",
        body,
        {"tenantUUID": "t1", "persistent": "true"},
        auto_content_length=True,
    )

    [message] = jms_peer.receive(openwire_url, queue_name, count=1, timeout_ms=10000)

    # The trap: a content-length header turns the message into a BytesMessage, which a Java
    # consumer casting to TextMessage rejects; the bytes are still the UTF-8 body.
    assert message["class"] == "BytesMessage"
    assert message["text"] == body
    assert message["tenantUUID"] == "t1"


def test_stomp_defaults_are_non_persistent_and_content_type_is_a_property(
    jms_peer: JmsPeer, openwire_url: str, stomp_connect: StompConnect, queue_name: str
) -> None:
    body = json.dumps({"tenant": "t1"})
    _stomp_send(
        stomp_connect,
        f"/queue/{queue_name}",
        body,
        {"tenantUUID": "t1", "content-type": "application/json"},
        auto_content_length=False,
    )

    [message] = jms_peer.receive(openwire_url, queue_name, count=1, timeout_ms=10000)

    assert message["class"] == "TextMessage"
    assert message["deliveryMode"] == 1  # DeliveryMode.NON_PERSISTENT: STOMP's default
    assert message["correlationId"] is None
    assert message["properties"] == {"tenantUUID": "t1", "content-type": "application/json"}


def test_jms_text_message_reaches_selecting_stomp_subscriber(
    jms_peer: JmsPeer, openwire_url: str, stomp_connect: StompConnect, queue_name: str
) -> None:
    body = json.dumps({"tenant": "t2", "city": "Zürich"}, ensure_ascii=False)
    other_id = jms_peer.send(openwire_url, queue_name, "t3", json.dumps({"tenant": "t3"}))
    message_id = jms_peer.send(
        openwire_url, queue_name, "t2", body, properties={"boostMessageId": "m-2"}
    )

    collector = FrameCollector()
    connection = stomp_connect(listener=collector)
    connection.subscribe(
        f"/queue/{queue_name}",
        id="jms-peer-smoke",
        ack="client-individual",
        headers={"selector": "tenantUUID = 't2'"},
    )
    frame = collector.messages.get(timeout=RECEIVE_TIMEOUT_S)
    connection.ack(frame.headers["ack"])

    assert frame.body == body
    assert frame.headers["tenantUUID"] == "t2"
    assert frame.headers["boostMessageId"] == "m-2"
    assert frame.headers["message-id"] == message_id
    assert frame.headers["persistent"] == "true"
    with pytest.raises(queue.Empty):
        collector.messages.get(timeout=QUIET_PERIOD_S)
    assert collector.errors.empty()
    connection.disconnect()

    # The selector left the other tenant's message on the queue.
    [remaining] = jms_peer.receive(openwire_url, queue_name, count=1, timeout_ms=10000)
    assert remaining["jmsMessageId"] == other_id
    assert remaining["tenantUUID"] == "t3"
