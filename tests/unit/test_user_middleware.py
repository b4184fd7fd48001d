"""Users add middleware in three places, each in its place in the chain: a processor's own
(TenantProcessor.middleware), run_processor's and the CLI's (--middleware module:factory);
outermost first, the runner's outside the processor's, the retry middleware innermost. What
cannot be a middleware is refused with its name before anything runs."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from boost_tenancy import (
    AsyncMiddleware,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.cli import build_parser
from boost_tenancy.cli import messaging as cli_messaging
from boost_tenancy.cli.messaging import load_middleware
from boost_tenancy.errors import ConfigError, TransientError
from boost_tenancy.processing.aio import AsyncHandler
from boost_tenancy.processing.middleware import Handler
from boost_tenancy.processing.outcomes import Outcome
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until

TENANT = TenantId("org-mw")
SEEN: list[str] = []
"""What the pieces saw, in order: '<name> <outcome type>' once each returns."""


class Named:
    """A plain middleware that records its name and the outcome of the rest of the chain."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: Handler
    ) -> Outcome:
        outcome = call_next(message, ctx)
        SEEN.append(f"{self.name} {type(outcome).__name__}")
        return outcome


class FailsOnce(TenantProcessor):
    """Raises a transient error on the first attempt, so the retry middleware turns it into a
    Retry that every piece outside it sees."""

    middleware: ClassVar[tuple[object, ...]] = (Named("processor"),)
    retry_policy = RetryPolicy(max_attempts=3, base_delay_ms=1, max_delay_ms=1)

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if message.attempt == 1:
            raise TransientError("first attempt")
        SEEN.append("handled")


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    SEEN.clear()
    yield InMemoryBroker()


@contextmanager
def one_message_through(
    broker: InMemoryBroker, tmp_path: Path, middleware: list[Any]
) -> Iterator[str]:
    """A runner of FailsOnce with the runner's middleware given, and one message sent to it;
    yields its queue, and stops the runner when the block ends."""
    queue = unique_queue("mw")
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    runner = ProcessorRunner(
        FailsOnce(queue),
        InMemoryTransport(broker),
        [TENANT],
        error_store=store,
        settings=RunnerSettings(workers=1, prefetch=1),
        middleware=middleware,
    )
    runner.start()
    try:
        sender = InMemoryTransport(broker)
        sender.connect()
        TenantProducer(sender).send(queue, TENANT, {"n": 1})
        yield queue
    finally:
        runner.stop(grace_s=5)
        store.close()


def test_the_runners_middleware_wraps_the_processors_which_wraps_the_retries(
    broker: InMemoryBroker, tmp_path: Path
) -> None:
    with one_message_through(broker, tmp_path, [Named("runner")]):
        assert wait_until(lambda: "handled" in SEEN)
        assert wait_until(lambda: len(SEEN) == 5)
    # Attempt 1: the retry middleware made the Retry both pieces saw; attempt 2 was handled.
    assert SEEN == ["processor Retry", "runner Retry", "handled", "processor Ack", "runner Ack"]


def forgets_to_return(message: IncomingMessage, ctx: HandlerContext, call_next: Handler) -> None:
    call_next(message, ctx)


def test_a_middleware_that_returns_no_outcome_is_named_on_the_dead_letter(
    broker: InMemoryBroker, tmp_path: Path
) -> None:
    """The handler ran; what the chain returned cannot be carried out. The dead letter said
    "NoneType needs the subscription's tenant", which the tenant had."""
    with one_message_through(broker, tmp_path, [forgets_to_return]) as queue:
        dead = f"DLQ.tenant.{TENANT.value}.{queue}"
        assert wait_until(lambda: broker.depth(dead) == 1)
    [message] = broker.messages(dead)
    assert "returned NoneType, not an outcome" in message.properties["boostError"]
    assert "return what call_next(message, ctx) returned" in message.properties["boostError"]


