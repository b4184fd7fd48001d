"""The backlog the queue-statistics tests count, built the same way on the in-memory broker and on
the real one: a runner dead-letters one message and quarantines another, then holds HELD
messages unacknowledged in its handlers while WAITING more wait behind them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.error_store import FailureOutcome, SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.base import Transport
from tests.conftest import recorded, wait_until

HELD: Final = 3
"""Messages a handler holds unacknowledged: the runner's prefetch, so no more are delivered."""
WAITING: Final = 4
"""Messages sent after the held ones: they wait on the queue."""
OTHER: Final = TenantId("org-other")
"""The tenant the quarantined message claims."""


class HoldingProcessor(TenantProcessor):
    """Dead-letters kind=poison, holds kind=hold until released, acknowledges the rest."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._holding = 0

    @property
    def holding(self) -> int:
        with self._lock:
            return self._holding

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        kind = message.data["kind"]
        if kind == "poison":
            raise PermanentError("poison for the statistics test")
        if kind == "hold":
            with self._lock:
                self._holding += 1
            self.release.wait(60)


@contextmanager
def backlog(
    runner_transport: Transport,
    sender: Transport,
    queue: str,
    tenant: TenantId,
    tmp_path: Path,
) -> Iterator[HoldingProcessor]:
    """While inside: tenant's routed queue holds WAITING waiting and HELD in-flight messages,
    its dead-letter queue one message and its quarantine one. sender must be connected."""
    store = SQLiteErrorStore(tmp_path / "stats-errors.sqlite3")
    processor = HoldingProcessor(queue)
    runner = ProcessorRunner(
        processor,
        runner_transport,
        [tenant],
        error_store=store,
        settings=RunnerSettings(workers=HELD, prefetch=HELD),
        redrive_parked=False,
        route_shared=False,
    )
    runner.start()
    try:
        producer = TenantProducer(sender)
        producer.send(queue, tenant, {"kind": "poison"})
        # A message naming another tenant on this tenant's own queue: quarantined, not handled.
        sender.send(
            DEFAULT_ROUTING.physical(queue, tenant),
            WireMessage(body=json.dumps({"kind": "plain"}), properties={"tenantUUID": OTHER.value}),
        )
        # Recorded once the broker took the dead letter and the quarantined copy; the
        # quarantine is recorded under the tenant the message claims.
        recorded(store, 1, tenant=tenant, outcome=FailureOutcome.DEAD_LETTER)
        recorded(store, 1, tenant=OTHER, outcome=FailureOutcome.QUARANTINE)
        for _ in range(HELD):
            producer.send(queue, tenant, {"kind": "hold"})
        for _ in range(WAITING):
            producer.send(queue, tenant, {"kind": "plain"})
        assert wait_until(lambda: processor.holding == HELD, timeout=15), processor.holding
        yield processor
    finally:
        processor.release.set()
        runner.stop(grace_s=10)
        store.close()
