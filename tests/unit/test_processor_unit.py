"""Processor internals on the in-memory transport: buffered publishing, stable derived ids, the
retry middleware's outcomes, log context bound per delivery, and failures handled with the error
store down."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantMismatchError,
    TenantProcessor,
    TenantProducer,
    TransientError,
)
from boost_tenancy.errors import ErrorStoreError, MessageDecodeError
from boost_tenancy.header_values import derived_id
from boost_tenancy.messages import ATTEMPT_PROPERTY, MESSAGE_ID_PROPERTY
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.processing.outcomes import Ack, DeadLetter, Outcome, Retry
from boost_tenancy.processing.retry import RetryMiddleware
from boost_tenancy.resilience.dead_letter import DeadLetterReason, dead_letter_queue
from boost_tenancy.resilience.error_store import (
    ErrorStore,
    FailureOutcome,
    FailureRecord,
)
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.routing import Topology
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import Inbox, unique_queue, wait_until

ORG_A = TenantId("org-A")
FAST = RetryPolicy(max_attempts=3, base_delay_ms=10, max_delay_ms=10, jitter=0.0)
SHARED = Routing(Topology.SHARED)
"""One queue per name: these tests read the queues the dispatcher writes by name."""


def incoming(attempt: int = 1) -> IncomingMessage:
    return IncomingMessage(
        tenant=ORG_A,
        queue="cmd",
        body="{}",
        message_id="m-1",
        correlation_id="c-1",
        attempt=attempt,
        redelivered=False,
        properties={},
        data={},
    )


def context(attempt: int = 1, message_id: str = "m-1") -> HandlerContext:
    return HandlerContext(
        tenant=ORG_A,
        queue="cmd",
        message_id=message_id,
        correlation_id="c-1",
        attempt=attempt,
        log=structlog.get_logger("test"),
    )


# -- HandlerContext.publish -----------------------------------------------------------------------
def test_publish_buffers_tenant_stamped_messages_with_derived_ids() -> None:
    ctx = context()
    first = ctx.publish("out", {"n": 1}, properties={"kind": "x"})
    second = ctx.publish("out", "text", delay_ms=250)
    other = ctx.publish("other", b"raw", delay_ms=-5)
    assert [first, second, other] == [
        derived_id("m-1", "out", 0),
        derived_id("m-1", "out", 1),
        derived_id("m-1", "other", 0),
    ]
    assert [(queue, delay) for queue, _, delay in ctx.outputs] == [
        ("out", 0),
        ("out", 250),
        ("other", 0),
    ]
    wire = ctx.outputs[0][1]
    assert wire.properties["tenantUUID"] == "org-A"
    assert wire.properties[MESSAGE_ID_PROPERTY] == first
    assert wire.properties["kind"] == "x"
    assert wire.correlation_id == "c-1"
    assert '"tenantUUID":"org-A"' in str(wire.body)


def test_publish_refuses_a_body_naming_another_tenant_and_buffers_nothing() -> None:
    ctx = context()
    with pytest.raises(TenantMismatchError):
        ctx.publish("out", {"organizationId": "org-B"})
    assert ctx.outputs == ()


def test_publish_refuses_reserved_properties() -> None:
    ctx = context()
    with pytest.raises(ValueError, match="reserved"):
        ctx.publish("out", {}, properties={"tenantUUID": "org-B"})


def test_contexts_of_two_attempts_publish_the_same_ids() -> None:
    ids = []
    for attempt in (1, 2):
        ctx = context(attempt=attempt)
        ids.append((ctx.publish("out", {}), ctx.publish("out", {}), ctx.publish("audit", {})))
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 3


class PublishThenMaybeFail(TenantProcessor):
    """Publishes two outputs on every attempt; fails while attempt <= fail_until."""

    def __init__(self, queue: str, fail_until: int) -> None:
        self.queues = (queue,)
        self.fail_until = fail_until
        self.published: list[tuple[int, tuple[str, ...]]] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ids = (
            ctx.publish(self.queues[0] + ".out", {"n": 1}),
            ctx.publish(self.queues[0] + ".out", {"n": 2}),
        )
        with self._lock:
            self.published.append((ctx.attempt, ids))
        if ctx.attempt <= self.fail_until:
            raise RuntimeError(f"attempt {ctx.attempt} fails")


def run_until(
    broker: InMemoryBroker,
    store: ErrorStore,
    processor: TenantProcessor,
    done: Any,
    send: Any,
) -> None:
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [ORG_A],
        error_store=store,
        settings=RunnerSettings(workers=1, prefetch=5, dispatch=DispatchSettings(retry=FAST)),
        routing=SHARED,
    )
    runner.start()
    try:
        send()
        assert wait_until(done, timeout=10)
    finally:
        assert runner.stop(grace_s=5)


def test_failing_handler_publishes_nothing(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    processor = PublishThenMaybeFail(queue, fail_until=99)
    run_until(
        broker,
        store,
        processor,
        lambda: broker.depth(dead_letter_queue(queue)) == 1,
        lambda: TenantProducer(transport, routing=SHARED).send(queue, ORG_A, {"go": 1}),
    )
    assert [attempt for attempt, _ in processor.published] == [1, 2, 3]
    assert broker.messages(queue + ".out") == []


def test_retried_handler_publishes_once_with_the_ids_of_every_attempt(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    out = queue + ".out"
    processor = PublishThenMaybeFail(queue, fail_until=1)
    sent: list[str] = []
    run_until(
        broker,
        store,
        processor,
        lambda: broker.depth(out) == 2,
        lambda: sent.append(
            TenantProducer(transport, routing=SHARED).send(queue, ORG_A, {"go": 1}).message_id
        ),
    )
    (first_attempt, first_ids), (second_attempt, second_ids) = processor.published
    assert (first_attempt, second_attempt) == (1, 2)
    assert first_ids == second_ids == (derived_id(sent[0], out, 0), derived_id(sent[0], out, 1))
    assert [m.properties[MESSAGE_ID_PROPERTY] for m in broker.messages(out)] == list(second_ids)
    assert broker.messages(dead_letter_queue(queue)) == []


# -- RetryMiddleware ------------------------------------------------------------------------------
def raising(exc: BaseException) -> Any:
    def call_next(message: IncomingMessage, ctx: HandlerContext) -> Outcome:
        raise exc

    return call_next


@pytest.mark.parametrize(
    "exc",
    [
        PermanentError("document not found"),
        MessageDecodeError("bad body"),
        TenantMismatchError("body names org-B"),
    ],
)
@pytest.mark.parametrize("attempt", [1, 3])
def test_permanent_failures_are_dead_lettered_at_once(exc: Exception, attempt: int) -> None:
    outcome = RetryMiddleware(FAST)(incoming(attempt), context(attempt), raising(exc))
    assert isinstance(outcome, DeadLetter)
    assert outcome.reason is DeadLetterReason.PERMANENT
    assert outcome.error.type == f"boost_tenancy.errors.{type(exc).__name__}"
    assert str(exc) in outcome.error.text


@pytest.mark.parametrize("exc", [RuntimeError("boom"), TransientError("db down"), KeyError("k")])
@pytest.mark.parametrize("attempt", [1, 2])
def test_other_failures_are_retried_below_the_cap(exc: Exception, attempt: int) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay_ms=100, max_delay_ms=1_000, jitter=0.5)
    outcome = RetryMiddleware(policy, rand=lambda: 1.0)(
        incoming(attempt), context(attempt), raising(exc)
    )
    assert isinstance(outcome, Retry)
    assert outcome.delay_ms == 150 * 2 ** (attempt - 1)
    assert (outcome.error.type, outcome.error.text) == (
        ErrorInfo.of(exc).type,
        ErrorInfo.of(exc).text,
    )


def test_other_failures_are_dead_lettered_as_exhausted_at_the_cap() -> None:
    attempt = FAST.max_attempts
    outcome = RetryMiddleware(FAST)(incoming(attempt), context(attempt), raising(RuntimeError("x")))
    assert isinstance(outcome, DeadLetter)
    assert outcome.reason is DeadLetterReason.EXHAUSTED
    assert (outcome.error.type, outcome.error.text) == ("RuntimeError", "RuntimeError: x")
    assert outcome.error.trace is not None
    assert "raise exc" in outcome.error.trace, "the trace names the line that raised"


def test_a_delivery_past_the_cap_is_dead_lettered_without_calling_the_handler() -> None:
    """Only a broker's own count gets there: earlier deliveries ended with no outcome."""
    called: list[int] = []

    def handler(message: IncomingMessage, ctx: HandlerContext) -> Ack:
        called.append(message.attempt)
        return Ack()

    attempt = FAST.max_attempts + 1
    outcome = RetryMiddleware(FAST)(incoming(attempt), context(attempt), handler)
    assert called == []
    assert isinstance(outcome, DeadLetter)
    assert outcome.reason is DeadLetterReason.EXHAUSTED
    assert outcome.error.type == "DeliveryLimitExceeded"
    assert f"delivery {attempt} of a message allowed {FAST.max_attempts}" in outcome.error.text