class NotAMiddleware(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("cmd.mw.refused",)
    middleware: ClassVar[tuple[object, ...]] = ("audit",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        pass


class AsyncDefMiddleware:
    async def __call__(self, message: IncomingMessage, ctx: HandlerContext, call_next: Any) -> Any:
        return await call_next(message, ctx)


class UndeclaredAsync(NotAMiddleware):
    middleware: ClassVar[tuple[object, ...]] = (AsyncDefMiddleware(),)


class AClass(NotAMiddleware):
    middleware: ClassVar[tuple[object, ...]] = (Named,)


def test_a_processors_middleware_that_is_none_is_refused_when_the_runner_is_built(
    broker: InMemoryBroker, tmp_path: Path
) -> None:
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    with pytest.raises(ConfigError, match=r"NotAMiddleware\.middleware: .* is a str, not a"):
        ProcessorRunner(NotAMiddleware(), InMemoryTransport(broker), [TENANT], error_store=store)
    with pytest.raises(ConfigError, match="AsyncDefMiddleware is an async def"):
        ProcessorRunner(UndeclaredAsync(), InMemoryTransport(broker), [TENANT], error_store=store)
    with pytest.raises(ConfigError, match="Named is a class; give an instance of it"):
        ProcessorRunner(AClass(), InMemoryTransport(broker), [TENANT], error_store=store)
    store.close()


def test_the_runners_middleware_that_is_none_is_refused_when_it_is_built(
    broker: InMemoryBroker, tmp_path: Path
) -> None:
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    for given, error in ((42, "42 is a int, not a middleware"), (Named, "Named is a class")):
        with pytest.raises(ConfigError, match=error):
            ProcessorRunner(
                FailsOnce("cmd.mw.runner"),
                InMemoryTransport(broker),
                [TENANT],
                error_store=store,
                middleware=[given],  # type: ignore[list-item]
            )
    store.close()


# -- the command line: --middleware module:factory ---------------------------------------------
class Audit(AsyncMiddleware):
    async def __call__(
        self, message: IncomingMessage, ctx: HandlerContext, call_next: AsyncHandler
    ) -> Outcome:
        return await call_next(message, ctx)


def build_named() -> Named:
    return Named("cli")


def needs_an_argument(name: str) -> Named:
    return Named(name)


def builds_nothing_callable() -> int:
    return 3


def fails_to_build() -> Named:
    raise RuntimeError("no audit sink")


NOT_CALLABLE = 3


def test_load_middleware_builds_a_class_or_a_factory() -> None:
    assert isinstance(load_middleware(f"{__name__}:Audit"), Audit)
    built = load_middleware(f"{__name__}:build_named")
    assert isinstance(built, Named) and built.name == "cli"


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("NOT_CALLABLE", "is a int, not a factory"),
        ("needs_an_argument", "must be callable without arguments"),
        ("builds_nothing_callable", "built something else: middleware 3 is a int"),
        ("fails_to_build", "failed to build the middleware: RuntimeError: no audit sink"),
        ("AsyncDefMiddleware", "AsyncDefMiddleware is an async def"),
        ("missing", "has no 'missing'"),
    ],
)
def test_load_middleware_refuses_what_builds_no_middleware_naming_it(name: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load_middleware(f"{__name__}:{name}")


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("def f(:\n", r"SyntaxError: .* at .*broken_\w+\.py:1$"),
        ("x = 1\nundefined_name\n", r"NameError: name 'undefined_name' is not defined at .*:2$"),
    ],
    ids=["syntax", "raises"],
)
def test_a_module_that_fails_as_it_is_imported_is_named_with_the_error_and_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, error: str
) -> None:
    """Not a traceback through the command's own code: the error and where it is."""
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"cannot import middleware module '{name}': {error}"):
        load_middleware(f"{name}:audit")


def test_load_middleware_refuses_a_spec_without_a_colon() -> None:
    with pytest.raises(ConfigError, match="middleware must be given as module:ClassName"):
        load_middleware("audit")


def test_run_hands_every_middleware_to_run_processor_outermost_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given: dict[str, Any] = {}

    def run_processor(*args: Any, middleware: Any = (), **kwargs: Any) -> int:
        given["middleware"] = list(middleware)
        return 0

    monkeypatch.setattr(cli_messaging, "run_processor", run_processor)
    args = build_parser().parse_args(
        [
            "run",
            "tests.unit.test_cli_rough_edges:Plain",
            "--tenant",
            "org-a",
            "--middleware",
            f"{__name__}:build_named",
            "--middleware",
            f"{__name__}:Audit",
        ]
    )
    assert isinstance(args, argparse.Namespace)
    assert cli_messaging.run(args, settings=None) == 0  # type: ignore[arg-type]
    first, second = given["middleware"]
    assert isinstance(first, Named) and isinstance(second, Audit)
