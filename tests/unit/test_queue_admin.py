"""Per-tenant queue administration on the in-memory broker: listing with the broker's counts,
draining one (tenant, queue) of a running runner while everything else keeps flowing, resume,
and delete of a drained queue only; the queue state store on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.errors import ConfigError, QueueStatsUnavailableError
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.queue_admin import QueueAdmin, QueueAdminError
from boost_tenancy.ops.queue_reports import rows_table
from boost_tenancy.ops.queue_states import (
    AUDIT_FIELD_PREFIX,
    STATE_TABLE,
    QueueState,
    QueueStateRecord,
    QueueStateWatcher,
    SqlQueueStateStore,
    open_queue_state_store,
)
from boost_tenancy.quotas.policy_store import AUDIT_TABLE, open_policy_store
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from tests.conftest import reachable_postgres_dsn, wait_until
from tests.no_statistics import without_statistics

QUEUE = "orders"
OTHER_QUEUE = "invoices"
A, B = TenantId("org-a"), TenantId("org-b")
A_ORDERS = f"tenant.{A.value}.{QUEUE}"
B_ORDERS = f"tenant.{B.value}.{QUEUE}"


class Gated(TenantProcessor):
    """Records what it handled; a body "hold" waits until release is set."""

    queues = (QUEUE, OTHER_QUEUE)

    def __init__(self) -> None:
        self.handled: list[tuple[str, str, object]] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        body = message.data.get("n") if isinstance(message.data, dict) else message.data
        if body == "hold":
            self.holding.set()
            assert self.release.wait(10)
        with self._lock:
            self.handled.append((message.tenant.value, message.queue, body))

    def seen(self, tenant: TenantId, queue: str = QUEUE) -> list[object]:
        with self._lock:
            return [b for t, q, b in self.handled if t == tenant.value and q == queue]


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    broker = InMemoryBroker()
    yield broker
    broker.close()


@pytest.fixture
def states(tmp_path: Path) -> Iterator[SqlQueueStateStore]:
    store = open_queue_state_store(f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    yield store
    store.close()


@pytest.fixture
def admin(broker: InMemoryBroker, states: SqlQueueStateStore) -> Iterator[QueueAdmin]:
    transport = InMemoryTransport(broker)
    transport.connect()
    yield QueueAdmin(transport, states)
    transport.close()


def send(broker: InMemoryBroker, tenant: TenantId, n: object, queue: str = QUEUE) -> None:
    transport = InMemoryTransport(broker)
    transport.connect()
    TenantProducer(transport).send(queue, tenant, {"n": n})
    transport.close()


def bodies(broker: InMemoryBroker, queue: str) -> list[object]:
    """What queue holds: the n of each message the tests sent, else the raw body."""
    found: list[object] = []
    for message in broker.messages(queue):
        try:
            found.append(json.loads(message.body)["n"])
        except (ValueError, TypeError, KeyError):
            found.append(message.body)
    return found


class Running:
    """A runner of Gated for org-a and org-b following the state store every 50 ms."""

    def __init__(self, broker: InMemoryBroker, states: SqlQueueStateStore, tmp: Path) -> None:
        self.processor = Gated()
        self.watcher = QueueStateWatcher(states, poll_s=0.05)
        self.runner = ProcessorRunner(
            self.processor,
            InMemoryTransport(broker),
            [A, B],
            error_store=SQLiteErrorStore(tmp / "errors.sqlite3"),
            settings=RunnerSettings(workers=2, prefetch=5),
            queue_states=self.watcher,
        )

    def __enter__(self) -> Running:
        self.runner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.processor.release.set()
        self.runner.stop(grace_s=5)


# -- listing ---------------------------------------------------------------------
def test_list_shows_every_queue_of_the_tenant_with_dead_letters_quarantine_and_consumers(
    broker: InMemoryBroker, admin: QueueAdmin, states: SqlQueueStateStore
) -> None:
    for n in range(3):
        send(broker, A, n)
    send(broker, A, 0, OTHER_QUEUE)
    send(broker, B, 0)
    broker.put(f"DLQ.{A_ORDERS}", WireMessage(body="dead", properties={}))
    broker.put(f"DLQ.{A_ORDERS}.quarantine", WireMessage(body="q1", properties={}))
    broker.put(f"DLQ.{A_ORDERS}.quarantine", WireMessage(body="q2", properties={}))
    consumer = InMemoryTransport(broker)
    consumer.connect()
    consumer.subscribe(A_ORDERS, selector=None, prefetch=1, on_delivery=lambda d: None)
    states.set(A, "gone", QueueState.DELETED, actor="alice")
    try:
        assert wait_until(lambda: admin.list(A)[2].in_flight == 1)
        rows = {row.queue: row for row in admin.list(A)}
    finally:
        consumer.close()
    assert sorted(rows) == ["gone", OTHER_QUEUE, QUEUE]
    orders = rows[QUEUE]
    assert (orders.broker_queue, orders.exists, orders.state) == (A_ORDERS, True, "active")
    assert (orders.depth, orders.in_flight, orders.consumers) == (2, 1, 1)
    assert (orders.dead_lettered, orders.quarantined) == (1, 2)
    assert (rows[OTHER_QUEUE].depth, rows[OTHER_QUEUE].consumers) == (1, 0)
    assert (rows["gone"].exists, rows["gone"].state) == (False, QueueState.DELETED)
    table = rows_table(list(rows.values()))
    assert "tenant.org-a.gone (absent)" in table
    assert "dead-lettered" in table.splitlines()[0]


def test_list_refuses_on_a_broker_without_queue_listing_naming_the_capability() -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    transport = without_statistics(InMemoryTransport(broker))
    transport.connect()
    try:
        with pytest.raises(QueueStatsUnavailableError, match="queue_listing"):
            QueueAdmin(transport, None).list(A)
    finally:
        transport.close()
        broker.close()


def test_a_shared_queue_cannot_be_drained_or_deleted_for_one_tenant(
    broker: InMemoryBroker, states: SqlQueueStateStore
) -> None:
    transport = InMemoryTransport(broker)
    transport.connect()
    admin = QueueAdmin(transport, states, routing=Routing(overrides={QUEUE: Topology.SHARED}))
    with pytest.raises(ConfigError, match=r"shared.*every tenant's messages"):
        admin.drain(A, QUEUE, actor="alice")
    with pytest.raises(ConfigError, match="shared"):
        admin.delete(A, QUEUE, actor="alice")
    assert states.get(A, QUEUE) is None
    transport.close()


# -- drain, resume ---------------------------------------------------------------------
def test_drain_ends_only_that_subscription_and_other_tenants_and_queues_keep_flowing(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin, tmp_path: Path
) -> None:
    with Running(broker, states, tmp_path) as running:
        admin.drain(A, QUEUE, actor="alice")
        report = admin.wait_drained(A, QUEUE, timeout_s=10)
        assert report.drained
        assert (report.consumers, report.in_flight) == (0, 0)
        subscribed = running.runner.drains.subscribed()
        assert (A, QUEUE) not in subscribed
        assert {(B, QUEUE), (A, OTHER_QUEUE), (B, OTHER_QUEUE)} <= subscribed
        send(broker, A, "kept")
        send(broker, B, "b1")
        send(broker, A, "a-other", OTHER_QUEUE)
        assert wait_until(lambda: running.processor.seen(B) == ["b1"])
        assert wait_until(lambda: running.processor.seen(A, OTHER_QUEUE) == ["a-other"])
        assert running.processor.seen(A) == []
        assert bodies(broker, A_ORDERS) == ["kept"]


def test_a_delivery_taken_before_the_drain_is_settled_and_one_arriving_during_it_stays_queued(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin, tmp_path: Path
) -> None:
    with Running(broker, states, tmp_path) as running:
        send(broker, A, "hold")
        assert running.processor.holding.wait(10)
        admin.drain(A, QUEUE, actor="alice")
        assert wait_until(lambda: (A, QUEUE) in running.runner.drains.held())
        send(broker, A, "during")
        # The held handler's subscription stays until it settles; the new message is delivered
        # to it (prefetch) and left unacknowledged.
        assert wait_until(lambda: broker.queue_stats([A_ORDERS])[A_ORDERS].in_flight == 2)  # type: ignore[union-attr]
        assert not admin.wait_drained(A, QUEUE, timeout_s=0.2).drained
        assert (A, QUEUE) in running.runner.drains.subscribed()
        running.processor.release.set()
        report = admin.wait_drained(A, QUEUE, timeout_s=10)
        assert report.drained and report.depth == 1
        assert running.processor.seen(A) == ["hold"]
        assert bodies(broker, A_ORDERS) == ["during"]


def test_resume_subscribes_again_and_what_waited_is_handled(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin, tmp_path: Path
) -> None:
    with Running(broker, states, tmp_path) as running:
        admin.drain(A, QUEUE, actor="alice")
        assert admin.wait_drained(A, QUEUE, timeout_s=10).drained
        send(broker, A, "waited")
        change = admin.resume(A, QUEUE, actor="bob")
        assert (change.old, change.new, change.actor) == ("draining", "active", "bob")
        assert wait_until(lambda: running.processor.seen(A) == ["waited"])
        assert (A, QUEUE) in running.runner.drains.subscribed()
    with pytest.raises(QueueAdminError, match="not drained"):
        admin.resume(A, QUEUE, actor="bob")


def test_a_runner_starting_never_subscribes_to_a_drained_or_deleted_queue(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin, tmp_path: Path
) -> None:
    states.set(A, QUEUE, QueueState.DELETED, actor="alice")
    states.set(B, QUEUE, QueueState.DRAINING, actor="alice")
    send(broker, A, "a")
    send(broker, B, "b")
    with Running(broker, states, tmp_path) as running:
        assert running.runner.drains.subscribed() == {(A, OTHER_QUEUE), (B, OTHER_QUEUE)}
        send(broker, A, "other", OTHER_QUEUE)
        assert wait_until(lambda: running.processor.seen(A, OTHER_QUEUE) == ["other"])
        rows = {row.queue: row for row in admin.list(A)}
        assert rows[QUEUE].consumers == 0
    assert bodies(broker, A_ORDERS) == ["a"]
    assert bodies(broker, B_ORDERS) == ["b"]


# -- delete ---------------------------------------------------------------------
def test_delete_refuses_an_active_queue_and_a_draining_one_still_consumed(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin
) -> None:
    send(broker, A, 1)
    with pytest.raises(QueueAdminError, match=r"active.*drain"):
        admin.delete(A, QUEUE, actor="alice")
    consumer = InMemoryTransport(broker)
    consumer.connect()
    consumer.subscribe(A_ORDERS, selector=None, prefetch=1, on_delivery=lambda d: None)
    states.set(A, QUEUE, QueueState.DRAINING, actor="alice")
    try:
        with pytest.raises(QueueAdminError, match=r"not drained yet.*1 consumer"):
            admin.delete(A, QUEUE, actor="alice")
    finally:
        consumer.close()
    assert bodies(broker, A_ORDERS) == [1]
    assert states.state(A, QUEUE) is QueueState.DRAINING


def test_delete_purges_a_drained_queue_keeps_its_dead_letters_and_records_it_deleted(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin
) -> None:
    for n in range(7):
        send(broker, A, n)
    send(broker, B, "b")
    broker.put(f"DLQ.{A_ORDERS}", WireMessage(body="dead", properties={}))
    admin.drain(A, QUEUE, actor="alice")
    report = admin.delete(A, QUEUE, actor="bob")
    assert (report.removed, report.dead_letters_removed, report.dead_letters_kept) == (7, None, 1)
    assert bodies(broker, A_ORDERS) == []
    assert bodies(broker, f"DLQ.{A_ORDERS}") == ["dead"]
    assert bodies(broker, B_ORDERS) == ["b"]
    assert states.state(A, QUEUE) is QueueState.DELETED
    again = admin.delete(A, QUEUE, actor="bob", with_dead_letters=True)
    assert (again.removed, again.dead_letters_removed, again.quarantine_removed) == (0, 1, 0)
    assert bodies(broker, f"DLQ.{A_ORDERS}") == []


def test_delete_ends_at_its_deadline_while_messages_keep_arriving(
    broker: InMemoryBroker, admin: QueueAdmin
) -> None:
    """A producer sending every 0.1 s never left the purge a quiet 0.25 s, the only moment it
    looked at its deadline: the delete ran on for as long as the producer did."""
    send(broker, A, "first")
    admin.drain(A, QUEUE, actor="alice")
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.05):
            send(broker, A, "more")

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    outcome: list[BaseException | None] = []

    def delete() -> None:
        try:
            admin.delete(A, QUEUE, actor="bob", timeout_s=0.5)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    deleting = threading.Thread(target=delete, daemon=True)
    deleting.start()
    deleting.join(10)
    stop.set()
    producer.join(5)
    assert outcome, "the delete was still running 10 s after its 0.5 s deadline"
    assert isinstance(outcome[0], QueueAdminError)
    assert "messages still arriving" in str(outcome[0])


def test_every_state_change_is_audited_with_its_actor(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin, tmp_path: Path
) -> None:
    admin.drain(A, QUEUE, actor="alice")
    assert admin.drain(A, QUEUE, actor="alice") is None  # unchanged: nothing audited
    admin.delete(A, QUEUE, actor="bob")
    admin.resume(A, QUEUE, actor="carol")
    history = states.history(A, QUEUE)
    assert [(c.actor, c.old, c.new) for c in reversed(history)] == [
        ("alice", "active", "draining"),
        ("bob", "draining", "deleted"),
        ("carol", "deleted", "active"),
    ]
    # The same audit table as the policies: `policy show` lists them with the limits' changes.
    policies = open_policy_store(f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    try:
        assert {c.field for c in policies.history(A)} == {AUDIT_FIELD_PREFIX + QUEUE}
    finally:
        policies.close()


def test_drain_of_a_deleted_queue_is_refused(states: SqlQueueStateStore, admin: QueueAdmin) -> None:
    states.set(A, QUEUE, QueueState.DELETED, actor="alice")
    with pytest.raises(QueueAdminError, match="deleted"):
        admin.drain(A, QUEUE, actor="alice")


# -- the watcher ---------------------------------------------------------------------
class Outage:
    """The state store, until down is set: then every read fails."""

    def __init__(self, inner: SqlQueueStateStore) -> None:
        self.inner = inner
        self.down = False
        self.reads = 0

    def held(self) -> list[QueueStateRecord]:
        self.reads += 1
        if self.down:
            raise ConnectionError("policy store unreachable")
        return self.inner.held()


def test_a_store_outage_keeps_the_last_known_states(
    broker: InMemoryBroker, states: SqlQueueStateStore, admin: QueueAdmin, tmp_path: Path
) -> None:
    store = Outage(states)
    watcher = QueueStateWatcher(store, poll_s=0.05)
    processor = Gated()
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [A, B],
        error_store=SQLiteErrorStore(tmp_path / "errors.sqlite3"),
        queue_states=watcher,
    )
    runner.start()
    try:
        admin.drain(A, QUEUE, actor="alice")
        assert admin.wait_drained(A, QUEUE, timeout_s=10).drained
        store.down = True
        reads = store.reads
        assert wait_until(lambda: store.reads > reads + 3)
        assert watcher.held == {(A, QUEUE)}
        assert (A, QUEUE) not in runner.drains.subscribed()
        send(broker, A, "kept")
        send(broker, B, "b")
        assert wait_until(lambda: processor.seen(B) == ["b"])
        assert bodies(broker, A_ORDERS) == ["kept"]
    finally:
        runner.stop(grace_s=5)


def test_a_watcher_that_cannot_read_at_start_holds_nothing() -> None:
    class Down:
        def held(self) -> list[QueueStateRecord]:
            raise ConnectionError("down")

    assert QueueStateWatcher(Down()).first_read() == frozenset()
    with pytest.raises(ConfigError):
        QueueStateWatcher(Down(), poll_s=0)


# -- the store ---------------------------------------------------------------------
def check_store(store: SqlQueueStateStore, tenant: TenantId) -> None:
    assert store.get(tenant, QUEUE) is None
    assert store.state(tenant, QUEUE) is QueueState.ACTIVE
    change = store.set(tenant, QUEUE, QueueState.DRAINING, actor="alice")
    assert change is not None and change.field == AUDIT_FIELD_PREFIX + QUEUE
    assert store.set(tenant, QUEUE, QueueState.DRAINING, actor="bob") is None
    store.set(tenant, OTHER_QUEUE, QueueState.DELETED, actor="bob")
    record = store.get(tenant, QUEUE)
    assert record is not None
    assert (record.state, record.updated_by) == (QueueState.DRAINING, "alice")
    held = {(r.tenant, r.queue, r.state) for r in store.held() if r.tenant == tenant}
    assert held == {
        (tenant, QUEUE, QueueState.DRAINING),
        (tenant, OTHER_QUEUE, QueueState.DELETED),
    }
    store.set(tenant, QUEUE, QueueState.ACTIVE, actor="carol")
    assert {r.queue for r in store.held() if r.tenant == tenant} == {OTHER_QUEUE}
    assert [r.queue for r in store.of_tenant(tenant)] == [OTHER_QUEUE, QUEUE]
    assert [(c.actor, c.new) for c in store.history(tenant, QUEUE)] == [
        ("carol", "active"),
        ("alice", "draining"),
    ]
    with pytest.raises(ConfigError, match="actor"):
        store.set(tenant, QUEUE, QueueState.DRAINING, actor=" ")
    with pytest.raises(ConfigError, match="reserved"):
        store.set(tenant, f"tenant.{tenant.value}.x", QueueState.DRAINING, actor="alice")


def test_the_state_store_on_sqlite(states: SqlQueueStateStore) -> None:
    check_store(states, A)


@pytest.mark.postgres
def test_the_state_store_on_postgresql() -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn = reachable_postgres_dsn()
    tenant = TenantId(f"org-{uuid.uuid4().hex[:12]}")
    store = open_queue_state_store(dsn)
    try:
        check_store(store, tenant)
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in (STATE_TABLE, AUDIT_TABLE):
                conn.execute(f"DELETE FROM {table} WHERE tenant = %s", (tenant.value,))  # type: ignore[arg-type]