def test_single_attempt_policy_dead_letters_the_first_failure() -> None:
    outcome = RetryMiddleware(RetryPolicy(max_attempts=1))(
        incoming(1), context(1), raising(TransientError("x"))
    )
    assert isinstance(outcome, DeadLetter)
    assert outcome.reason is DeadLetterReason.EXHAUSTED


def test_success_passes_the_handlers_outcome_through() -> None:
    ack = Ack()
    outcome = RetryMiddleware(FAST)(incoming(), context(), lambda m, c: ack)
    assert outcome is ack


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), GeneratorExit()])
def test_base_exceptions_from_a_handler_are_failures_that_never_end_a_worker(
    exc: BaseException,
) -> None:
    outcome = RetryMiddleware(FAST)(incoming(), context(), raising(exc))
    assert isinstance(outcome, Retry)
    assert outcome.error.type == type(exc).__name__
    last = RetryMiddleware(FAST)(incoming(3), context(3), raising(exc))
    assert isinstance(last, DeadLetter)
    assert last.reason is DeadLetterReason.EXHAUSTED


def test_error_info_names_builtins_plainly_and_others_by_module() -> None:
    assert ErrorInfo.of(ValueError("v")).type == "ValueError"
    assert ErrorInfo.of(PermanentError("p")).type == "boost_tenancy.errors.PermanentError"
    assert ErrorInfo.of(ValueError("v")).text == "ValueError: v"


