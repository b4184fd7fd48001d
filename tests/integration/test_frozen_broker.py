"""A broker that stops answering with its connections up (a frozen process: SIGSTOP), a Classic
and an Artemis of the test's own: the STOMP transport gives up within its bounds, and once the
broker runs again nothing it confirmed is lost and what it held unacknowledged comes back."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import Delivery
from boost_tenancy.transports.stomp import StompTransport
from tests.conftest import Inbox, wait_until
from tests.integration.worker_support import OwnBroker, own_broker

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("stops and continues a Classic and an Artemis of its own"),
]

CONFIRM_S = 3.0


@pytest.fixture(scope="module", params=["classic", "artemis"])
def broker(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[OwnBroker]:
    home = tmp_path_factory.mktemp(f"frozen-{request.param}")
    yield from own_broker(request.param, home, 62613, 62616)


@contextlib.contextmanager
def frozen(broker: OwnBroker) -> Iterator[None]:
    """The broker process stopped (SIGSTOP) while the block runs, continued after."""
    pid = broker.process.status()["pid"]
    assert isinstance(pid, int)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def transport_to(broker: OwnBroker) -> StompTransport:
    settings = dataclasses.replace(
        broker.settings, confirm_timeout_s=CONFIRM_S, heartbeat_s=1.0, reconnect_wait_s=5
    )
    transport = StompTransport(settings)
    transport.connect()
    return transport


def message(body: str) -> WireMessage:
    return WireMessage(body=body, properties={"tenantUUID": "org-frozen"})


def ended_within(seconds: float, action: threading.Thread) -> bool:
    action.start()
    action.join(seconds)
    return not action.is_alive()


def test_a_frozen_broker_fails_a_send_and_a_large_batch_in_bounded_time(
    broker: OwnBroker,
) -> None:
    """A send waits at most confirm_timeout_s for its receipt. A batch larger than the sockets'
    buffers blocks in its write instead, which fails once nothing moved for as long."""
    queue = f"frozen.{uuid.uuid4().hex[:8]}"
    transport = transport_to(broker)
    errors: list[TransportError] = []

    def attempt(items: list[tuple[str, WireMessage]]) -> threading.Thread:
        def run() -> None:
            try:
                transport.send_batch(items, atomic=False)
            except TransportError as exc:
                errors.append(exc)

        return threading.Thread(target=run, daemon=True)

    try:
        transport.send(queue, message("confirmed before"))
        with frozen(broker):
            started = time.monotonic()
            assert ended_within(30, attempt([(queue, message("while frozen"))])), "send hung"
            took = time.monotonic() - started
        # No receipt in confirm_timeout_s, or the heart-beats missed before: either ends it.
        assert len(errors) == 1, errors
        assert took < CONFIRM_S + 5, took
        assert wait_until(lambda: transport.is_connected, timeout=60), "no reconnection"
        big = [(queue, message("x" * 200_000))] * 50  # more than the sockets' buffers hold
        with frozen(broker):
            assert ended_within(60, attempt(big)), "a large batch hung"
        assert len(errors) == 2 and "read nothing" in str(errors[1]), errors
        assert wait_until(lambda: transport.is_connected, timeout=60), "no reconnection"
        inbox = Inbox()
        transport.subscribe(queue, selector=None, prefetch=100, on_delivery=inbox)
        assert wait_until(lambda: "confirmed before" in [d.body for d in inbox.items], 20)
    finally:
        transport.close()


def test_what_a_frozen_broker_held_unacknowledged_comes_back_once_it_runs(
    broker: OwnBroker,
) -> None:
    queue = f"frozen.{uuid.uuid4().hex[:8]}"
    transport = transport_to(broker)
    try:
        transport.send(queue, message("held"))
        inbox = Inbox()
        transport.subscribe(queue, selector=None, prefetch=5, on_delivery=inbox)
        assert wait_until(lambda: len(inbox) == 1, timeout=20)
        with frozen(broker):
            # Heart-beats of 1 s: the transport notices a broker that says nothing.
            assert wait_until(lambda: not transport.is_connected, timeout=30), (
                "a frozen broker was not noticed"
            )
        assert wait_until(lambda: len(inbox) == 2, timeout=60), "the held message did not return"
        again: Delivery = inbox.items[1]
        assert (again.body, again.redelivered) == ("held", True)
        transport.ack(again)
    finally:
        transport.close()
