"""One middleware model for both directions: every piece in one named, ordered list; a piece
takes part in consume (around the handler), publish (around each message sent) and outcomes
(once a delivery is settled) through its hooks, and goes before or after a named piece when it
asks to. The defaults are named: accounting, handling_metrics, retry, trace, ttl, limits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from boost_tenancy import (
    AdmittedSend,
    Draft,
    HandlerContext,
    IncomingMessage,
    Middleware,
    ProcessorRunner,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
    place,
)
from boost_tenancy.errors import ConfigError, PublishRefusedError, TransientError
from boost_tenancy.fairness.accounting import Accounting
from boost_tenancy.fairness.handling_metrics import HandlingMetrics
from boost_tenancy.observability.trace_context import TRACEPARENT
from boost_tenancy.processing.middleware import Handler
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.publishing import PublishNext
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until

TENANT = TenantId("org-chain")


def on_broker(queue: str) -> str:
    """The broker queue of TENANT's messages of a logical queue (routed by default)."""
    return Routing().physical(queue, TENANT)


SEEN: list[str] = []


class Named(Middleware):
    """Records '<name> <outcome type>' when the rest of the chain returns an outcome."""

    def __init__(self, label: str) -> None:
        self.label = label

    def consume(self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler) -> Outcome:
        outcome = call_next(message, ctx)
        SEEN.append(f"{self.label} {type(outcome).__name__}")
        return outcome


class InsideRetry(Named):
    """Asks, by its class, to run just inside the retry middleware."""

    after = "retry"


class Stamp(Middleware):
    """A publish step: adds a property, and records whether the trace was stamped already."""

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        SEEN.append(f"stamp traced={TRACEPARENT in draft.properties}")
        return call_next(replace(draft, properties={**draft.properties, "xStamp": "yes"}))


class Refuses(Middleware):
    """Refuses what it builds to one queue, after the build (it sees the wire message)."""

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        admitted = call_next(draft)
        if draft.queue.endswith(".refused"):
            size = len(admitted.wire.body)
            raise PublishRefusedError(draft.tenant.value, draft.queue, f"{size} bytes, none here")
        return admitted


class Outcomes(Middleware):
    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        SEEN.append(f"outcome {outcome}")


class FailsOnce(TenantProcessor):
    retry_policy = RetryPolicy(max_attempts=3, base_delay_ms=1, max_delay_ms=1)

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if message.attempt == 1:
            raise TransientError("first attempt")
        ctx.publish(f"{message.queue}.out", {"ok": True})
        SEEN.append("handled")


class WithOwn(FailsOnce):
    middleware: ClassVar[tuple[object, ...]] = (Named("processor"),)


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    SEEN.clear()
    yield InMemoryBroker()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteErrorStore]:
    error_store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield error_store
    error_store.close()


def runner_of(
    broker: InMemoryBroker, store: SQLiteErrorStore, processor: TenantProcessor, **kwargs: Any
) -> ProcessorRunner:
    return ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [TENANT],
        error_store=store,
        settings=RunnerSettings(workers=1, prefetch=1),
        **kwargs,
    )


def run_one(broker: InMemoryBroker, runner: ProcessorRunner, queue: str) -> None:
    runner.start()
    try:
        sender = InMemoryTransport(broker)
        sender.connect()
        TenantProducer(sender).send(queue, TENANT, {"n": 1})
        assert wait_until(lambda: broker.depth(on_broker(f"{queue}.out")) == 1)
        if any(isinstance(piece, Outcomes) for piece in runner.middleware.pieces):
            assert wait_until(lambda: "outcome processed" in SEEN)
    finally:
        runner.stop(grace_s=5)


def test_the_default_list_names_every_piece_in_the_order_it_runs(
    broker: InMemoryBroker, store: SQLiteErrorStore
) -> None:
    runner = runner_of(
        broker,
        store,
        WithOwn(unique_queue("chain")),
        observers=[Accounting()],
        middleware=[HandlingMetrics(), Named("mine")],
    )
    assert runner.middleware.names == (
        "accounting",
        "handling_metrics",
        "named",
        "named",
        "retry",
        "trace",
        "ttl",
        "limits",
    )