# -- dispatcher: log context and error-store outage -----------------------------------------------
class Logging(TenantProcessor):
    queues = ("unused",)

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.calls += 1
        ctx.log.info("handler_ran", n=message.data["n"])
        if self.fail:
            raise RuntimeError("handler failed")


def deliveries(transport: InMemoryTransport, queue: str) -> Inbox:
    inbox = Inbox()
    transport.subscribe(queue, selector=tenant_selector(ORG_A), prefetch=10, on_delivery=inbox)
    return inbox


def test_handler_log_lines_carry_tenant_queue_message_id_and_attempt(
    transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    inbox = deliveries(transport, queue)
    sent = TenantProducer(transport, routing=SHARED).send(
        queue, ORG_A, {"n": 7}, correlation_id="corr-1"
    )
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(Logging(), transport, store)
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        assert dispatcher.dispatch(ORG_A, inbox.items[0]) == "processed"
        structlog.get_logger("test").info("after_dispatch")
    handler_line = next(entry for entry in logs if entry["event"] == "handler_ran")
    assert handler_line["n"] == 7
    assert handler_line["tenant"] == "org-A"
    assert handler_line["queue"] == queue
    assert handler_line["message_id"] == sent.message_id
    assert handler_line["correlation_id"] == "corr-1"
    assert handler_line["attempt"] == 1
    after = next(entry for entry in logs if entry["event"] == "after_dispatch")
    assert "tenant" not in after, "the context is unbound once the delivery is done"


def test_log_context_of_a_retry_carries_the_next_attempt(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    inbox = deliveries(transport, queue)
    TenantProducer(transport, routing=SHARED).send(queue, ORG_A, {"n": 1})
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(
        Logging(fail=True), transport, store, settings=DispatchSettings(retry=FAST)
    )
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        assert dispatcher.dispatch(ORG_A, inbox.items[0]) == "retried"
        assert wait_until(lambda: len(inbox) == 2)
        assert dispatcher.dispatch(ORG_A, inbox.items[1]) == "retried"
    attempts = [entry["attempt"] for entry in logs if entry["event"] == "handler_ran"]
    assert attempts == [1, 2]
    warnings = [entry for entry in logs if entry["event"] == "message_retry_scheduled"]
    assert [(w["log_level"], w["attempt"], w["error_type"]) for w in warnings] == [
        ("warning", 1, "RuntimeError"),
        ("warning", 2, "RuntimeError"),
    ]


class DownStore:
    """An error store whose every write fails."""

    def __init__(self) -> None:
        self.writes = 0

    def record(self, record: FailureRecord) -> None:
        self.writes += 1
        raise ErrorStoreError("database is unavailable")

    def failures(self, **_: Any) -> list[FailureRecord]:
        raise ErrorStoreError("database is unavailable")

    def close(self) -> None:
        pass


def test_error_store_outage_still_retries_then_dead_letters_and_logs_critically(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    inbox = deliveries(transport, queue)
    TenantProducer(transport, routing=SHARED).send(queue, ORG_A, {"n": 1})
    assert wait_until(lambda: len(inbox) == 1)
    store = DownStore()
    dispatcher = Dispatcher(
        Logging(fail=True),
        transport,
        store,
        settings=DispatchSettings(
            retry=RetryPolicy(max_attempts=2, base_delay_ms=10, max_delay_ms=10),
            error_store_attempts=2,
        ),
    )
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        assert dispatcher.dispatch(ORG_A, inbox.items[0]) == "retried"
        assert wait_until(lambda: len(inbox) == 2)
        assert inbox.items[1].properties[ATTEMPT_PROPERTY] == "2"
        assert dispatcher.dispatch(ORG_A, inbox.items[1]) == "dead_lettered"
    # The first failure is tried error_store_attempts times; the second comes within the
    # store's cool-down, so it is logged at once without waiting for a store known to be down.
    assert store.writes == 2
    dead = broker.messages(dead_letter_queue(queue))
    assert len(dead) == 1
    assert dead[0].properties["boostDeadLetterReason"] == "exhausted"
    assert "handler failed" in dead[0].properties["boostError"]
    assert broker.messages(queue) == [], "nothing is left stuck on the source queue"
    critical = [entry for entry in logs if entry["event"] == "error_store_write_failed"]
    assert [(c["log_level"], c["record_outcome"], c["attempt"]) for c in critical] == [
        ("critical", FailureOutcome.RETRY.value, 1),
        ("critical", FailureOutcome.DEAD_LETTER.value, 2),
    ]
    assert "database is unavailable" in critical[0]["error"]
    assert "not waiting for it again" in critical[1]["error"]
    assert all(c["record_error"] == "RuntimeError: handler failed" for c in critical)
    assert all(c["tenant"] == "org-A" for c in critical)


class FlakyStore:
    """Fails the first write, then records into a real store."""

    def __init__(self, real: ErrorStore) -> None:
        self.real = real
        self.failed = False

    def record(self, record: FailureRecord) -> None:
        if not self.failed:
            self.failed = True
            raise ErrorStoreError("blip")
        self.real.record(record)

    def failures(self, **kwargs: Any) -> list[FailureRecord]:
        return self.real.failures(**kwargs)

    def close(self) -> None:
        self.real.close()


def test_error_store_recovering_within_the_write_attempts_records_the_failure(
    transport: InMemoryTransport, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    inbox = deliveries(transport, queue)
    TenantProducer(transport, routing=SHARED).send(queue, ORG_A, {"n": 1})
    assert wait_until(lambda: len(inbox) == 1)
    flaky = FlakyStore(store)
    dispatcher = Dispatcher(
        Logging(fail=True), transport, flaky, settings=DispatchSettings(retry=FAST)
    )
    with capture_logs() as logs:
        assert dispatcher.dispatch(ORG_A, inbox.items[0]) == "retried"
    assert flaky.failed
    assert not [entry for entry in logs if entry["event"] == "error_store_write_failed"]
    records = store.failures(tenant=ORG_A)
    assert [(r.attempt, r.outcome) for r in records] == [(1, FailureOutcome.RETRY)]


def test_zero_error_store_attempts_is_refused_or_still_retries(
    transport: InMemoryTransport,
) -> None:
    try:
        settings = DispatchSettings(retry=FAST, error_store_attempts=0)
    except ValueError:
        return
    queue = unique_queue("cmd")
    inbox = deliveries(transport, queue)
    TenantProducer(transport, routing=SHARED).send(queue, ORG_A, {"n": 1})
    assert wait_until(lambda: len(inbox) == 1)
    dispatcher = Dispatcher(Logging(fail=True), transport, DownStore(), settings=settings)
    assert dispatcher.dispatch(ORG_A, inbox.items[0]) == "retried"
