"""Running a TenantProcessor on the in-memory broker in a test, until its messages are handled.

What boost_tenancy.testing.pytest_plugin's boost_run fixture gives; usable without pytest too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from boost_tenancy.application.runner import ProcessorRunner
from boost_tenancy.messages import WireMessage
from boost_tenancy.processing.dispatcher import DispatchSettings
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.processing.runner_settings import RunnerSettings
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore, SQLiteErrorStore
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing.memory import InMemoryBroker
from boost_tenancy.testing.transport import InMemoryTransport

FINAL_OUTCOMES = frozenset({"processed", "dead_lettered", "quarantined"})
"""Outcomes after which a message is done with: a retried or deferred one comes back."""

TEST_SETTINGS = RunnerSettings(
    workers=2,
    shutdown_grace_s=5.0,
    dispatch=DispatchSettings(
        retry=RetryPolicy(max_attempts=3, base_delay_ms=10, max_delay_ms=100, jitter=0.0)
    ),
)
"""A test's runner: two workers and retries 10 ms apart, 3 attempts (a processor's own
retry_policy still wins), so a failing message reaches its dead letter in well under a second."""


@dataclass(frozen=True, slots=True)
class Settled:
    """One outcome the runner carried out: whose, on which (logical) queue, and what."""

    tenant: str | None
    queue: str
    outcome: str
    """processed, retried, deferred, dead_lettered or quarantined."""


class OutcomeLog:
    """A DispatchObserver keeping every outcome, for a test to wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._settled: list[Settled] = []

    def on_outcome(self, tenant: TenantId | None, queue: str, outcome: str) -> None:
        with self._cond:
            self._settled.append(Settled(None if tenant is None else tenant.value, queue, outcome))
            self._cond.notify_all()

    @property
    def settled(self) -> list[Settled]:
        with self._cond:
            return list(self._settled)

    def wait_final(self, count: int, timeout_s: float) -> list[Settled]:
        """The final outcomes once there are at least count of them; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                final = [s for s in self._settled if s.outcome in FINAL_OUTCOMES]
                remaining = deadline - time.monotonic()
                if len(final) >= count or remaining <= 0:
                    break
                self._cond.wait(remaining)
            if len(final) < count:
                raise TimeoutError(
                    f"{len(final)} of {count} messages handled within {timeout_s} s; "
                    f"outcomes so far: {[s.outcome for s in self._settled]}"
                )
            return final


class RunningProcessor:
    """A processor running for its tenants on its own connection to an InMemoryBroker.

    Start it with `with` (or start()); wait_handled(n) returns once n messages reached a final
    outcome; what the handler published, dead-lettered or quarantined is read off the broker.
    """

    def __init__(
        self,
        processor: TenantProcessor,
        tenants: Sequence[TenantId | str],
        *,
        broker: InMemoryBroker,
        error_store: ErrorStore,
        settings: RunnerSettings = TEST_SETTINGS,
        routing: Routing = DEFAULT_ROUTING,
    ) -> None:
        self.broker = broker
        self.error_store = error_store
        self.routing = routing
        self.log = OutcomeLog()
        self._stopped: bool | None = None
        self.runner = ProcessorRunner(
            processor,
            InMemoryTransport(broker),
            tenants,
            error_store=error_store,
            settings=settings,
            routing=routing,
            observers=[self.log],
        )

    def start(self) -> RunningProcessor:
        self.runner.start()
        return self

    def stop(self) -> bool:
        """Stop the runner (once; again returns the same); False when a handler was still
        running at the grace deadline."""
        if self._stopped is None:
            self._stopped = self.runner.stop()
        return self._stopped

    def __enter__(self) -> RunningProcessor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def settled(self) -> list[Settled]:
        """Every outcome so far, retries included, in the order they were carried out."""
        return self.log.settled

    def wait_handled(self, count: int = 1, *, timeout_s: float = 10.0) -> list[Settled]:
        """Block until count messages were processed, dead-lettered or quarantined; their
        outcomes. Raises TimeoutError, listing the outcomes so far, when they were not."""
        return self.log.wait_final(count, timeout_s)

    def messages(self, queue: str, tenant: TenantId | str) -> list[WireMessage]:
        """The messages waiting in tenant's queue (what a handler published there, say)."""
        return self.broker.messages(self.routing.physical(queue, tenant))

    def dead_letters(self, queue: str, tenant: TenantId | str) -> list[WireMessage]:
        """The tenant's dead letters of queue."""
        return self.broker.messages(dead_letter_queue(self.routing.physical(queue, tenant)))

    def quarantined(self, queue: str, tenant: TenantId | str) -> list[WireMessage]:
        """What reached the tenant's queue with another tenant's (or no) tenantUUID."""
        return self.broker.messages(quarantine_queue(self.routing.physical(queue, tenant)))


def error_store_in(folder: Path) -> SQLiteErrorStore:
    """A fresh SQLite error store in folder (a test's tmp_path)."""
    return SQLiteErrorStore(folder / "errors.sqlite3")


__all__ = [
    "FINAL_OUTCOMES",
    "TEST_SETTINGS",
    "OutcomeLog",
    "RunningProcessor",
    "Settled",
    "error_store_in",
]
