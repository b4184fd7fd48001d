"""A processor's dependencies: declared on its class, opened once per runner before on_startup
and the connection, closed once after on_shutdown in the reverse order, whatever kind of factory
made them (plain, generator, async generator, async def, context manager); a value assigned
before the start is used and never closed; a failed start closes what was opened."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import ClassVar

import pytest
import structlog

from boost_tenancy import (
    ConfigError,
    Dependency,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.errors import DependencyNotOpenError, TransportError
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import wait_until

QUEUE = "cmd.dependencies"
EVENTS: list[str] = []
RELEASE = threading.Event()


class Pool:
    """A pool the handlers share: a context manager that records when it opens and closes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.used = 0

    def __enter__(self) -> Pool:
        EVENTS.append(f"open {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True
        EVENTS.append(f"close {self.name}")


def cache() -> Iterator[dict[str, int]]:
    EVENTS.append("open cache")
    yield {"hits": 0}
    EVENTS.append("close cache")


class Plain(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)
    db: Dependency[Pool] = Dependency(lambda: Pool("db"))
    cache: Dependency[dict[str, int]] = Dependency(cache)
    settings: Dependency[str] = Dependency(lambda: "plain value")

    def on_startup(self) -> None:
        EVENTS.append(f"startup with {self.db.name}")

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        assert not self.db.closed
        self.db.used += 1
        self.cache["hits"] += 1

    def on_shutdown(self) -> None:
        EVENTS.append(f"shutdown with {self.db.name}")


@pytest.fixture(autouse=True)
def _events() -> Iterator[None]:
    EVENTS.clear()
    yield
    EVENTS.clear()


def runner_of(
    processor: TenantProcessor, broker: InMemoryBroker, store: ErrorStore
) -> ProcessorRunner:
    """A runner of processor for org-a on the in-memory broker."""
    return ProcessorRunner(processor, InMemoryTransport(broker), ["org-a"], error_store=store)


def send(broker: InMemoryBroker, count: int) -> None:
    transport = InMemoryTransport(broker)
    transport.connect()
    producer = TenantProducer(transport)
    for n in range(count):
        producer.send(QUEUE, "org-a", {"n": n})
    transport.close()


def test_opened_once_before_on_startup_and_closed_after_on_shutdown_in_reverse_order(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    processor = Plain()
    runner = runner_of(processor, broker, store)
    runner.start()
    db = processor.db
    send(broker, 3)
    assert wait_until(lambda: db.used == 3)
    assert processor.cache == {"hits": 3}
    assert processor.settings == "plain value"
    assert runner.stop(grace_s=5)
    assert EVENTS == [
        "open db",
        "open cache",
        "startup with db",
        "shutdown with db",
        "close cache",
        "close db",
    ]
    assert db.closed


def test_read_before_the_start_or_after_the_stop_names_the_attribute(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    processor = Plain()
    with pytest.raises(ConfigError, match=r"Plain\.db is opened when a runner"):
        _ = processor.db
    runner = runner_of(processor, broker, store)
    runner.start()
    assert runner.stop(grace_s=5)
    with pytest.raises(ConfigError, match=r"Plain\.cache is opened when a runner"):
        _ = processor.cache
    assert isinstance(Plain.db, Dependency)


def test_a_value_assigned_before_the_start_is_used_and_never_closed(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    processor = Plain()
    fake = Pool("fake")
    processor.db = fake  # what a test does with a fake: used as it is, never closed
    runner = runner_of(processor, broker, store)
    runner.start()
    send(broker, 2)
    assert wait_until(lambda: fake.used == 2)
    assert runner.stop(grace_s=5)
    assert "open fake" not in EVENTS and "open db" not in EVENTS
    assert not fake.closed
    assert processor.db is fake


class Failing(Plain):
    broken: Dependency[object] = Dependency(lambda: 1 / 0)


def test_a_failing_factory_stops_the_start_and_closes_what_was_opened(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    transport = InMemoryTransport(broker)
    runner = ProcessorRunner(Failing(), transport, ["org-a"], error_store=store)
    with pytest.raises(ZeroDivisionError):
        runner.start()
    assert EVENTS == ["open db", "open cache", "close cache", "close db"]
    assert not transport.is_connected


def test_a_failed_connection_closes_the_dependencies(
    broker: InMemoryBroker, store: ErrorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = InMemoryTransport(broker)

    def refuse() -> None:
        raise TransportError("refused")

    monkeypatch.setattr(transport, "connect", refuse)
    runner = ProcessorRunner(Plain(), transport, ["org-a"], error_store=store)
    with pytest.raises(TransportError):
        runner.start()
    assert EVENTS == [
        "open db",
        "open cache",
        "startup with db",
        "shutdown with db",
        "close cache",
        "close db",
    ]


class Exploding:
    def __enter__(self) -> Exploding:
        return self

    def __exit__(self, *exc: object) -> None:
        raise RuntimeError("cannot close")


class ClosingFails(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)
    first: Dependency[Pool] = Dependency(lambda: Pool("first"))
    second: Dependency[object] = Dependency(Exploding)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        pass


def test_a_failing_close_is_logged_and_the_others_still_close(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    processor = ClosingFails()
    runner = runner_of(processor, broker, store)
    runner.start()
    first = processor.first
    with structlog.testing.capture_logs() as logs:
        assert runner.stop(grace_s=5)
    assert first.closed
    (failed,) = [e for e in logs if e["event"] == "dependency_close_failed"]
    assert failed["dependency"] == "second"
    assert failed["error"] == "cannot close"


def test_hasattr_answers_before_the_start(broker: InMemoryBroker, store: ErrorStore) -> None:
    """Read while not open, a dependency is a ConfigError and an AttributeError: introspection
    (hasattr, mocks) answers instead of raising."""
    processor = Plain()
    assert not hasattr(processor, "db")
    with pytest.raises(DependencyNotOpenError):
        _ = processor.cache


def test_two_runners_of_one_processor_are_refused(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """The first runner's stop would close what the second's handlers use."""
    processor = Plain()
    first = runner_of(processor, broker, store)
    first.start()
    second = ProcessorRunner(processor, InMemoryTransport(broker), ["org-b"], error_store=store)
    with pytest.raises(ConfigError, match="another runner has its dependencies open"):
        second.start()
    assert not processor.db.closed  # the refused start closed nothing of the first's
    assert first.stop(grace_s=5)
    again = runner_of(processor, broker, store)
    again.start()  # once the first stopped, another runner may open them
    assert again.stop(grace_s=5)


class LatePool(Pool):
    """Closing it lets the late handler go on, and gives it time to settle before the stop goes
    on: what a handler finishing just then would do."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__("late")
        self.release = release

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.release.set()
        time.sleep(0.3)


class Late(TenantProcessor):
    """A handler that outlives the grace period, then uses its dependency."""

    queues: ClassVar[tuple[str, ...]] = (QUEUE,)
    db: Dependency[Pool] = Dependency(lambda: LatePool(RELEASE))

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = RELEASE
        self.outcome: list[str] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.entered.set()
        self.release.wait(10)
        try:
            self.db.used += 1
        except DependencyNotOpenError:
            self.outcome.append("closed")
            raise


def test_a_handler_past_the_grace_period_leaves_its_message_to_the_broker(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """The connection closes before the dependencies do: the late handler's failure cannot be
    settled as a retry or a dead letter, and the broker redelivers the message uncounted."""
    RELEASE.clear()
    processor = Late()
    runner = runner_of(processor, broker, store)
    runner.start()
    send(broker, 1)
    assert processor.entered.wait(5)
    assert not runner.stop(grace_s=0.2)  # the pool's close released the handler meanwhile
    assert wait_until(lambda: processor.outcome == ["closed"])
    (back,) = broker.messages(f"tenant.org-a.{QUEUE}")
    assert back.properties["boostAttempt"] == "1"
    assert broker.messages(f"DLQ.tenant.org-a.{QUEUE}") == []
    assert store.failures(tenant=TenantId("org-a")) == []


class BothKinds:
    """A context manager of both kinds, as some clients are."""

    def __init__(self) -> None:
        self.entered = ""

    def __enter__(self) -> BothKinds:
        self.entered = "sync"
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    async def __aenter__(self) -> BothKinds:
        self.entered = "async"
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass


async def both_kinds_async() -> BothKinds:
    return BothKinds()


class Both(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)
    plain: Dependency[BothKinds] = Dependency(BothKinds)
    from_async: Dependency[BothKinds] = Dependency(both_kinds_async)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        pass


def test_what_is_both_kinds_is_entered_as_its_factory_is_declared(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    """The async factory gives the runner an event loop; the plain one is entered sync anyway."""
    processor = Both()
    runner = runner_of(processor, broker, store)
    runner.start()
    try:
        assert processor.plain.entered == "sync"
        assert processor.from_async.entered == "async"
    finally:
        assert runner.stop(grace_s=5)


class AsyncClient:
    """An async context manager, as httpx.AsyncClient is: bound to the loop it opened on."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed_on: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> AsyncClient:
        self.loop = asyncio.get_running_loop()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed_on = asyncio.get_running_loop()


async def token_pool() -> AsyncIterator[list[str]]:
    EVENTS.append(f"open tokens on {threading.current_thread().name != 'MainThread'}")
    yield ["t"]
    await asyncio.sleep(0)
    EVENTS.append("close tokens")


async def async_settings() -> str:
    await asyncio.sleep(0)
    return "async value"


class Async(TenantProcessor):
    """A plain handler: the async dependencies alone make the runner start its event loop."""

    queues: ClassVar[tuple[str, ...]] = (QUEUE,)
    client: Dependency[AsyncClient] = Dependency(AsyncClient)
    tokens: Dependency[list[str]] = Dependency(token_pool)
    settings: Dependency[str] = Dependency(async_settings)

    def __init__(self) -> None:
        self.seen: list[str] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.seen.append(self.settings)


class AsyncHandler(Async):
    async def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:  # type: ignore[override]
        assert asyncio.get_running_loop() is self.client.loop
        self.seen.append(self.tokens[0])


@pytest.mark.parametrize("kind", [Async, AsyncHandler])
def test_async_factories_open_and_close_on_the_runners_event_loop(
    broker: InMemoryBroker, store: ErrorStore, kind: type[Async]
) -> None:
    processor = kind()
    runner = runner_of(processor, broker, store)
    runner.start()
    client = processor.client
    assert client.loop is not None
    send(broker, 2)
    assert wait_until(lambda: len(processor.seen) == 2)
    assert runner.stop(grace_s=5)
    assert client.closed_on is client.loop
    assert EVENTS == ["open tokens on True", "close tokens"]
    assert set(processor.seen) <= {"async value", "t"}


class AsyncFromPlainDef(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = (QUEUE,)
    client: Dependency[AsyncClient] = Dependency(AsyncClient)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        pass


def test_an_async_context_from_a_plain_factory_without_an_event_loop_is_refused(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    runner = runner_of(AsyncFromPlainDef(), broker, store)
    with pytest.raises(ConfigError, match=r"AsyncFromPlainDef\.client: .*declare the factory"):
        runner.start()


def test_a_factory_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="factory called with no arguments"):
        Dependency("not callable")  # type: ignore[call-overload]


class Replaced(Plain):
    db = None  # type: ignore[assignment]  # a subclass that does without it

    def on_startup(self) -> None:
        pass

    def on_shutdown(self) -> None:
        pass


def test_a_subclass_may_replace_a_dependency(broker: InMemoryBroker, store: ErrorStore) -> None:
    processor = Replaced()
    runner = runner_of(processor, broker, store)
    runner.start()
    assert runner.stop(grace_s=5)
    assert "open db" not in EVENTS
    assert "open cache" in EVENTS