def test_a_piece_placed_after_retry_sees_the_handlers_failure_and_one_before_sees_the_retry(
    broker: InMemoryBroker, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("chain")
    runner = runner_of(
        broker,
        store,
        FailsOnce(queue),
        middleware=[Named("outside"), place(Named("inside"), after="retry")],
    )
    assert runner.middleware.names.index("retry") == 1
    run_one(broker, runner, queue)
    # Attempt 1: the handler raised through "inside" (no outcome there); "outside" saw the Retry.
    assert SEEN == ["outside Retry", "handled", "inside Ack", "outside Ack"]


def test_a_processor_class_places_its_own_piece_by_declaring_where_it_goes(
    broker: InMemoryBroker, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("chain")

    class Placed(FailsOnce):
        middleware: ClassVar[tuple[object, ...]] = (InsideRetry("own"),)

    runner = runner_of(broker, store, Placed(queue), middleware=[Named("outside")])
    assert runner.middleware.names == ("named", "retry", "inside_retry", "trace", "ttl", "limits")
    run_one(broker, runner, queue)
    assert SEEN == ["outside Retry", "handled", "own Ack", "outside Ack"]


def test_a_publish_step_changes_what_a_handler_publishes_in_its_place_after_the_trace(
    broker: InMemoryBroker, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("chain")
    runner = runner_of(
        broker, store, FailsOnce(queue), middleware=[place(Stamp(), after="trace"), Outcomes()]
    )
    run_one(broker, runner, queue)
    (out,) = broker.messages(on_broker(f"{queue}.out"))
    assert out.properties["xStamp"] == "yes"
    assert TRACEPARENT in out.properties
    # The trace was stamped before it ran; the first delivery was retried, the second processed.
    assert SEEN == ["outcome retried", "stamp traced=True", "handled", "outcome processed"]


def test_a_publish_step_outside_the_trace_sees_the_draft_before_it_is_stamped(
    broker: InMemoryBroker,
) -> None:
    sender = InMemoryTransport(broker)
    sender.connect()
    queue = unique_queue("chain")
    producer = TenantProducer(sender, middleware=[Stamp()])
    producer.send(queue, TENANT, {"n": 1})
    (sent,) = broker.messages(on_broker(queue))
    assert sent.properties["xStamp"] == "yes"
    assert SEEN == ["stamp traced=False"]


def test_a_publish_step_refuses_after_the_build_and_nothing_is_sent(
    broker: InMemoryBroker,
) -> None:
    sender = InMemoryTransport(broker)
    sender.connect()
    queue = unique_queue("chain")
    producer = TenantProducer(sender, middleware=[place(Refuses(), after="limits")])
    with pytest.raises(PublishRefusedError, match=r"\.refused'.*bytes, none here"):
        producer.send(f"{queue}.refused", TENANT, {"n": 1})
    assert broker.depth(on_broker(f"{queue}.refused")) == 0
    producer.send(queue, TENANT, {"n": 2})
    assert broker.depth(on_broker(queue)) == 1


class AsyncPublish(Middleware):
    async def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:  # type: ignore[override]
        return call_next(draft)


class Nothing:
    """Takes part in no direction."""


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (place(Named("x"), before="no-such"), r"asks to go before 'no-such'.*retry, trace"),
        (AsyncPublish(), r"AsyncPublish\.publish is an async def"),
        (Nothing(), r"Nothing object .* is a Nothing, not a middleware"),
    ],
)
def test_what_cannot_take_its_place_is_refused_with_what_is_wrong(
    broker: InMemoryBroker, store: SQLiteErrorStore, given: object, error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        runner_of(broker, store, FailsOnce(unique_queue("chain")), middleware=[given])


def test_a_place_names_one_side() -> None:
    with pytest.raises(ConfigError, match="not both"):
        place(Named("x"), before="retry", after="retry")
    with pytest.raises(ConfigError, match="not neither"):
        place(Named("x"))


class Renames(Middleware):
    """A publish step that changes the draft in place: a property and the body."""

    def publish(self, draft: Draft, call_next: PublishNext) -> AdmittedSend:
        draft.properties = {**draft.properties, "xRenamed": "yes"}
        draft.body = {"renamed": True}
        return call_next(draft)


def test_a_publish_step_may_change_the_draft_in_place() -> None:
    """A draft is the admitted message's own: what a step sets on it is what is built, outside
    and inside the default steps alike (the trace and ttl steps stamp it in place too)."""
    broker = InMemoryBroker()
    transport = InMemoryTransport(broker)
    transport.connect()
    queue = unique_queue("inplace")
    for placed in (Renames(), place(Renames(), after="limits")):
        admitted = TenantProducer(transport, middleware=[placed]).admit(queue, TENANT, {"n": 1})
        assert admitted.wire.properties["xRenamed"] == "yes"
        assert TRACEPARENT in admitted.wire.properties
        assert '"renamed":true' in str(admitted.wire.body)
        assert '"n"' not in str(admitted.wire.body)
