"""DeadLetterAdmin on the in-memory transport: a tenant's dead letters listed with their recorded
failures and re-driven to their original queue, never another tenant's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    InvalidTenantError,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.errors import ConfigError, DeadLettersNotFoundError
from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TEXT_PROPERTY,
    ERROR_TYPE_PROPERTY,
    MESSAGE_ID_PROPERTY,
    ORIGINAL_QUEUE_PROPERTY,
    WireMessage,
)
from boost_tenancy.ops.dead_letters import DeadLetterAdmin
from boost_tenancy.ops.quarantine import QuarantineAdmin
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome, SQLiteErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from tests.conftest import unique_queue, wait_until

ORG_A, ORG_B = TenantId("org-A"), TenantId("org-B")
SHARED = Routing(Topology.SHARED)
"""Dead letters on DLQ.<queue> of one shared queue; per-tenant ones are in the contract suite."""
IDLE = 0.3
ERROR_PROPERTIES = (
    ORIGINAL_QUEUE_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TYPE_PROPERTY,
    ERROR_TEXT_PROPERTY,
)


class AlwaysFails(TenantProcessor):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        raise RuntimeError(f"cannot handle {message.data['n']}")


@dataclass
class DeadLetters:
    broker: InMemoryBroker
    store: ErrorStore
    admin: DeadLetterAdmin
    queue: str
    a_ids: list[str]
    b_ids: list[str]

    @property
    def dlq(self) -> str:
        return dead_letter_queue(self.queue)

    def dlq_ids(self) -> list[str]:
        return [m.properties[MESSAGE_ID_PROPERTY] for m in self.broker.messages(self.dlq)]


@pytest.fixture
def dead(tmp_path: Path) -> Iterator[DeadLetters]:
    """Two dead letters of org-A and one of org-B on DLQ.<queue>, each after two failed attempts."""
    broker = InMemoryBroker()
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    queue = unique_queue("cmd")
    runner = ProcessorRunner(
        AlwaysFails(queue),
        InMemoryTransport(broker),
        [ORG_A, ORG_B],
        error_store=store,
        settings=RunnerSettings(
            workers=2,
            dispatch=DispatchSettings(
                retry=RetryPolicy(max_attempts=2, base_delay_ms=10, max_delay_ms=10)
            ),
        ),
        routing=SHARED,
    )
    runner.start()
    sender = InMemoryTransport(broker)
    sender.connect()
    producer = TenantProducer(sender, routing=SHARED)
    a_ids = [producer.send(queue, ORG_A, {"n": n}).message_id for n in (1, 2)]
    b_ids = [producer.send(queue, ORG_B, {"n": 3}).message_id]
    assert wait_until(lambda: broker.depth(dead_letter_queue(queue)) == 3, timeout=10)
    assert runner.stop(grace_s=5)
    sender.close()
    admin_transport = InMemoryTransport(broker)
    admin_transport.connect()
    yield DeadLetters(
        broker, store, DeadLetterAdmin(admin_transport, store, routing=SHARED), queue, a_ids, b_ids
    )
    admin_transport.close()
    store.close()
    broker.close()


def test_list_shows_a_tenants_dead_letters_with_their_recorded_failures(
    dead: DeadLetters,
) -> None:
    views = dead.admin.list(ORG_A, dead.queue, idle_s=IDLE)
    assert sorted(view.message_id for view in views) == sorted(dead.a_ids)
    for view in views:
        assert view.tenant == ORG_A
        assert view.original_queue == dead.queue
        assert view.reason == "exhausted"
        assert view.attempts == 2
        assert view.error_type == "RuntimeError"
        assert view.error.startswith("RuntimeError: cannot handle ")
        assert '"tenantUUID":"org-A"' in str(view.body)
        assert [(f.attempt, f.outcome) for f in view.failures] == [
            (1, FailureOutcome.RETRY),
            (2, FailureOutcome.DEAD_LETTER),
        ]
        assert {f.message_id for f in view.failures} == {view.message_id}
        assert {f.tenant for f in view.failures} == {ORG_A}


def test_list_never_shows_another_tenants_dead_letters(dead: DeadLetters) -> None:
    a_views = dead.admin.list(ORG_A, dead.queue, idle_s=IDLE)
    b_views = dead.admin.list("org-B", dead.queue, idle_s=IDLE)
    assert not {v.message_id for v in a_views} & set(dead.b_ids)
    assert [v.message_id for v in b_views] == dead.b_ids
    assert all(f.tenant == ORG_B for v in b_views for f in v.failures)
    assert dead.admin.list("org-C", dead.queue, idle_s=IDLE) == []


def test_list_leaves_the_messages_in_the_dead_letter_queue(dead: DeadLetters) -> None:
    before = dead.dlq_ids()
    first = dead.admin.list(ORG_A, dead.queue, idle_s=IDLE)
    assert dead.dlq_ids() == before
    second = dead.admin.list(ORG_A, dead.queue, idle_s=IDLE)
    assert sorted(v.message_id for v in second) == sorted(v.message_id for v in first)
    assert len(before) == 3


def test_list_stops_at_the_limit(dead: DeadLetters) -> None:
    assert len(dead.admin.list(ORG_A, dead.queue, limit=1, idle_s=IDLE)) == 1
    assert len(dead.dlq_ids()) == 3


def test_redrive_sends_a_tenants_dead_letters_back_reset_and_cleaned(dead: DeadLetters) -> None:
    dlq_before = {m.properties[MESSAGE_ID_PROPERTY]: m for m in dead.broker.messages(dead.dlq)}
    redriven = dead.admin.redrive(ORG_A, dead.queue, idle_s=IDLE)
    assert sorted(redriven) == sorted(dead.a_ids)
    back = dead.broker.messages(dead.queue)
    assert sorted(m.properties[MESSAGE_ID_PROPERTY] for m in back) == sorted(dead.a_ids)
    for message in back:
        props = message.properties
        assert props["tenantUUID"] == "org-A"
        assert props[ATTEMPT_PROPERTY] == "1"
        for name in ERROR_PROPERTIES:
            assert name not in props
        original = dlq_before[props[MESSAGE_ID_PROPERTY]]
        assert message.body == original.body
        assert message.correlation_id == original.correlation_id
    assert dead.dlq_ids() == dead.b_ids, "only the tenant's own dead letters leave the DLQ"


def test_redrive_records_a_redrive_outcome_per_message(dead: DeadLetters) -> None:
    dead.admin.redrive(ORG_A, dead.queue, idle_s=IDLE)
    records = dead.store.failures(tenant=ORG_A, outcome=FailureOutcome.REDRIVE)
    assert sorted(r.message_id for r in records) == sorted(dead.a_ids)
    for record in records:
        assert record.queue == dead.queue
        assert record.attempt == 2
        assert record.error_type == "RuntimeError"
        assert dead_letter_queue(dead.queue) in record.error_text
    assert dead.store.failures(tenant=ORG_B, outcome=FailureOutcome.REDRIVE) == []


def test_redrive_with_message_ids_moves_only_those(dead: DeadLetters) -> None:
    chosen, kept = dead.a_ids
    assert dead.admin.redrive(ORG_A, dead.queue, message_ids=[chosen], idle_s=IDLE) == [chosen]
    assert [m.properties[MESSAGE_ID_PROPERTY] for m in dead.broker.messages(dead.queue)] == [chosen]
    assert sorted(dead.dlq_ids()) == sorted([kept, *dead.b_ids])
    assert [v.message_id for v in dead.admin.list(ORG_A, dead.queue, idle_s=IDLE)] == [kept]
    redrives = dead.store.failures(tenant=ORG_A, outcome=FailureOutcome.REDRIVE)
    assert [r.message_id for r in redrives] == [chosen]


def test_redrive_of_another_tenants_message_id_moves_nothing(dead: DeadLetters) -> None:
    """To org-A, org-B's dead letter does not exist: reported as not found, nothing moved."""
    with pytest.raises(DeadLettersNotFoundError) as caught:
        dead.admin.redrive(ORG_A, dead.queue, message_ids=dead.b_ids, idle_s=IDLE)
    assert caught.value.missing == sorted(dead.b_ids)
    assert dead.broker.messages(dead.queue) == []
    assert len(dead.dlq_ids()) == 3


