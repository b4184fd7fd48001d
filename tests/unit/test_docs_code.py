"""Every Python block of the user guide runs: README.md and docs/*.md, each page's blocks in order
in one namespace, as a reader pastes them one after the other into one session.

`# file:` blocks are the getting-started project's files; tests/integration/test_getting_started.py
builds that project from them and runs its tests. What a block takes from its page's text is
given here (PRELUDE: a connected in-memory transport, an error store, a processor and its tenants),
on the in-memory broker; the few calls that serve until a signal (`runner.run()`,
`run_processor`) start the runner, let it take one message and stop it; the metrics port the
page names becomes a free one. Some blocks are then checked for what the page says they do.
"""

from __future__ import annotations

import asyncio
import re
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.processing.aio import AnyMiddleware
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import wait_until
from tests.docs_pages import FILE_MARK, PAGES
from tests.packaging_support import REPO_ROOT

EXAMPLE_QUEUE = "docs.example"
REWRITES = (("port=9100", "port=0"),)
"""What a block says that the test must change: a fixed port may be taken on a test machine."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text[: match.start()].count("\n") + 2, match.group(1))
        for match in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
        if not match.group(1).startswith(FILE_MARK)
    ]


PAGES_WITH_CODE = [page for page in PAGES if python_blocks(page)]


class Example(TenantProcessor):
    """The `processor` a page's fragment runs: it records what it handled."""

    queues: ClassVar[tuple[str, ...]] = (EXAMPLE_QUEUE,)

    def __init__(self) -> None:
        self.handled: list[Any] = []

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        self.handled.append(message.data)


def serve_one(runner: ProcessorRunner, broker: InMemoryBroker, processor: Example) -> None:
    """What `runner.run()` does in a page, until its first message: started, one message
    handled, stopped."""
    runner.start()
    try:
        sender = InMemoryTransport(broker)
        sender.connect()
        TenantProducer(sender).send(EXAMPLE_QUEUE, "acme", {"n": len(processor.handled)})
        sender.close()
        before = len(processor.handled)
        assert wait_until(lambda: len(processor.handled) > before, timeout=10)
    finally:
        assert runner.stop(grace_s=5)


@pytest.fixture
def prelude(
    broker: InMemoryBroker, store: ErrorStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    transport = InMemoryTransport(broker)
    transport.connect()
    processor = Example()
    tenants = [TenantId("acme")]

    def run(self: ProcessorRunner) -> int:
        serve_one(self, broker, processor)
        return 0

    monkeypatch.setattr(ProcessorRunner, "run", run)

    def run_processor(
        processor: Example,
        tenants: Sequence[TenantId],
        settings: object,
        *,
        middleware: Sequence[AnyMiddleware] = (),
    ) -> int:
        runner = ProcessorRunner(
            processor,
            InMemoryTransport(broker),
            tenants,
            error_store=store,
            middleware=middleware,
        )
        serve_one(runner, broker, processor)
        return 0

    # A module of its own, as a pasted session has: dataclasses look their module up.
    module = types.ModuleType("docs_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    names: dict[str, Any] = module.__dict__
    names.update(
        {
            "broker": broker,
            "transport": transport,
            "store": store,
            "processor": processor,
            "tenants": tenants,
            "queues": list(Example.queues),
            "routing": DEFAULT_ROUTING,
            "settings": None,
            "run_processor": run_processor,
            "extract": lambda document: f"text of {document}",
        }
    )
    yield names
    transport.close()


def start_quotes(names: dict[str, Any]) -> Callable[[], None]:
    """The page's Quotes processor, running for the tenant its requester asks."""
    runner = ProcessorRunner(
        names["Quotes"](),
        InMemoryTransport(names["broker"]),
        ["acme"],
        error_store=names["store"],
    )
    runner.start()

    def stop() -> None:
        assert runner.stop(grace_s=5)

    return stop


BEFORE: dict[str, Callable[[dict[str, Any]], Callable[[], None]]] = {
    "TenantRequester(transport": start_quotes,
}
"""A block holding the key runs with what the function starts; what it returns stops it."""


def check_request_processing(names: dict[str, Any]) -> None:
    asyncio.run(names["request_processing"](names["transport"]))
    queue = names["routing"].physical("cmd.document.process", TenantId("org-acme"))
    sent = names["broker"].messages(queue)
    assert [m.properties["tenantUUID"] for m in sent] == ["org-acme", "org-acme"]


def check_reply(names: dict[str, Any]) -> None:
    assert names["reply"].data == {"sku": "A-1", "price": 12.5, "tenantUUID": "acme"}


def check_routing(names: dict[str, Any]) -> None:
    routing: Routing = names["routing"]
    assert routing.physical("evt.document.text.extracted", TenantId("acme")) == (
        "evt.document.text.extracted"
    )


AFTER: dict[str, Callable[[dict[str, Any]], None]] = {
    "async def request_processing": check_request_processing,
    "reply = requester.request": check_reply,
    'overrides={"evt.document.text.extracted"': check_routing,
}
"""A block holding the key is checked for what its page says it does."""


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda page: page.name)
def test_every_python_block_of_the_page_runs(page: Path, prelude: dict[str, Any]) -> None:
    names = prelude
    checked = 0
    for block in python_blocks(page):
        code = block.code
        for said, run_as in REWRITES:
            code = code.replace(said, run_as)
        stops = [start(names) for key, start in BEFORE.items() if key in code]
        try:
            exec(compile(code, block.where, "exec"), names)  # the page's own code
        except Exception as exc:
            pytest.fail(f"{block.where}: the block fails: {type(exc).__name__}: {exc}")
        finally:
            for stop in stops:
                stop()
        for key, check in AFTER.items():
            if key in code:
                check(names)
                checked += 1
    assert checked == sum(key in b.code for b in python_blocks(page) for key in AFTER)


def test_the_blocks_are_found() -> None:
    """The test above reads every Python block: a page whose fences it misses would pass."""
    blocks = [block for page in PAGES for block in python_blocks(page)]
    assert len(blocks) >= 15
    fenced = sum(page.read_text().count("```python") for page in PAGES)
    files = sum(page.read_text().count(f"```python\n{FILE_MARK}") for page in PAGES)
    assert len(blocks) == fenced - files
