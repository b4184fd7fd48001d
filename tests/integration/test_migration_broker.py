"""The move from the shared topology to per-tenant queues with the system running, on the real
broker, in the order docs/migration.md gives: shared runners handle a continuous stream of two
tenants' messages, routed runners start beside them, the shared runners stop, the toolkit's
producers switch to the routed topology while a Java-like producer keeps sending to the shared
queue. Every message is handled at least once, by its own tenant, none lost (counted by id); the
dead letters from before are moved to the tenants' own dead-letter queues and re-driven there.
"""

from __future__ import annotations

import itertools
import threading
import uuid

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    PermanentError,
    ProcessorRunner,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.ops.dead_letters import DeadLetterAdmin
from boost_tenancy.ops.migration import migrate_dead_letters
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.routing import Topology
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import recorded, unique_queue, wait_until

pytestmark = [pytest.mark.broker]

SHARED, ROUTED = Routing(Topology.SHARED), Routing()
DEAD_LETTERS = 3


class Ledger:
    """Every handling, by whichever runner: (runner, subscription tenant, body tenant, id)."""

    def __init__(self) -> None:
        self.handled: list[tuple[str, str, str, str]] = []
        self.failing: set[str] = set()
        self._lock = threading.Lock()

    def add(self, entry: tuple[str, str, str, str]) -> None:
        with self._lock:
            self.handled.append(entry)

    def by(self, runner: str) -> int:
        with self._lock:
            return sum(1 for entry in self.handled if entry[0] == runner)

    def ids(self) -> set[str]:
        with self._lock:
            return {entry[3] for entry in self.handled}

    def entries(self) -> list[tuple[str, str, str, str]]:
        with self._lock:
            return list(self.handled)


class Handler(TenantProcessor):
    def __init__(self, queue: str, ledger: Ledger, runner: str) -> None:
        self.queues = (queue,)
        self._ledger = ledger
        self._runner = runner

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if message.data["n"] in self._ledger.failing:
            raise PermanentError("fails until the migration is done")
        self._ledger.add(
            (self._runner, ctx.tenant.value, message.data["tenantUUID"], message.message_id)
        )


class Stream(threading.Thread):
    """Sends the two tenants' messages in turn until stopped, with the routing it is told."""

    def __init__(self, settings: StompSettings, queue: str, tenants: list[TenantId]) -> None:
        super().__init__(daemon=True)
        self.routing = SHARED
        self.sent: dict[str, str] = {}
        self._settings = settings
        self._queue = queue
        self._tenants = tenants
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def run(self) -> None:
        transport = StompTransport(self._settings)
        transport.connect()
        try:
            for n in itertools.count():
                if self._halt.wait(0.005):
                    return
                tenant = self._tenants[n % len(self._tenants)]
                producer = TenantProducer(transport, routing=self.routing)
                message = producer.send(self._queue, tenant, {"n": f"{self.name}-{n}"})
                with self._lock:
                    self.sent[message.message_id] = tenant.value
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            transport.close()

    def count(self) -> int:
        with self._lock:
            return len(self.sent)

    def finish(self) -> dict[str, str]:
        self._halt.set()
        self.join(30)
        assert self.error is None, self.error
        return dict(self.sent)


def runner_of(
    settings: StompSettings,
    queue: str,
    *,
    ledger: Ledger,
    tenants: list[TenantId],
    store: ErrorStore,
    routing: Routing,
) -> ProcessorRunner:
    return ProcessorRunner(
        Handler(queue, ledger, routing.default.value),
        StompTransport(settings),
        tenants,
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10),
        routing=routing,
    )


def test_shared_to_routed_with_the_system_running_loses_nothing(
    stomp_settings: StompSettings, store: ErrorStore
) -> None:
    queue = unique_queue("cmd.migrate")
    suffix = uuid.uuid4().hex[:8]
    tenants = [TenantId(f"org-a-{suffix}"), TenantId(f"org-b-{suffix}")]
    org_a = tenants[0]
    ledger = Ledger()
    shared = runner_of(
        stomp_settings, queue, ledger=ledger, tenants=tenants, store=store, routing=SHARED
    )
    routed = runner_of(
        stomp_settings, queue, ledger=ledger, tenants=tenants, store=store, routing=ROUTED
    )
    admin_transport = StompTransport(stomp_settings)
    admin_transport.connect()
    java = Stream(stomp_settings, queue, tenants)  # sends to the shared queue throughout
    toolkit = Stream(stomp_settings, queue, tenants)  # switches by its routing
    try:
        shared.start()
        # Dead letters of the shared era, in DLQ.<queue>.
        ledger.failing.update(f"dead-{n}" for n in range(DEAD_LETTERS))
        old_producer = TenantProducer(admin_transport, routing=SHARED)
        dead_ids = {
            old_producer.send(queue, org_a, {"n": f"dead-{n}"}).message_id
            for n in range(DEAD_LETTERS)
        }
        recorded(store, DEAD_LETTERS, tenant=org_a, outcome=FailureOutcome.DEAD_LETTER)

        java.start()
        toolkit.start()
        assert wait_until(lambda: ledger.by("shared") >= 40, timeout=30)

        # 1. Routed runners beside the shared ones: their router competes for the shared queue.
        routed.start()
        assert wait_until(lambda: ledger.by("routed") >= 20, timeout=30)
        # 2. The shared runners stop; what they held returns to the shared queue, for the router.
        assert shared.stop(grace_s=10)
        handled_by_shared = ledger.by("shared")
        # 3. The toolkit's producers switch to the tenants' own queues.
        switched_at = toolkit.count()
        toolkit.routing = ROUTED
        assert wait_until(lambda: toolkit.count() >= switched_at + 40, timeout=30)
        sent = {**java.finish(), **toolkit.finish()}

        # Every message handled at least once, counted by id.
        assert wait_until(lambda: set(sent) <= ledger.ids(), timeout=60), len(
            set(sent) - ledger.ids()
        )
        entries = ledger.entries()
        # By its own tenant: the subscription's, the body's and the sender's agree.
        for _, tenant, body_tenant, message_id in entries:
            if message_id in sent:
                assert tenant == body_tenant == sent[message_id]
        assert ledger.by("shared") == handled_by_shared  # none after the stop
        assert routed.router is not None
        assert routed.router.quarantined == 0

        # 4. The dead letters from before: moved to the tenant's own DLQ, re-driven from there.
        ledger.failing.clear()
        moved = migrate_dead_letters(admin_transport, queue, org_a, routing=ROUTED)
        assert moved == DEAD_LETTERS
        redriven = DeadLetterAdmin(admin_transport, store, routing=ROUTED).redrive(org_a, queue)
        assert set(redriven) == dead_ids
        assert wait_until(lambda: dead_ids <= ledger.ids(), timeout=30)
        assert {
            (runner, tenant)
            for runner, tenant, _, message_id in ledger.entries()
            if message_id in dead_ids
        } == {("routed", org_a.value)}
        print(
            f"{len(sent)} messages, {handled_by_shared} handled by the shared runners, "
            f"{len(entries) - len(set(e[3] for e in entries))} handled twice"
        )
    finally:
        for stream in (java, toolkit):
            if stream.is_alive():
                stream.finish()
        shared.stop(grace_s=5)
        routed.stop(grace_s=5)
        admin_transport.close()
