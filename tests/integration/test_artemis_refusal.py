"""What Artemis 2.44 does with a message for an address that is full under address-full-policy
FAIL, on a real Artemis of the test's own (every other Artemis of the suite pages instead):

- over STOMP a refused SEND is answered by ERROR and the connection is closed; a SEND of a
  transaction asked for no receipt, so its ERROR carries no receipt-id, and the COMMIT's RECEIPT
  sometimes followed it: the toolkit's batch must never read as confirmed then (it returned with
  nothing stored 4 to 11 times in 100 before the transport failed every awaited receipt on such
  an ERROR);
- over AMQP the broker gives a sender to the full address no credit (ARTEMIS-5645, in 2.43:
  credit drained while the address refuses): the message never leaves the client and nothing
  settles it; the transport, which writes a message only once its sender has credit, fails
  the send as refused, never written, and keeps its connection
  (it used to wait out the whole confirm timeout and then give the connection up, with every
  delivery on it).
"""

from __future__ import annotations

import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy.application.brokers import open_transport
from boost_tenancy.errors import NotConfirmedError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from devtools.local_artemis import HOST, PASSWORD, USER, ArtemisSettings, LocalArtemis
from tests.broker_target import raw_connect_frame
from tests.conftest import unavailable, wait_until
from tests.refusing_tenant import (
    assert_only_the_refused_tenant_paid,
    refusal_keeps_the_deliveries,
    two_tenants,
)

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("runs an Artemis of its own with an address that refuses"),
    pytest.mark.own_broker("artemis"),
]

OFFSET = 1900
"""Ports 63513 (STOMP), 63516 (CORE), 7572 (AMQP): clear of every other broker of the suite."""
FULL = "boost-full"
FULL_SETTING = "".join(
    f'<address-setting match="{match}"><max-size-bytes>20000</max-size-bytes>'
    "<address-full-policy>FAIL</address-full-policy></address-setting>"
    for match in (f"{FULL}.#", f"tenant.*.{FULL}.#")  # a tenant's own queue too
)
BODY = "x" * 4000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalArtemis]:
    if shutil.which("mvn") is None or shutil.which("java") is None:
        unavailable("the project's Artemis plugins are built with Maven and run on Java 17")
    settings = ArtemisSettings(
        home=tmp_path_factory.mktemp("artemis-refusal") / "broker",
        port_offset=OFFSET,
        address_settings_xml=FULL_SETTING,
    )
    started = LocalArtemis(settings)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def stomp_transport(broker: LocalArtemis) -> StompTransport:
    return StompTransport(
        StompSettings(
            host=HOST,
            port=broker.settings.stomp_port,
            username=USER,
            password=PASSWORD,
            reconnect_initial_s=0.05,
        )
    )


def filled(broker: LocalArtemis) -> str:
    """A fresh address of the FAIL setting, filled over a STOMP transport of its own."""
    transport = stomp_transport(broker)
    transport.connect()
    try:
        return full_address(transport)
    finally:
        transport.close()


def full_address(transport: StompTransport) -> str:
    """A fresh address of the FAIL setting, sent to until it refuses."""
    address = f"{FULL}.{uuid.uuid4().hex[:8]}"
    for _ in range(20):
        try:
            transport.send(address, WireMessage(body=BODY, properties={}))
        except TransportError:
            return address
    raise AssertionError(f"{address} took 80,000 bytes under max-size-bytes 20,000")


def frames_after(sock: socket.socket, wait_s: float = 5.0) -> tuple[list[bytes], bool]:
    """The frames the broker sends until it closes the socket (True) or wait_s passes."""
    sock.settimeout(wait_s)
    received = b""
    closed = False
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                closed = True
                break
            received += chunk
    except TimeoutError:
        pass
    return [f.strip(b"\n") for f in received.split(b"\x00") if f.strip(b"\n")], closed


def test_a_refused_send_of_a_transaction_is_answered_by_an_error_without_receipt_id(
    broker: LocalArtemis,
) -> None:
    address = filled(broker)
    settings = StompSettings(
        host=HOST, port=broker.settings.stomp_port, username=USER, password=PASSWORD
    )
    with socket.create_connection((HOST, broker.settings.stomp_port), timeout=5) as sock:
        sock.sendall(raw_connect_frame(settings))
        assert sock.recv(65536).startswith(b"CONNECTED")
        sock.sendall(
            b"BEGIN\ntransaction:t1\n\n\x00"
            + f"SEND\ndestination:{address}\ntransaction:t1\n\n{BODY}\x00".encode()
            + b"COMMIT\ntransaction:t1\nreceipt:c1\n\n\x00"
        )
        frames, closed = frames_after(sock)
    assert frames, "the broker answered nothing"
    first = frames[0].split(b"\n")
    assert first[0] == b"ERROR", frames
    assert not any(line.startswith(b"receipt-id:") for line in first), frames
    assert closed, "the broker kept the connection after its ERROR"


