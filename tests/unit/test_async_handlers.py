"""Async handlers and middleware on the in-memory broker: outcomes, the mixed chain, the bounds
of the workers and the gate, a handler blocking the loop, and shutdown with handlers running."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pytest
import structlog
from structlog.testing import capture_logs

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.concurrency import InMemoryConcurrencyLimiter
from boost_tenancy.fairness.gate import FairnessGate
from boost_tenancy.messages import ATTEMPT_PROPERTY
from boost_tenancy.processing.aio import AnyMiddleware
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.processing.event_loop import EventLoopSettings
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.resilience.records import FailureOutcome
from boost_tenancy.routing import Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.async_processors import (
    AsyncEcho,
    AsyncStep,
    Parked,
    SyncStep,
    Trail,
    TrailedAsync,
    TrailedSync,
)
from tests.conftest import unique_queue, wait_until

ORG_A = TenantId("org-A")
ORG_B = TenantId("org-B")
FAST = RetryPolicy(max_attempts=3, base_delay_ms=10, max_delay_ms=10, jitter=0.0)
SHARED = Routing(Topology.SHARED)
"""One queue per name: the tests read the queues the dispatcher writes by name."""


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if re.fullmatch(r"boost-loop-\d+", t.name)]


@pytest.fixture
def runners(broker: InMemoryBroker, store: ErrorStore) -> Iterator[Any]:
    """Makes started runners on the in-memory broker; stops whatever is still running."""
    made: list[ProcessorRunner] = []

    def start(
        processor: TenantProcessor,
        *,
        tenants: Sequence[TenantId] = (ORG_A,),
        workers: int = 2,
        middleware: Sequence[AnyMiddleware] = (),
        gate: FairnessGate | None = None,
        stall_s: float = 10.0,
        grace_s: float = 5.0,
    ) -> ProcessorRunner:
        runner = ProcessorRunner(
            processor,
            InMemoryTransport(broker),
            tenants,
            error_store=store,
            settings=RunnerSettings(
                workers=workers,
                prefetch=10,
                shutdown_grace_s=grace_s,
                dispatch=DispatchSettings(retry=FAST),
                event_loop=EventLoopSettings(stall_s=stall_s),
            ),
            middleware=middleware,
            gate=gate,
            routing=SHARED,
        )
        runner.start()
        made.append(runner)
        return runner

    yield start
    for runner in made:
        runner.stop(grace_s=1)


def send(transport: InMemoryTransport, queue: str, tenant: TenantId, body: dict[str, Any]) -> str:
    return TenantProducer(transport, routing=SHARED).send(queue, tenant, body).message_id


# -- outcomes -------------------------------------------------------------------------------------
def test_an_async_handler_runs_on_the_loop_and_its_publish_goes_out_with_the_ack(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = AsyncEcho(queue)
    runners(processor)
    send(transport, queue, ORG_A, {"n": 7})
    assert wait_until(lambda: broker.depth(queue + ".out") == 1)
    assert wait_until(lambda: broker.depth(queue) == 0), "acknowledged"
    assert processor.on_loop == [True]
    (out,) = broker.messages(queue + ".out")
    assert '"n": 7' in str(out.body) or '"n":7' in str(out.body)


def test_a_failing_async_handler_is_retried_then_dead_lettered_with_its_attempts_counted(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = AsyncEcho(queue)
    runners(processor)
    message_id = send(transport, queue, ORG_A, {"fail": True})
    assert wait_until(lambda: broker.depth(dead_letter_queue(queue)) == 1)
    assert processor.attempts[message_id] == FAST.max_attempts
    records = store.failures(tenant=ORG_A, message_id=message_id)
    assert [(r.attempt, r.outcome) for r in records] == [
        (1, FailureOutcome.RETRY),
        (2, FailureOutcome.RETRY),
        (3, FailureOutcome.DEAD_LETTER),
    ]
    assert all(r.error_type == "ConnectionError" for r in records)
    assert broker.messages(queue + ".out") == []


def test_a_permanent_error_from_an_async_handler_dead_letters_at_once(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = AsyncEcho(queue)
    runners(processor)
    message_id = send(transport, queue, ORG_A, {"permanent": True})
    assert wait_until(lambda: broker.depth(dead_letter_queue(queue)) == 1)
    assert processor.attempts[message_id] == 1
    (record,) = store.failures(tenant=ORG_A, message_id=message_id)
    assert record.outcome is FailureOutcome.DEAD_LETTER


class ExitsOnce(TenantProcessor):
    """Raises SystemExit in its first coroutine, then handles normally."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.attempts: list[int] = []

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.attempts.append(message.attempt)
        if message.attempt == 1:
            raise SystemExit(3)