def test_admin_refuses_an_invalid_tenant_or_queue(dead: DeadLetters) -> None:
    with pytest.raises(InvalidTenantError):
        dead.admin.list("x' OR '1'='1", dead.queue, idle_s=IDLE)
    with pytest.raises(InvalidTenantError):
        dead.admin.redrive("org-A' OR 'a'='a", dead.queue, idle_s=IDLE)
    with pytest.raises(ConfigError, match="invalid queue name"):
        dead.admin.list(ORG_A, "cmd.>", idle_s=IDLE)
    assert len(dead.dlq_ids()) == 3


def test_an_empty_dead_letter_queue_is_listed_from_its_counts_without_reading_it(
    dead: DeadLetters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the broker counts its queues, a listing of a queue it says is empty (or has no
    such queue) subscribes to nothing and waits for nothing; one that holds messages is read."""
    subscribed: list[str] = []
    transport = dead.admin._transport
    original = transport.subscribe

    def recording(queue: str, **kwargs: object) -> object:
        subscribed.append(queue)
        return original(queue, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(transport, "subscribe", recording)
    assert dead.admin.list(ORG_A, unique_queue("cmd.none")) == []
    assert subscribed == []
    assert [v.message_id for v in dead.admin.list(ORG_A, dead.queue)] == dead.a_ids
    assert subscribed == [dead.dlq]


@pytest.mark.parametrize("kind", ["dead letters", "quarantine"])
def test_a_listing_ends_once_every_message_the_broker_counted_has_come(
    tmp_path: Path, kind: str
) -> None:
    """With queue statistics the broker says how many the queue holds: the listing ends when
    that many came, not after a quiet idle_s (3 s by default on every `dlq list`); here idle_s
    is 600 s, so only the count can end it."""
    broker = InMemoryBroker()
    transport = InMemoryTransport(broker)
    transport.connect()
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    assert transport.capabilities.queue_statistics
    queue = unique_queue("count")
    per_tenant = Routing(Topology.PER_TENANT)
    if kind == "dead letters":
        target = dead_letter_queue(per_tenant.physical(queue, ORG_A))
        dead_admin = DeadLetterAdmin(transport, store, routing=per_tenant)
        listing = lambda: dead_admin.list(ORG_A, queue, idle_s=600, max_s=600)  # noqa: E731
    else:
        quarantine_admin = QuarantineAdmin(transport, store)
        target = quarantine_admin.quarantine_of(queue, None)
        listing = lambda: quarantine_admin.list(queue, idle_s=600, max_s=600)  # noqa: E731
    for n in range(5):
        transport.send(
            target,
            WireMessage(body=f'{{"n": {n}}}', properties={"tenantUUID": ORG_A.value}),
        )
    listed: list[int] = []
    reader = threading.Thread(target=lambda: listed.append(len(listing())), daemon=True)
    reader.start()
    reader.join(timeout=30)
    try:
        assert listed == [5], "the listing waited for a quiet moment the count made needless"
    finally:
        transport.close()
        store.close()
        broker.close()
