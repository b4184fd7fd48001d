"""Settling when something goes wrong around the handler: foreign toolkit headers are not
trusted, an outcome the transport refuses falls back to a raw dead letter, retry copies carry
their error, a dead worker is replaced, and an abandoned handler makes a non-zero exit."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProcessor,
)
from boost_tenancy.errors import MessageEncodeError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.processing.inbound import FOREIGN_CORRELATION_PROPERTY, adopt
from boost_tenancy.processing.runner import EXIT_HANDLERS_ABANDONED
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, Outgoing
from tests.conftest import Inbox, unique_queue, wait_until

ORG_A = TenantId("org-A")
FAST = RetryPolicy(max_attempts=3, base_delay_ms=0, max_delay_ms=0, jitter=0.0)


def delivery(**properties: str) -> Delivery:
    correlation = properties.pop("correlation", None)
    return Delivery(
        queue="cmd",
        body="{}",
        properties={"tenantUUID": "org-A", **properties},
        correlation_id=correlation,
        redelivered=False,
        subscription_id="s",
        broker_message_id="ID:1",
    )


# -- adopt: what the toolkit trusts of a delivery ------------------------------------------------
@pytest.mark.parametrize("raw", ["0", "-1", "abc", "", " 2", "1e3", "99999999999999999999999"])
def test_a_malformed_or_huge_attempt_is_foreign_and_counts_as_the_first(raw: str) -> None:
    adopted = adopt(delivery(boostAttempt=raw))
    assert adopted.attempt == 1
    assert adopted.delivery.properties["boostAttempt"] == "1"
    assert adopted.delivery.properties["foreign_boostAttempt"] == raw
    assert adopted.foreign == ("boostAttempt",)


def test_a_valid_attempt_and_id_are_kept_as_they_are() -> None:
    original = delivery(boostAttempt="4", boostMessageId="m-1")
    adopted = adopt(original)
    assert (adopted.attempt, adopted.message_id, adopted.foreign) == (4, "m-1", ())
    assert adopted.delivery is original


def test_dead_letter_properties_on_a_source_queue_are_renamed_not_trusted() -> None:
    adopted = adopt(
        delivery(boostOriginalQueue="parked.org-B.cmd", boostDeadLetterReason="permanent")
    )
    props = adopted.delivery.properties
    assert "boostOriginalQueue" not in props and "boostDeadLetterReason" not in props
    assert props["foreign_boostOriginalQueue"] == "parked.org-B.cmd"
    on_dlq = adopt(delivery(boostOriginalQueue="cmd"), dead_letter=True)
    assert on_dlq.delivery.properties["boostOriginalQueue"] == "cmd"


def test_a_foreign_correlation_id_becomes_a_stable_valid_one_and_the_original_is_kept() -> None:
    first = adopt(delivery(correlation="a b/c=d"))
    again = adopt(delivery(correlation="a b/c=d"))
    assert first.delivery.correlation_id == again.delivery.correlation_id
    assert first.delivery.correlation_id is not None
    assert first.delivery.correlation_id.startswith("a_b_c_d-")
    assert first.delivery.properties[FOREIGN_CORRELATION_PROPERTY] == "a b/c=d"
    ctx = HandlerContext(
        tenant=ORG_A,
        queue="cmd",
        message_id="m",
        correlation_id=first.delivery.correlation_id,
        attempt=1,
        log=None,
    )
    ctx.publish("out", {"n": 1})  # raised ConfigError before: every publish failed


# -- the last resort ---------------------------------------------------------------------------
class RefusingTransport(InMemoryTransport):
    """Refuses, on a healthy connection, any forward whose items are not raw dead letters:
    what a broker answering every copy of one message with an ERROR frame looks like."""

    def __init__(self, broker: InMemoryBroker, error: Exception) -> None:
        super().__init__(broker)
        self.error = error
        self.refused = 0

    def send_then_ack(self, delivery: Delivery, items: Sequence[Outgoing]) -> None:
        raw = all(m.properties.get("boostDeadLetterReason") == "unsettleable" for _, m, _ in items)
        if items and not raw:
            self.refused += 1
            raise self.error
        super().send_then_ack(delivery, items)


class Publishing(TenantProcessor):
    queues = ("cmd",)
    json_body = False

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.publish("out", {"n": 1})


@pytest.mark.parametrize(
    "error", [MessageEncodeError("the wire cannot carry it"), TransportError("ERROR frame")]
)
def test_an_outcome_refused_on_a_healthy_connection_ends_as_a_raw_dead_letter(
    broker: InMemoryBroker, store: ErrorStore, error: Exception
) -> None:
    transport = RefusingTransport(broker, error)
    transport.connect()
    inbox = Inbox()
    transport.subscribe("cmd", selector=None, prefetch=5, on_delivery=inbox)
    body = b"caf\xe9 raw bytes".decode("utf-8", "surrogateescape")
    broker.put(
        "cmd",
        WireMessage(body=body, properties={"tenantUUID": "org-A", "app": "x\x00y"}),
    )
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(Publishing(), transport, store, settings=DispatchSettings(retry=FAST))
    outcome = dispatcher.dispatch(ORG_A, inbox.items[0])
    assert outcome == "dead_lettered"
    assert transport.refused == 1
    [dead] = broker.messages(dead_letter_queue("cmd"))
    assert dead.body == b"caf\xe9 raw bytes", "the original bytes, exactly"
    assert dead.properties["boostDeadLetterReason"] == "unsettleable"
    assert dead.properties["tenantUUID"] == "org-A"
    assert "could not be carried out" in dead.properties["boostError"]
    assert broker.messages("cmd") == []
    [record] = store.failures(tenant=ORG_A)
    assert record.outcome is FailureOutcome.DEAD_LETTER


def test_a_refused_outcome_on_a_lost_connection_is_left_to_redelivery(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = RefusingTransport(broker, TransportError("connection lost"))
    transport.connect()
    inbox = Inbox()
    transport.subscribe("cmd", selector=None, prefetch=5, on_delivery=inbox)
    broker.put("cmd", WireMessage(body="{}", properties={"tenantUUID": "org-A"}))
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(Publishing(), transport, store)
    original = transport.send_then_ack

    def lose_then_refuse(d: Delivery, items: Sequence[Outgoing]) -> None:
        transport.close()  # the connection goes while the outcome is carried out
        original(d, items)

    transport.send_then_ack = lose_then_refuse  # type: ignore[method-assign]
    with pytest.raises(TransportError):
        dispatcher.dispatch(ORG_A, inbox.items[0])
    assert broker.messages(dead_letter_queue("cmd")) == []
    assert store.failures(tenant=ORG_A) == [], "nothing recorded for a move that did not happen"
    assert len(broker.messages("cmd")) == 1, "back on its queue for redelivery"


# -- retry copies ---------------------------------------------------------------------------------
class Failing(TenantProcessor):
    queues = ("cmd",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise KeyError("documentUUID")


def test_the_retry_copy_carries_the_error_and_the_record_its_trace(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = InMemoryTransport(broker)
    transport.connect()
    inbox = Inbox()
    transport.subscribe("cmd", selector=None, prefetch=5, on_delivery=inbox)
    broker.put("cmd", WireMessage(body="{}", properties={"tenantUUID": "org-A"}))
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(Failing(), transport, store, settings=DispatchSettings(retry=FAST))
    assert dispatcher.dispatch(ORG_A, inbox.items[0]) == "retried"
    assert wait_until(lambda: len(inbox) == 2)
    copy = inbox.items[1].properties
    assert (copy["boostAttempt"], copy["boostErrorType"]) == ("2", "KeyError")
    assert copy["boostError"] == "KeyError: 'documentUUID'"
    [record] = store.failures(tenant=ORG_A)
    assert record.trace is not None
    assert "test_settling.py" in record.trace and 'raise KeyError("documentUUID")' in record.trace


# -- the runner --------------------------------------------------------------------------------
class Sleepy(TenantProcessor):
    def __init__(self, queue: str, sleep_s: float) -> None:
        self.queues = (queue,)
        self.sleep_s = sleep_s
        self.started = threading.Event()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.started.set()
        time.sleep(self.sleep_s)


def test_a_dead_worker_is_replaced_and_the_runner_keeps_handling(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = Sleepy(queue, 0.0)
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        ["org-A"],
        error_store=store,
        settings=RunnerSettings(workers=2),
        redrive_parked=False,
    )
    runner.start()
    try:
        dead: Any = threading.Thread(target=lambda: None)
        dead.start()
        dead.join()
        runner._workers[0] = dead  # a worker thread that ended
        assert runner.supervise() == 1
        assert all(worker.is_alive() for worker in runner._workers)
        broker.put(queue, WireMessage(body="{}", properties={"tenantUUID": "org-A"}))
        assert wait_until(processor.started.is_set)
    finally:
        runner.stop(grace_s=5)


def test_run_exits_non_zero_when_the_grace_period_abandons_a_handler(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = Sleepy(queue, 3.0)
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        ["org-A"],
        error_store=store,
        settings=RunnerSettings(workers=1, shutdown_grace_s=0.2),
        redrive_parked=False,
    )
    broker.put(queue, WireMessage(body="{}", properties={"tenantUUID": "org-A"}))
    stopper = threading.Thread(
        target=lambda: (processor.started.wait(10), runner.request_stop()), daemon=True
    )
    stopper.start()
    assert runner.run(install_signal_handlers=False) == EXIT_HANDLERS_ABANDONED