def test_system_exit_in_an_async_handler_is_retried_and_the_loop_keeps_running(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = ExitsOnce(queue)
    runners(processor)
    message_id = send(transport, queue, ORG_A, {})
    assert wait_until(lambda: processor.attempts == [1, 2])
    assert wait_until(lambda: broker.depth(queue) == 0)
    (record,) = store.failures(tenant=ORG_A, message_id=message_id)
    assert (record.attempt, record.outcome, record.error_type) == (
        1,
        FailureOutcome.RETRY,
        "SystemExit",
    )


class ForgetsAwait(TenantProcessor):
    """Returns its work's coroutine instead of awaiting it."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.worked = False

    async def _work(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.worked = True
        ctx.publish(message.queue + ".out", {"done": True})

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> Any:
        return self._work(message, ctx)


def test_an_async_handler_returning_an_unawaited_coroutine_is_dead_lettered_not_acknowledged(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = ForgetsAwait(queue)
    runners(processor)
    message_id = send(transport, queue, ORG_A, {})
    assert wait_until(lambda: broker.depth(dead_letter_queue(queue)) == 1)
    (record,) = store.failures(tenant=ORG_A, message_id=message_id)
    assert record.outcome is FailureOutcome.DEAD_LETTER
    assert "did not await" in record.error_text
    assert not processor.worked
    assert broker.depth(queue + ".out") == 0


class SpawnsAnExit(TenantProcessor):
    """Its first message spawns a task that raises SystemExit (or a callback that does) and
    returns; every message is counted."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str, how: str) -> None:
        self.queues = (queue,)
        self.how = how
        self.handled: list[int] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if message.data.get("exit"):

            async def exits() -> None:
                raise SystemExit(4)

            if self.how == "task":
                task = asyncio.get_running_loop().create_task(exits())
                self.tasks.add(task)
            else:
                asyncio.get_running_loop().call_soon(exits().send, None)
        self.handled.append(message.data["n"])


@pytest.mark.parametrize("how", ["task", "callback"])
def test_a_system_exit_in_what_a_handler_spawned_leaves_the_loop_serving_every_tenant(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, runners: Any, how: str
) -> None:
    queue = unique_queue("aio")
    processor = SpawnsAnExit(queue, how)
    runners(processor, tenants=(ORG_A, ORG_B))
    send(transport, queue, ORG_A, {"n": 0, "exit": True})
    assert wait_until(lambda: processor.handled == [0])
    for n in range(1, 4):
        send(transport, queue, ORG_B if n % 2 else ORG_A, {"n": n})
    assert wait_until(lambda: sorted(processor.handled) == [0, 1, 2, 3], timeout=5)
    assert wait_until(lambda: broker.depth(queue) == 0)
    assert broker.depth(dead_letter_queue(queue)) == 0
    assert store.failures(tenant=ORG_A) == [] and store.failures(tenant=ORG_B) == []
    # The spawned task ended in its (contained) exit, read here so it is not reported later.
    assert all(isinstance(t.exception(), Exception) for t in processor.tasks)


class LogsTenant(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        structlog.get_logger("test").info("handled_on_loop")


def test_the_delivery_log_context_reaches_the_coroutine(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        runners(LogsTenant(queue))
        message_id = send(transport, queue, ORG_A, {})
        assert wait_until(lambda: any(e["event"] == "handled_on_loop" for e in logs))
    (event,) = [e for e in logs if e["event"] == "handled_on_loop"]
    assert (event.get("tenant"), event.get("message_id")) == ("org-A", message_id)


# -- the mixed chain ------------------------------------------------------------------------------
def test_a_mixed_chain_runs_plain_pieces_on_the_worker_and_async_ones_on_the_loop_in_order(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    trail = Trail()
    chain = [SyncStep("s1", trail), AsyncStep("a1", trail), SyncStep("s2", trail)]
    runners(TrailedAsync(queue, trail), middleware=chain)
    send(transport, queue, ORG_A, {})
    assert wait_until(lambda: broker.depth(queue + ".out") == 1)
    assert wait_until(lambda: len(trail.steps) == 7)
    assert trail.steps == [
        "s1>@worker",
        "a1>@loop",
        "s2>@worker",
        "handler@loop",
        "<s2@worker",
        "<a1@loop",
        "<s1@worker",
    ]


def test_an_async_middleware_around_a_plain_handler_leaves_the_handler_on_its_worker(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    trail = Trail()
    runners(TrailedSync(queue, trail), middleware=[AsyncStep("a1", trail)])
    send(transport, queue, ORG_A, {})
    assert wait_until(lambda: broker.depth(queue + ".out") == 1)
    assert wait_until(lambda: len(trail.steps) == 3)
    assert trail.steps == ["a1>@loop", "handler@worker", "<a1@loop"]


class Overrules(AsyncStep):
    """An async middleware that sees the handler's failure as the rest of the chain's outcome."""

    def __init__(self, trail: Trail) -> None:
        super().__init__("overrules", trail)
        self.seen: list[str] = []

    async def __call__(self, message: IncomingMessage, ctx: HandlerContext, call_next: Any) -> Any:
        outcome: Outcome = await call_next(message, ctx)
        self.seen.append(type(outcome).__name__)
        return outcome


def test_an_async_middleware_outside_the_retry_gets_the_retry_outcome_of_a_failing_handler(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    middleware = Overrules(Trail())
    runners(AsyncEcho(queue), middleware=[middleware])
    send(transport, queue, ORG_A, {"fail": True})
    assert wait_until(lambda: broker.depth(dead_letter_queue(queue)) == 1)
    assert middleware.seen == ["Retry", "Retry", "DeadLetter"]


def stop_iteration_after(message: Any, ctx: Any, call_next: Any) -> Any:
    call_next(message, ctx)
    raise StopIteration("an exhausted iterator's next()")


def test_a_plain_middleware_raising_stop_iteration_inside_an_async_one_fails_the_attempt(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    """asyncio refuses StopIteration into a future: the coroutine waited for good, and with it
    the worker and the delivery, until the runner stopped. It is an attempt failed, retried and
    dead-lettered like any other exception."""
    queue = unique_queue("aio")
    trail = Trail()
    runners(TrailedSync(queue, trail), middleware=[AsyncStep("a1", trail), stop_iteration_after])
    send(transport, queue, ORG_A, {})
    assert wait_until(lambda: broker.depth(dead_letter_queue(queue)) == 1)
    [dead] = broker.messages(dead_letter_queue(queue))
    assert "StopIteration" in dead.properties["boostError"]


async def bare_async_middleware(message: Any, ctx: Any, call_next: Any) -> Any:
    return await call_next(message, ctx)


def test_an_async_def_middleware_that_does_not_declare_itself_is_refused(
    transport: InMemoryTransport, store: ErrorStore
) -> None:
    with pytest.raises(
        ConfigError, match=r"bare_async_middleware is an async def.*AsyncMiddleware"
    ):
        Dispatcher(
            TrailedSync("q", Trail()),
            transport,
            store,
            middleware=[bare_async_middleware],  # type: ignore[list-item]  # the mistake under test
        )


def test_a_dispatcher_of_an_async_handler_needs_an_event_loop(
    transport: InMemoryTransport, store: ErrorStore
) -> None:
    with pytest.raises(ConfigError, match="needs an event loop"):
        Dispatcher(AsyncEcho("q"), transport, store)


class AsyncGenerator(TenantProcessor):
    queues = ("q",)

    async def handle(  # type: ignore[override]  # the mistake under test
        self, message: IncomingMessage, ctx: HandlerContext
    ) -> Any:
        yield None


def test_an_async_generator_handle_is_refused_when_the_processor_is_loaded(
    transport: InMemoryTransport, store: ErrorStore
) -> None:
    with pytest.raises(ConfigError, match="async generator"):
        Dispatcher(AsyncGenerator(), transport, store)


def test_a_plain_processor_starts_no_event_loop(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    runners(TrailedSync(queue, Trail()))
    send(transport, queue, ORG_A, {})
    assert wait_until(lambda: broker.depth(queue + ".out") == 1)
    assert loop_threads() == []


# -- bounds ---------------------------------------------------------------------------------------
class Counted(TenantProcessor):
    """Counts coroutines running at once, per tenant and in all; each waits for a permit."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self._lock = threading.Lock()
        self.permits = threading.Semaphore(0)
        self.started = 0
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_all = 0
        self.together: set[frozenset[str]] = set()

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        tenant = ctx.tenant.value
        with self._lock:
            self.started += 1
            self.running[tenant] = self.running.get(tenant, 0) + 1
            self.peak[tenant] = max(self.peak.get(tenant, 0), self.running[tenant])
            self.peak_all = max(self.peak_all, sum(self.running.values()))
            self.together.add(frozenset(t for t, n in self.running.items() if n))
        try:
            assert await asyncio.to_thread(self.permits.acquire, True, 20)
        finally:
            with self._lock:
                self.running[tenant] -= 1


def test_async_handlers_run_at_most_as_many_at_once_as_there_are_workers(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = Counted(queue)
    runners(processor, workers=2)
    for n in range(6):
        send(transport, queue, ORG_A, {"n": n})
    assert wait_until(lambda: processor.started == 2)
    for released in range(1, 5):
        processor.permits.release()
        assert wait_until(lambda r=released: processor.started == 2 + r)  # type: ignore[misc]
    processor.permits.release(2)
    assert wait_until(lambda: broker.depth(queue) == 0)
    assert processor.peak_all == 2


def test_the_fairness_gate_holds_a_tenants_async_handlers_to_its_slots(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = Counted(queue)
    gate = FairnessGate(concurrency=InMemoryConcurrencyLimiter(), limit_of=lambda tenant: 1)
    try:
        runners(processor, tenants=[ORG_A, ORG_B], workers=4, gate=gate)
        for n in range(3):
            send(transport, queue, ORG_A, {"n": n})
            send(transport, queue, ORG_B, {"n": n})
        assert wait_until(lambda: processor.started == 2)
        for released in range(1, 5):
            processor.permits.release()
            assert wait_until(lambda r=released: processor.started == 2 + r)  # type: ignore[misc]
        processor.permits.release(2)
        assert wait_until(lambda: broker.depth(queue) == 0)
    finally:
        gate.close()
    assert processor.peak == {"org-A": 1, "org-B": 1}
    assert frozenset({"org-A", "org-B"}) in processor.together, "both tenants ran at once"


# -- a handler blocking the loop ------------------------------------------------------------------
class BlocksTheLoop(TenantProcessor):
    """org-A's handler blocks its loop thread (the mistake); org-B's awaits like it should."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.blocking = threading.Event()
        self.unblock = threading.Event()
        self.handled: list[str] = []

    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if ctx.tenant == ORG_A:
            self.blocking.set()
            self.unblock.wait(30)  # a blocking call on the loop: what the rule forbids
        await asyncio.sleep(0)
        self.handled.append(ctx.tenant.value)


def test_a_handler_blocking_the_loop_does_not_stall_other_tenants_past_the_stall_limit(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = BlocksTheLoop(queue)
    with capture_logs() as logs:
        runner = runners(processor, tenants=[ORG_A, ORG_B], workers=2, stall_s=0.2)
        try:
            send(transport, queue, ORG_A, {})
            assert processor.blocking.wait(10)
            send(transport, queue, ORG_B, {})
            assert wait_until(lambda: processor.handled == ["org-B"]), "org-B ran on a new loop"
        finally:
            processor.unblock.set()
        assert wait_until(lambda: sorted(processor.handled) == ["org-A", "org-B"])
        assert wait_until(lambda: broker.depth(queue) == 0)
        # The blocked loop finished what it held and closed itself; one loop runs.
        assert wait_until(lambda: len(loop_threads()) == 1)
        assert runner.stop(grace_s=5)
    (blocked, *_) = [e for e in logs if e["event"] == "event_loop_blocked"]
    assert blocked["log_level"] == "critical"
    assert "self.unblock.wait(30)" in blocked["stack"], "the stack names the blocking call"


# -- shutdown -------------------------------------------------------------------------------------
def test_stop_waits_for_a_running_async_handler_within_the_grace_period(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = Parked(queue)
    runner = runners(processor, workers=1)
    send(transport, queue, ORG_A, {})
    assert processor.started.wait(10)
    stopped: list[bool] = []
    stopping = threading.Thread(target=lambda: stopped.append(runner.stop(grace_s=30)))
    stopping.start()
    try:
        assert not wait_until(lambda: bool(stopped), timeout=0.3), "stop waits for the handler"
    finally:
        processor.release()
    stopping.join(10)
    assert stopped == [True]
    assert not processor.cancelled.is_set()
    assert broker.depth(queue + ".out") == 1
    assert broker.depth(queue) == 0, "acknowledged"
    assert loop_threads() == [], "the loop stopped and closed with the runner"


def test_stop_past_the_grace_period_cancels_the_handler_and_retries_it_with_its_attempt_counted(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, runners: Any
) -> None:
    queue = unique_queue("aio")
    processor = Parked(queue)
    runner = runners(processor, workers=1)
    message_id = send(transport, queue, ORG_A, {})
    assert processor.started.wait(10)
    with capture_logs() as logs:
        assert runner.stop(grace_s=0.2), "cancelled and settled: nothing left abandoned"
    assert processor.cancelled.is_set()
    (again,) = broker.messages(queue)
    assert again.properties[ATTEMPT_PROPERTY] == "2", "the retry counts the cancelled attempt"
    assert broker.messages(queue + ".out") == []
    (record,) = store.failures(tenant=ORG_A, message_id=message_id)
    assert (record.attempt, record.outcome) == (1, FailureOutcome.RETRY)
    assert record.error_type == "boost_tenancy.errors.HandlerCancelledError"
    assert [e["count"] for e in logs if e["event"] == "async_handlers_cancelled"] == [1]
    assert loop_threads() == []


def test_a_stopped_runner_leaves_no_loop_thread_behind(
    broker: InMemoryBroker, transport: InMemoryTransport, runners: Any
) -> None:
    queue = unique_queue("aio")
    runner = runners(AsyncEcho(queue))
    assert len(loop_threads()) == 1
    assert runner.stop(grace_s=5)
    assert loop_threads() == []
