"""The runner's lifecycle: run() stops on request, then lets the processor release what it holds."""

from __future__ import annotations

import threading
from pathlib import Path

from boost_tenancy import HandlerContext, IncomingMessage, ProcessorRunner, TenantProcessor
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport


class Holder(TenantProcessor):
    queues = ("lifecycle",)

    def __init__(self) -> None:
        self.closed = threading.Event()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Nothing to do."""

    def close(self) -> None:
        self.closed.set()


def test_run_closes_the_processor_after_stopping(tmp_path: Path) -> None:
    broker = InMemoryBroker()
    processor = Holder()
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        ["org-a"],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
    )
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(runner.run(install_signal_handlers=False))
    )
    thread.start()
    assert not processor.closed.wait(0.3), "not closed while running"
    runner.request_stop()
    thread.join(10)
    broker.close()
    assert codes == [0]
    assert processor.closed.is_set()
