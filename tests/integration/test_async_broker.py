"""Async handlers and the async producer against the real broker: sent with AsyncTenantProducer,
handled on the runner's event loop, a failing handler retried and dead-lettered with its
attempts counted, and a handler still running at shutdown cancelled and retried."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    AsyncTenantProducer,
    DispatchSettings,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import ATTEMPT_PROPERTY, MESSAGE_ID_PROPERTY
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.resilience.records import FailureOutcome
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.async_processors import AsyncEcho, Parked
from tests.conftest import unique_queue, wait_until
from tests.integration.worker_support import read_queue

pytestmark = pytest.mark.broker

ORG_A = TenantId("org-A")
FAST = RetryPolicy(max_attempts=3, base_delay_ms=50, max_delay_ms=50, jitter=0.0)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteErrorStore]:
    opened = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    yield opened
    opened.close()


def own(queue: str) -> str:
    return DEFAULT_ROUTING.physical(queue, ORG_A)


def send_async(settings: StompSettings, queue: str, bodies: list[dict[str, object]]) -> list[str]:
    """Sends with the async producer, each confirmed by the broker before its await returns."""
    transport = StompTransport(settings)
    transport.connect()

    async def scenario() -> list[str]:
        async with AsyncTenantProducer(TenantProducer(transport)) as producer:
            first = await producer.send(queue, ORG_A, bodies[0])
            async with producer.batch() as batch:
                rest = [await batch.send(queue, ORG_A, body) for body in bodies[1:]]
            return [first.message_id, *(m.message_id for m in rest)]

    try:
        return asyncio.run(scenario())
    finally:
        transport.close()


def started_runner(
    processor: TenantProcessor, settings: StompSettings, store: SQLiteErrorStore
) -> ProcessorRunner:
    runner = ProcessorRunner(
        processor,
        StompTransport(settings),
        [ORG_A],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=5, dispatch=DispatchSettings(retry=FAST)),
        route_shared=False,
        redrive_parked=False,
    )
    runner.start()
    return runner


def test_async_handlers_handle_what_the_async_producer_sent(
    stomp_settings: StompSettings, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("aio")
    processor = AsyncEcho(queue)
    runner = started_runner(processor, stomp_settings, store)
    try:
        sent = send_async(stomp_settings, queue, [{"n": n} for n in range(4)])
        assert wait_until(lambda: sum(processor.attempts.values()) == 4, timeout=20)
    finally:
        assert runner.stop(grace_s=10)
    outputs = read_queue(stomp_settings, own(queue + ".out"), tenant="org-A", expect=4)
    assert sorted(json.loads(str(d.body))["n"] for d in outputs) == [0, 1, 2, 3]
    assert sorted(processor.attempts) == sorted(sent)
    assert set(processor.on_loop) == {True}
    assert read_queue(stomp_settings, own(queue), tenant="org-A", expect=0, quiet_s=0.5) == []


def test_a_failing_async_handler_is_retried_then_dead_lettered_with_its_attempts_counted(
    stomp_settings: StompSettings, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("aio")
    processor = AsyncEcho(queue)
    runner = started_runner(processor, stomp_settings, store)
    try:
        (message_id,) = send_async(stomp_settings, queue, [{"fail": True}])
        assert wait_until(
            lambda: len(store.failures(tenant=ORG_A, message_id=message_id)) == 3, timeout=30
        )
    finally:
        assert runner.stop(grace_s=10)
    records = store.failures(tenant=ORG_A, message_id=message_id)
    assert [(r.attempt, r.outcome) for r in records] == [
        (1, FailureOutcome.RETRY),
        (2, FailureOutcome.RETRY),
        (3, FailureOutcome.DEAD_LETTER),
    ]
    assert processor.attempts[message_id] == 3
    (dead,) = read_queue(stomp_settings, dead_letter_queue(own(queue)), tenant="org-A", expect=1)
    assert dead.properties[MESSAGE_ID_PROPERTY] == message_id
    assert read_queue(stomp_settings, own(queue + ".out"), tenant="org-A", expect=0) == []


def test_an_async_handler_running_at_shutdown_is_cancelled_and_retried_with_its_attempt_counted(
    stomp_settings: StompSettings, store: SQLiteErrorStore
) -> None:
    queue = unique_queue("aio")
    processor = Parked(queue)
    runner = started_runner(processor, stomp_settings, store)
    try:
        (message_id,) = send_async(stomp_settings, queue, [{"n": 1}])
        assert processor.started.wait(20)
    finally:
        assert runner.stop(grace_s=0.2), "cancelled and settled, nothing abandoned"
    assert processor.cancelled.is_set()
    (again,) = read_queue(stomp_settings, own(queue), tenant="org-A", expect=1)
    assert again.properties[MESSAGE_ID_PROPERTY] == message_id
    assert again.properties[ATTEMPT_PROPERTY] == "2"
    (record,) = store.failures(tenant=ORG_A, message_id=message_id)
    assert (record.attempt, record.outcome) == (1, FailureOutcome.RETRY)
    assert record.error_type == "boost_tenancy.errors.HandlerCancelledError"
    assert read_queue(stomp_settings, own(queue + ".out"), tenant="org-A", expect=0) == []
