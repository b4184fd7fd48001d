"""Every delivery ends settled, whatever its bytes, headers and handler: a property-based suite
on the in-memory transport (tests/hostile.py generates the deliveries; the same generator
drives a bounded run against the real broker in tests/integration/test_poison_broker.py).

Settled means: each message ends in exactly one of its handled output, the dead-letter queue or
the quarantine queue, in the place its body and behaviour call for; nothing is left on the
source queue; every dead letter is in the error store; every worker is alive at the end. On a
shared queue, and on a routed one, where the same deliveries go through the router first.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from boost_tenancy import (
    DispatchSettings,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantId,
)
from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.dispatcher import Dispatcher
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import FailureOutcome, SQLiteErrorStore
from boost_tenancy.routing import Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until
from tests.hostile import (
    MAX_ATTEMPTS,
    TENANTS,
    Ends,
    HostileMessage,
    HostileProcessor,
    hostile_batches,
    output_queue,
)

IMMEDIATE = RetryPolicy(max_attempts=MAX_ATTEMPTS, base_delay_ms=0, max_delay_ms=0, jitter=0.0)
SHARED, ROUTED = Routing(Topology.SHARED), Routing(Topology.ROUTED)


def run_hostile(
    messages: list[HostileMessage], directory: Path, routing: Routing = SHARED
) -> tuple[Ends, list[str]]:
    """Send messages to the shared queue, run a runner for both tenants until the source queues
    are empty, and read back where each ended; returns the ends and any problems seen on the way.
    """
    broker = InMemoryBroker()
    queue = unique_queue("hostile")
    store = SQLiteErrorStore(directory / f"{queue}.sqlite3")
    transport = InMemoryTransport(broker)
    processor = HostileProcessor(queue)
    runner = ProcessorRunner(
        processor,
        transport,
        TENANTS,
        error_store=store,
        settings=RunnerSettings(workers=3, prefetch=4, dispatch=DispatchSettings(retry=IMMEDIATE)),
        redrive_parked=False,
        routing=routing,
    )
    # Where the tenants' messages are stored (the shared queue itself, or each tenant's own).
    sources = {routing.physical(queue, t) for t in TENANTS}
    outputs = {routing.physical(output_queue(queue), t) for t in TENANTS}
    problems: list[str] = []
    try:
        runner.start()
        for message in messages:
            broker.put(queue, message.message)

        def left() -> int:
            return sum(broker.depth(q) for q in {queue, *sources})

        def settled() -> bool:
            ended = sum(
                broker.depth(q)
                for q in (*outputs, *map(dead_letter_queue, sources), *quarantines(sources))
            )
            return left() == 0 and ended >= len(messages)

        if not wait_until(settled, timeout=30):
            problems.append(f"not settled within 30 s: {left()} left on {queue}")
        if not all(worker.is_alive() for worker in runner._workers):
            problems.append("a worker thread died")
    finally:
        clean = runner.stop(grace_s=10)
    if not clean:
        problems.append("stop() found handlers still running")
    ends = Ends()
    ends.add("out", (m.properties for q in outputs for m in broker.messages(q)))
    dead = [m for q in sources for m in broker.messages(dead_letter_queue(q))]
    ends.add("dlq", (m.properties for m in dead))
    ends.add("quarantine", (m.properties for q in quarantines(sources) for m in broker.messages(q)))
    for copy in dead:
        tenant = TenantId.parse(copy.properties["tenantUUID"])
        recorded = store.failures(tenant=tenant, message_id=copy.properties["boostMessageId"])
        if FailureOutcome.DEAD_LETTER not in {r.outcome for r in recorded}:
            problems.append(f"dead letter {copy.properties.get('hostileKey')} not recorded")
        # Decided without a handler, no exception: an undecodable body, or out of attempts.
        traceless = {"MessageDecodeError", "DeliveryLimitExceeded"}
        if not all(r.trace for r in recorded if r.error_type.rpartition(".")[2] not in traceless):
            problems.append(f"a failure of {copy.properties.get('hostileKey')} has no trace")
        if "\x00" in copy.properties.get("boostError", ""):
            problems.append("a NUL went into a header")
    store.close()
    broker.close()
    return ends, problems


@given(messages=hostile_batches())
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_every_hostile_delivery_ends_settled_exactly_once(messages: list[HostileMessage]) -> None:
    # A directory per example: hypothesis runs many examples inside one test call.
    with tempfile.TemporaryDirectory() as directory:
        ends, problems = run_hostile(messages, Path(directory))
    problems += ends.check(messages, exactly_once=True)
    assert not problems, "\n".join(problems)


@given(messages=hostile_batches())
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_every_hostile_delivery_sent_to_a_routed_queue_ends_settled_exactly_once(
    messages: list[HostileMessage],
) -> None:
    """The router copies hostile headers and bodies unchanged; the dispatcher behind it settles
    each in its tenant's own queues, as it does on a shared queue."""
    with tempfile.TemporaryDirectory() as directory:
        ends, problems = run_hostile(messages, Path(directory), ROUTED)
    problems += ends.check(messages, exactly_once=True)
    assert not problems, "\n".join(problems)


def quarantines(sources: set[str]) -> list[str]:
    return [quarantine_queue(q) for q in sources]


class AsyncGeneratorHandle(TenantProcessor):
    queues = ("cmd",)

    async def handle(self, message: object, ctx: object) -> AsyncIterator[None]:  # type: ignore[override]
        yield None


def test_an_async_generator_handle_is_refused_when_the_processor_is_loaded(
    tmp_path: Path,
) -> None:
    """An async def handle runs on the event loop; one that yields would never be iterated."""
    broker = InMemoryBroker()
    store = SQLiteErrorStore(tmp_path / "e.sqlite3")
    try:
        with pytest.raises(ConfigError, match=r"async generator.*async def without yield"):
            Dispatcher(AsyncGeneratorHandle(), InMemoryTransport(broker), store)
        with pytest.raises(ConfigError, match="async generator"):
            ProcessorRunner(
                AsyncGeneratorHandle(), InMemoryTransport(broker), ["org-A"], error_store=store
            )
    finally:
        store.close()
        broker.close()
