"""AsyncTenantProducer on the in-memory broker: a send or a batch awaits the broker's
confirmation while the event loop keeps running, refusals and failures reach the caller, an
aborted batch stores nothing, and closing waits for the sends under way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from boost_tenancy import AsyncTenantProducer, ConfigError, TenantProducer
from boost_tenancy.errors import MessageTooLargeError, TransportError
from boost_tenancy.quotas import PublishGuard, PublishLimits
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.async_processors import HOLD_S, HeldConfirmations
from tests.conftest import unique_queue


@pytest.fixture
def held(broker: InMemoryBroker) -> Any:
    transport = HeldConfirmations(broker)
    transport.connect()
    yield transport
    transport.release.set()
    transport.close()


async def progress_while_held(transport: HeldConfirmations, pending: asyncio.Task[Any]) -> int:
    """Steps another coroutine takes while pending waits for its held confirmation."""
    await asyncio.to_thread(transport.waiting.wait, HOLD_S)
    steps = 0
    for _ in range(50):
        await asyncio.sleep(0)
        steps += 1
    assert not pending.done(), "the send returned before its confirmation"
    transport.release.set()
    return steps


def own(queue: str, tenant: str) -> str:
    return DEFAULT_ROUTING.physical(queue, tenant)


def test_the_loop_keeps_running_while_a_send_waits_for_its_confirmation(
    broker: InMemoryBroker, held: HeldConfirmations
) -> None:
    queue = unique_queue("async")

    async def scenario() -> tuple[int, str]:
        async with AsyncTenantProducer(TenantProducer(held)) as producer:
            sending = asyncio.create_task(producer.send(queue, "org-A", {"n": 1}))
            steps = await progress_while_held(held, sending)
            message = await sending
            return steps, message.message_id

    steps, message_id = asyncio.run(scenario())
    assert steps == 50
    (stored,) = broker.messages(own(queue, "org-A"))
    assert stored.properties["boostMessageId"] == message_id


def test_a_batch_commit_awaits_its_confirmation_without_blocking_the_loop(
    broker: InMemoryBroker, held: HeldConfirmations
) -> None:
    queue = unique_queue("async")

    async def batch(producer: AsyncTenantProducer) -> int:
        async with producer.batch() as b:
            for n in range(3):
                await b.send(queue, "org-A", {"n": n})
            return len(b)

    async def scenario() -> int:
        async with AsyncTenantProducer(TenantProducer(held)) as producer:
            committing = asyncio.create_task(batch(producer))
            steps = await progress_while_held(held, committing)
            assert await committing == 3
            return steps

    assert asyncio.run(scenario()) == 50
    assert broker.depth(own(queue, "org-A")) == 3


def test_a_batch_whose_block_raises_stores_nothing(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("async")

    async def scenario() -> None:
        async with AsyncTenantProducer(TenantProducer(transport)) as producer:
            with pytest.raises(RuntimeError, match="changed my mind"):
                async with producer.batch(atomic=True) as b:
                    await b.send(queue, "org-A", {"n": 1})
                    raise RuntimeError("changed my mind")

    asyncio.run(scenario())
    assert broker.messages(own(queue, "org-A")) == []


def test_a_refused_send_raises_in_the_awaiting_coroutine_and_sends_nothing(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("async")
    guard = PublishGuard(PublishLimits(max_message_bytes=64))

    async def scenario() -> None:
        async with AsyncTenantProducer(TenantProducer(transport, guard=guard)) as producer:
            with pytest.raises(MessageTooLargeError):
                await producer.send(queue, "org-A", {"text": "x" * 200})

    asyncio.run(scenario())
    assert broker.messages(own(queue, "org-A")) == []


def test_a_failed_confirmation_raises_in_the_awaiting_coroutine(
    broker: InMemoryBroker, held: HeldConfirmations, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tests.async_processors.HOLD_S", 0.01)

    async def scenario() -> None:
        async with AsyncTenantProducer(TenantProducer(held)) as producer:
            with pytest.raises(TransportError, match="never released"):
                await producer.send(unique_queue("async"), "org-A", {"n": 1})

    asyncio.run(scenario())


def test_closing_waits_for_the_send_under_way_and_refuses_new_ones(
    broker: InMemoryBroker, held: HeldConfirmations
) -> None:
    queue = unique_queue("async")

    async def scenario() -> None:
        producer = AsyncTenantProducer(TenantProducer(held), max_threads=1)
        sending = asyncio.create_task(producer.send(queue, "org-A", {"n": 1}))
        await asyncio.to_thread(held.waiting.wait, HOLD_S)
        closing = asyncio.create_task(producer.aclose())
        await asyncio.sleep(0)
        assert not closing.done(), "close waits for the send under way"
        held.release.set()
        await closing
        assert broker.depth(own(queue, "org-A")) == 1, "stored before close returned"
        await sending
        with pytest.raises(ConfigError, match="closed"):
            await producer.send(queue, "org-A", {"n": 2})

    asyncio.run(scenario())
    assert broker.depth(own(queue, "org-A")) == 1


@pytest.mark.parametrize("then", ["ends", "raises", "sends"])
def test_a_batch_open_at_close_still_ends_in_a_commit_or_an_abort(
    broker: InMemoryBroker, transport: InMemoryTransport, then: str
) -> None:
    """aclose() from inside a batch block (or from another task while it is open): the block
    ending commits it, its own error aborts it and is what the caller sees, and a send after
    the close is refused, aborting it; the producer's threads end after the batch."""
    queue = unique_queue("async")
    ended: list[str] = []

    class RecordedSink:
        def __init__(self, sink: Any) -> None:
            self.sink = sink

        def add(self, queue: str, message: Any) -> None:
            self.sink.add(queue, message)

        def commit(self) -> None:
            ended.append("commit")
            self.sink.commit()

        def abort(self) -> None:
            ended.append("abort")
            self.sink.abort()

    class Recording(InMemoryTransport):
        def open_batch(self, *, atomic: bool = True) -> Any:
            return RecordedSink(super().open_batch(atomic=atomic))

    recording = Recording(broker)
    recording.connect()

    async def scenario() -> None:
        producer = AsyncTenantProducer(TenantProducer(recording))
        async with producer.batch(atomic=True) as b:
            await b.send(queue, "org-A", {"n": 1})
            await producer.aclose()
            if then == "raises":
                raise RuntimeError("the block's own error")
            if then == "sends":
                await b.send(queue, "org-A", {"n": 2})
        with pytest.raises(ConfigError, match="closed"):
            async with producer.batch():
                pass

    if then == "ends":
        asyncio.run(scenario())
        assert (ended, broker.depth(own(queue, "org-A"))) == (["commit"], 1)
    else:
        expected = RuntimeError if then == "raises" else ConfigError
        with pytest.raises(expected):
            asyncio.run(scenario())
        assert (ended, broker.depth(own(queue, "org-A"))) == (["abort"], 0)
    recording.close()


def test_max_threads_must_be_positive(transport: InMemoryTransport) -> None:
    with pytest.raises(ConfigError, match="max_threads must be at least 1"):
        AsyncTenantProducer(TenantProducer(transport), max_threads=0)