def test_a_frame_after_the_refused_one_is_answered_connection_not_valid(
    broker: LocalArtemis,
) -> None:
    """Before it closes the connection, Artemis answers a frame that came after the refused one
    with ERROR 'AMQ339010 Connection is not valid.' and that frame's receipt-id: not a refusal of
    it (BrokerFlavour.refused_with_its_connection), so the transport sends it again rather
    than dead-letter its message. 10 of 10 raw tries so before this test."""
    address = filled(broker)
    settings = StompSettings(
        host=HOST, port=broker.settings.stomp_port, username=USER, password=PASSWORD
    )
    with socket.create_connection((HOST, broker.settings.stomp_port), timeout=5) as sock:
        sock.sendall(raw_connect_frame(settings))
        assert sock.recv(65536).startswith(b"CONNECTED")
        sock.sendall(
            f"SEND\ndestination:{address}\nreceipt:r1\n\n{BODY}\x00".encode()
            + b"SEND\ndestination:boost-ok.after\nreceipt:r2\n\nx\x00"
        )
        frames, closed = frames_after(sock)
    answers = [
        {
            key.decode(): value.decode()
            for key, _, value in (
                line.partition(b":") for line in frame.split(b"\n\n")[0].split(b"\n")[1:]
            )
            if key in (b"message", b"receipt-id")
        }
        for frame in frames
    ]
    assert [frame.split(b"\n")[0] for frame in frames] == [b"ERROR", b"ERROR"], frames
    assert answers[0]["receipt-id"] == "r1"
    assert not BrokerFlavour.ARTEMIS.refused_with_its_connection(answers[0]["message"])
    assert answers[1]["receipt-id"] == "r2"
    assert BrokerFlavour.ARTEMIS.refused_with_its_connection(answers[1]["message"])
    assert closed, "the broker kept the connection after its ERROR"


def test_a_transaction_with_a_refused_message_never_reads_as_confirmed(
    broker: LocalArtemis,
) -> None:
    """100 tries, each once the transport is connected again (the refusal closed it): the
    commit's RECEIPT came after the refusal in 3 to 11 of 100 such tries before."""
    transport = stomp_transport(broker)
    transport.connect()
    try:
        address = full_address(transport)
        confirmed = 0
        for n in range(100):
            assert wait_until(lambda: transport.is_connected, timeout=10)
            try:
                transport.send_batch([(address, WireMessage(body=f"m{n}", properties={}))])
            except TransportError:
                continue
            confirmed += 1
        assert confirmed == 0, f"{confirmed} of 100 commits refused by a full address confirmed"
    finally:
        transport.close()


def fill(transport: StompTransport, address: str) -> None:
    """Send to address until it refuses."""
    for _ in range(20):
        try:
            transport.send(address, WireMessage(body=BODY, properties={}))
        except TransportError:
            return
    raise AssertionError(f"{address} took 80,000 bytes under max-size-bytes 20,000")


def subscription_connections_lost(transport: StompTransport) -> int:
    """How often the connections carrying transport's subscriptions were lost (reached into:
    no API counts them)."""
    lines = transport._subscriptions._lines
    return sum(
        line.connection._generation - 1
        for line in lines
        if line.opened and line.index != 0 and line.connection._generation
    )


def test_a_refused_send_fails_and_the_transport_keeps_its_deliveries(
    broker: LocalArtemis,
) -> None:
    transport = stomp_transport(broker)
    transport.connect()
    try:
        address = full_address(transport)
        error = refusal_keeps_the_deliveries(
            transport, lambda: transport.send(address, WireMessage(body=BODY, properties={}))
        )
        assert "Error sending message" in str(error)
    finally:
        transport.close()


def test_a_tenant_publishing_to_its_full_address_touches_no_other_tenant(
    broker: LocalArtemis, tmp_path: Path
) -> None:
    producer = stomp_transport(broker)
    producer.connect()
    runner_transport = stomp_transport(broker)
    try:
        result = two_tenants(
            producer,
            runner_transport,
            tmp_path,
            full_prefix=f"{FULL}.",
            fill=lambda name: fill(producer, name),
            connections_lost=lambda: subscription_connections_lost(runner_transport),
        )
    finally:
        producer.close()
    assert_only_the_refused_tenant_paid(result)


def amqp_transport(broker: LocalArtemis) -> AmqpTransport:
    transport = open_transport(
        f"amqp://{USER}:{PASSWORD}@{HOST}:{broker.settings.amqp_port}",
        {"BOOST_BROKER_CONFIRM_TIMEOUT_S": "3", "BOOST_BROKER_RECONNECT_WAIT_S": "1"},
    )
    assert isinstance(transport, AmqpTransport)
    return transport


def test_over_amqp_a_send_to_the_full_address_fails_unsent_and_the_connection_stays(
    broker: LocalArtemis,
) -> None:
    """The broker gives the sender no credit: the message is never written, and its send fails
    as refused once half the confirm timeout has passed, rather than ending
    unconfirmed after the whole wait, which gave the connection up with every delivery on it."""
    address = filled(broker)
    transport = amqp_transport(broker)
    transport.connect()
    try:
        started = time.monotonic()
        error = refusal_keeps_the_deliveries(
            transport, lambda: transport.send(address, WireMessage(body=BODY, properties={}))
        )
        assert "no credit to send within 1.5 s" in str(error)
        assert not isinstance(error, NotConfirmedError)
        assert time.monotonic() - started < 3
        assert transport._engine.generation == 1  # reached into: no API counts connections
    finally:
        transport.close()


def test_over_amqp_a_tenant_publishing_to_its_full_address_touches_no_other_tenant(
    broker: LocalArtemis, tmp_path: Path
) -> None:
    producer = stomp_transport(broker)
    producer.connect()
    runner_transport = amqp_transport(broker)
    engine = runner_transport._engine  # reached into: no API counts its connections
    try:
        result = two_tenants(
            producer,
            runner_transport,
            tmp_path,
            full_prefix=f"{FULL}.",
            fill=lambda name: fill(producer, name),
            connections_lost=lambda: engine.generation - 1,
        )
    finally:
        producer.close()
    assert_only_the_refused_tenant_paid(result)
