"""QuarantineAdmin and `boost-tenancy quarantine` on the in-memory broker: a queue's quarantine
listed without being consumed, re-driven to the tenant an operator assigns, refused with nothing
moved when it may not be; and `migrate dead-letters`, a tenant's dead letters of the shared
queue moved to its own dead-letter queue where a re-drive finds them."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RunnerSettings,
    TenantId,
    TenantProcessor,
)
from boost_tenancy.cli import main
from boost_tenancy.cli import migration as migration_cli
from boost_tenancy.cli import quarantine as quarantine_cli
from boost_tenancy.cli.output import body_json
from boost_tenancy.errors import ConfigError, TransportError
from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    DEAD_LETTER_REASON_PROPERTY,
    ERROR_TEXT_PROPERTY,
    MESSAGE_ID_PROPERTY,
    ORIGINAL_QUEUE_PROPERTY,
    WireMessage,
)
from boost_tenancy.ops.dead_letters import DeadLetterAdmin
from boost_tenancy.ops.migration import migrate_dead_letters
from boost_tenancy.ops.quarantine import Cause, QuarantineAdmin, QuarantineRedriveError
from boost_tenancy.ops.router import TenantRouter
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Delivery, Outgoing
from tests.conftest import recorded, unique_queue, wait_until

ORG_A, ORG_B = TenantId("org-A"), TenantId("org-B")
IDLE = 0.3
HOSTILE = "x\x1b[31m\u202e' OR '1'='1"
"""A tenantUUID with a terminal escape, a right-to-left override and a selector injection."""


class Nothing(TenantProcessor):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        """Never called: every message here is quarantined before."""


def connected(broker: InMemoryBroker) -> InMemoryTransport:
    transport = InMemoryTransport(broker)
    transport.connect()
    return transport


@dataclass
class Quarantined:
    broker: InMemoryBroker
    store: ErrorStore
    admin: QuarantineAdmin
    queue: str

    @property
    def shared(self) -> str:
        return quarantine_queue(self.queue)

    @property
    def of_a(self) -> str:
        return quarantine_queue(f"tenant.org-A.{self.queue}")

    def ids(self, queue: str) -> list[str]:
        return [m.properties[MESSAGE_ID_PROPERTY] for m in self.broker.messages(queue)]

    def by_property(self, queue: str, raw: str | None) -> str:
        (found,) = [
            m.properties[MESSAGE_ID_PROPERTY]
            for m in self.broker.messages(queue)
            if m.properties.get(TENANT_PROPERTY) == raw
        ]
        return found


@pytest.fixture
def quarantined(broker: InMemoryBroker, store: ErrorStore) -> Iterator[Quarantined]:
    """On a routed queue: the router quarantined three messages of the shared queue (no tenant,
    a hostile one, a valid tenant with a JSON body naming org-B), and org-A's runner one that
    arrived on org-A's queue claiming org-B."""
    queue = unique_queue("cmd")
    sender = connected(broker)
    sender.send(queue, WireMessage(body='{"n": 1}', properties={}))
    sender.send(queue, WireMessage(body=b"\x00\xffbin", properties={TENANT_PROPERTY: HOSTILE}))
    sender.send(
        queue,
        WireMessage(body='{"n": 3, "tenantUUID": "org-B"}', properties={TENANT_PROPERTY: "a b"}),
    )
    sender.send(
        f"tenant.org-A.{queue}",
        WireMessage(body='{"n": 4}', properties={TENANT_PROPERTY: "org-B"}),
    )
    router = TenantRouter(connected(broker), [queue], error_store=store)
    router.start()
    runner = ProcessorRunner(
        Nothing(queue),
        connected(broker),
        [ORG_A],
        error_store=store,
        settings=RunnerSettings(workers=1),
        route_shared=False,
    )
    runner.start()
    assert wait_until(
        lambda: (
            broker.depth(quarantine_queue(queue)) == 3
            and broker.depth(quarantine_queue(f"tenant.org-A.{queue}")) == 1
        )
    )
    router.stop()
    assert runner.stop(grace_s=5)
    recorded(store, 1, tenant=ORG_B, outcome=FailureOutcome.QUARANTINE)
    recorded(store, 3, tenant=None, outcome=FailureOutcome.QUARANTINE)
    yield Quarantined(broker, store, QuarantineAdmin(connected(broker), store), queue)


def test_list_shows_the_shared_quarantine_with_causes_and_records_and_leaves_it(
    quarantined: Quarantined,
) -> None:
    before = quarantined.ids(quarantined.shared)
    views = quarantined.admin.list(quarantined.queue, idle_s=IDLE)
    assert [v.message_id for v in views] == before
    by_id = {v.message_id: v for v in views}
    missing = by_id[quarantined.by_property(quarantined.shared, None)]
    assert (missing.cause, missing.tenant_property) == (Cause.MISSING, None)
    hostile = by_id[quarantined.by_property(quarantined.shared, HOSTILE)]
    # Exactly as it arrived: the escape, the override and the quotes are all still there.
    assert (hostile.cause, hostile.tenant_property) == (Cause.INVALID, HOSTILE)
    assert hostile.body == b"\x00\xffbin"
    for view in views:
        assert view.quarantine_queue == quarantined.shared
        assert view.error_type == "TenancyViolation"
        assert ("no tenantUUID property" if view is missing else "is not a valid tenant") in (
            view.error or ""
        )
        assert [f.outcome for f in view.failures] == [FailureOutcome.QUARANTINE]
        assert view.quarantined_at == view.failures[0].occurred_at
    # Read, not consumed: the same messages, in the same order, and a second read sees them all.
    assert quarantined.ids(quarantined.shared) == before
    again = quarantined.admin.list(quarantined.queue, idle_s=IDLE)
    assert [v.message_id for v in again] == before


def test_list_with_a_tenant_reads_that_tenants_quarantine(quarantined: Quarantined) -> None:
    (view,) = quarantined.admin.list(quarantined.queue, tenant=ORG_A, idle_s=IDLE)
    assert view.quarantine_queue == quarantined.of_a
    assert (view.cause, view.tenant_property) == (Cause.OTHER_TENANT, "org-B")
    assert "delivered to the subscription of tenant 'org-A'" in view.error
    # The record is filed under the tenant the message claims.
    assert [(f.tenant, f.outcome) for f in view.failures] == [(ORG_B, FailureOutcome.QUARANTINE)]


def test_list_stops_at_its_limit_and_leaves_the_rest(quarantined: Quarantined) -> None:
    views = quarantined.admin.list(quarantined.queue, limit=2, idle_s=IDLE)
    assert [v.message_id for v in views] == quarantined.ids(quarantined.shared)[:2]
    assert quarantined.broker.depth(quarantined.shared) == 3
    with pytest.raises(ConfigError, match="limit must be at least 1"):
        quarantined.admin.list(quarantined.queue, limit=0)


def test_redrive_assigns_a_message_to_the_tenant_and_records_who(
    quarantined: Quarantined,
) -> None:
    message_id = quarantined.by_property(quarantined.shared, None)
    others = [i for i in quarantined.ids(quarantined.shared) if i != message_id]
    done = quarantined.admin.redrive(
        quarantined.queue, tenant=ORG_A, message_ids=[message_id], actor="alice", idle_s=IDLE
    )
    assert done == [message_id]
    (sent,) = quarantined.broker.messages(f"tenant.org-A.{quarantined.queue}")
    assert sent.properties[TENANT_PROPERTY] == "org-A"
    assert sent.properties[MESSAGE_ID_PROPERTY] == message_id
    assert sent.properties[ATTEMPT_PROPERTY] == "1"
    for gone in (ERROR_TEXT_PROPERTY, DEAD_LETTER_REASON_PROPERTY, ORIGINAL_QUEUE_PROPERTY):
        assert gone not in sent.properties
    assert sent.body == '{"n": 1}'
    assert quarantined.ids(quarantined.shared) == others
    (record,) = recorded(
        quarantined.store, 1, tenant=ORG_A, message_id=message_id, outcome=FailureOutcome.REDRIVE
    )
    assert record.queue == quarantined.queue
    assert record.raw_tenant is None
    assert "assigned to tenant org-A by alice" in record.error_text
    assert quarantined.shared in record.error_text


def test_a_redrive_the_broker_takes_in_part_records_what_moved_and_names_what_stayed(
    quarantined: Quarantined, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where forwarding is not atomic, the broker refusing one copy leaves the others moved: they
    went unrecorded, and the operator heard of a bare transport error."""
    moved_id = quarantined.by_property(quarantined.shared, None)
    refused_id = quarantined.by_property(quarantined.shared, HOSTILE)
    transport = quarantined.admin._transport
    real_one = transport.send_then_ack

    def refuse_bytes(delivery: Delivery, items: Sequence[Outgoing]) -> None:
        if isinstance(delivery.body, bytes):
            raise TransportError("the broker rejected the message: queue full")
        real_one(delivery, items)

    monkeypatch.setattr(transport, "send_then_ack", refuse_bytes)
    with pytest.raises(QuarantineRedriveError) as refused:
        quarantined.admin.redrive(
            quarantined.queue,
            tenant=ORG_A,
            message_ids=[moved_id, refused_id],
            actor="alice",
            idle_s=IDLE,
        )
    assert (
        f"the broker refused some: the broker rejected the message: queue full: {refused_id}"
        in (str(refused.value))
    )
    [sent] = quarantined.broker.messages(f"tenant.org-A.{quarantined.queue}")
    assert sent.properties[MESSAGE_ID_PROPERTY] == moved_id
    assert refused_id in quarantined.ids(quarantined.shared)
    recorded(
        quarantined.store, 1, tenant=ORG_A, message_id=moved_id, outcome=FailureOutcome.REDRIVE
    )


def test_redrive_on_a_shared_queue_sends_to_the_shared_queue_stamped(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    broker.put(
        quarantine_queue(queue),
        WireMessage(body="plain text", properties={MESSAGE_ID_PROPERTY: "m-1"}),
    )
    admin = QuarantineAdmin(connected(broker), store, routing=Routing(Topology.SHARED))
    assert admin.redrive(queue, tenant=ORG_B, message_ids=["m-1"], actor="bob", idle_s=IDLE) == [
        "m-1"
    ]
    (sent,) = broker.messages(queue)
    assert sent.properties[TENANT_PROPERTY] == "org-B"


class LosesItsConnection(InMemoryTransport):
    """Loses its connection (and gets it back) when given its next moves, before making them,
    or before the re-drive's liveness check (early)."""

    def __init__(self, broker: InMemoryBroker, *, early: bool) -> None:
        super().__init__(broker)
        self.early = early
        self.checks = 0

    def is_live(self, delivery: Any) -> bool:
        self.checks += 1
        if self.early and self.checks == 1:
            self.drop_connection()
        return super().is_live(delivery)

    def send_then_ack_many(self, moves: Any) -> list[Any]:
        if not self.early:
            self.drop_connection()
        return super().send_then_ack_many(moves)


@pytest.mark.parametrize("early", [True, False])
def test_a_redrive_that_loses_its_connection_reports_and_records_no_move(
    broker: InMemoryBroker, store: ErrorStore, early: bool
) -> None:
    queue = unique_queue("cmd")
    broker.put(
        quarantine_queue(queue), WireMessage(body="{}", properties={MESSAGE_ID_PROPERTY: "m-1"})
    )
    transport = LosesItsConnection(broker, early=early)
    transport.connect()
    admin = QuarantineAdmin(transport, store)
    with pytest.raises(QuarantineRedriveError, match="connection to the broker was lost"):
        admin.redrive(queue, tenant=ORG_A, message_ids=["m-1"], actor="ops", idle_s=IDLE)
    transport.close()
    assert broker.depth(f"tenant.org-A.{queue}") == 0
    assert wait_until(lambda: broker.depth(quarantine_queue(queue)) == 1), "still quarantined"
    assert store.failures(tenant=ORG_A, outcome=FailureOutcome.REDRIVE) == []


def test_an_unknown_id_is_refused_by_name_and_nothing_moves(quarantined: Quarantined) -> None:
    known = quarantined.by_property(quarantined.shared, None)
    before = quarantined.ids(quarantined.shared)
    with pytest.raises(QuarantineRedriveError, match="no-such-id") as refused:
        quarantined.admin.redrive(
            quarantined.queue,
            tenant=ORG_A,
            message_ids=[known, "no-such-id"],
            actor="alice",
            idle_s=IDLE,
        )
    assert "nothing moved" in str(refused.value)
    assert known not in str(refused.value)
    assert quarantined.ids(quarantined.shared) == before
    assert quarantined.broker.depth(f"tenant.org-A.{quarantined.queue}") == 0
    assert quarantined.store.failures(tenant=ORG_A, outcome=FailureOutcome.REDRIVE) == []


def test_an_id_two_quarantined_messages_carry_is_refused_and_nothing_moves(
    quarantined: Quarantined,
) -> None:
    """A producer sets boostMessageId: a second message carrying the id the operator looked at
    went to the tenant's queue with it, stamped with the tenant."""
    known = quarantined.by_property(quarantined.shared, None)
    quarantined.broker.put(
        quarantine_queue(quarantined.queue),
        WireMessage(body='{"n": "from someone else"}', properties={MESSAGE_ID_PROPERTY: known}),
    )
    before = quarantined.ids(quarantined.shared)
    with pytest.raises(QuarantineRedriveError, match=f"{known}: 2 messages .* carry this id"):
        quarantined.admin.redrive(
            quarantined.queue, tenant=ORG_A, message_ids=[known], actor="alice", idle_s=IDLE
        )
    assert quarantined.ids(quarantined.shared) == before
    assert quarantined.broker.depth(f"tenant.org-A.{quarantined.queue}") == 0


def test_a_body_naming_another_tenant_is_refused_even_with_force(
    quarantined: Quarantined,
) -> None:
    naming_b = quarantined.by_property(quarantined.shared, "a b")
    with pytest.raises(QuarantineRedriveError, match=r"tenantUUID='org-B'.*'org-A'"):
        quarantined.admin.redrive(
            quarantined.queue,
            tenant=ORG_A,
            message_ids=[naming_b],
            actor="alice",
            force=True,
            idle_s=IDLE,
        )
    assert quarantined.broker.depth(quarantined.shared) == 3
    # The tenant it names may have it.
    quarantined.admin.redrive(
        quarantined.queue, tenant=ORG_B, message_ids=[naming_b], actor="alice", idle_s=IDLE
    )
    assert quarantined.broker.depth(f"tenant.org-B.{quarantined.queue}") == 1


def test_a_property_naming_another_valid_tenant_needs_force(quarantined: Quarantined) -> None:
    (claims_b,) = quarantined.ids(quarantined.of_a)
    with pytest.raises(QuarantineRedriveError, match="names tenant 'org-B'; give --force"):
        quarantined.admin.redrive(
            quarantined.queue,
            tenant=ORG_A,
            message_ids=[claims_b],
            actor="alice",
            from_tenant=ORG_A,
            idle_s=IDLE,
        )
    assert quarantined.broker.depth(quarantined.of_a) == 1
    quarantined.admin.redrive(
        quarantined.queue,
        tenant=ORG_A,
        message_ids=[claims_b],
        actor="alice",
        from_tenant=ORG_A,
        force=True,
        idle_s=IDLE,
    )
    (sent,) = quarantined.broker.messages(f"tenant.org-A.{quarantined.queue}")
    assert sent.properties[TENANT_PROPERTY] == "org-A"
    assert quarantined.broker.depth(quarantined.of_a) == 0
    (record,) = recorded(quarantined.store, 1, tenant=ORG_A, outcome=FailureOutcome.REDRIVE)
    assert record.raw_tenant == "org-B"
    assert "(forced)" in record.error_text


def test_a_redrive_without_ids_is_refused(quarantined: Quarantined) -> None:
    with pytest.raises(QuarantineRedriveError, match="at least one message id"):
        quarantined.admin.redrive(quarantined.queue, tenant=ORG_A, message_ids=[], actor="a")
    with pytest.raises(ConfigError, match="invalid message id"):
        quarantined.admin.redrive(quarantined.queue, tenant=ORG_A, message_ids=["a b"], actor="a")


# -- the command line ---------------------------------------------------------------------------
@pytest.fixture
def cli_broker(
    quarantined: Quarantined,
    monkeypatch: pytest.MonkeyPatch,
    restore_logging: None,
) -> Quarantined:
    """The commands connected to the in-memory broker, with the fixture's error store's file."""
    monkeypatch.setattr(quarantine_cli, "connected", lambda settings: connected(quarantined.broker))
    monkeypatch.setattr(migration_cli, "connected", lambda settings: connected(quarantined.broker))
    monkeypatch.setattr(
        quarantine_cli, "open_error_store", lambda url: _Unclosed(quarantined.store)
    )
    return quarantined


class _Unclosed:
    """The fixture's store, left open when a command closes it."""

    def __init__(self, store: ErrorStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def close(self) -> None:
        """The fixture closes it."""


def test_the_list_command_prints_hostile_values_escaped_and_bodies_only_when_asked(
    cli_broker: Quarantined, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quarantine", "list", "--queue", cli_broker.queue]) == 0
    out = capsys.readouterr().out
    assert out.isascii()
    assert "\x1b" not in out
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 3
    assert all("body" not in line and "body_bytes" not in line for line in lines)
    assert HOSTILE in [line["tenant_property"] for line in lines]
    assert {line["cause"] for line in lines} == {"missing-tenant", "invalid-tenant"}

    assert main(["quarantine", "list", "--queue", cli_broker.queue, "--show-body"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    binary = next(line for line in shown if line["tenant_property"] == HOSTILE)
    assert binary["body_encoding"] == "base64"
    assert base64.b64decode(binary["body"]) == b"\x00\xffbin"
    assert binary["body_length"] == 5
    assert {line.get("body") for line in shown} >= {'{"n": 1}'}


def test_a_body_decoded_from_invalid_utf8_is_shown_as_the_bytes_it_came_as() -> None:
    shown = body_json(b"ok\xff".decode("utf-8", "surrogateescape"))
    assert shown["body_encoding"] == "base64"
    assert base64.b64decode(shown["body"]) == b"ok\xff"
    assert shown["body_length"] == 3


def test_the_redrive_command_records_boost_actor_and_refuses_with_exit_2(
    cli_broker: Quarantined,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("BOOST_ACTOR", "carol")
    message_id = cli_broker.by_property(cli_broker.shared, None)
    argv = ["quarantine", "redrive", "--queue", cli_broker.queue, "--tenant", "org-A"]
    assert main([*argv, "--message-id", "gone-1"]) == 2
    assert "gone-1" in capsys.readouterr().err
    assert main([*argv, "--message-id", message_id]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {
        "redriven": [message_id],
        "count": 1,
        "tenant": "org-A",
        "queue": f"tenant.org-A.{cli_broker.queue}",
    }
    (record,) = recorded(cli_broker.store, 1, tenant=ORG_A, outcome=FailureOutcome.REDRIVE)
    assert "by carol" in record.error_text


# -- migrating dead letters ---------------------------------------------------------------------
def dead_letter(tenant: TenantId, queue: str, message_id: str) -> WireMessage:
    return WireMessage(
        body=json.dumps({"tenantUUID": tenant.value}),
        properties={
            TENANT_PROPERTY: tenant.value,
            MESSAGE_ID_PROPERTY: message_id,
            ORIGINAL_QUEUE_PROPERTY: queue,
            DEAD_LETTER_REASON_PROPERTY: "exhausted",
            ATTEMPT_PROPERTY: "5",
        },
    )


def test_migrate_moves_a_tenants_dead_letters_where_dlq_redrive_finds_them(
    broker: InMemoryBroker, store: ErrorStore
) -> None:
    queue = unique_queue("cmd")
    for n in range(3):
        broker.put(dead_letter_queue(queue), dead_letter(ORG_A, queue, f"a-{n}"))
    broker.put(dead_letter_queue(queue), dead_letter(ORG_B, queue, "b-0"))
    transport = connected(broker)
    assert migrate_dead_letters(transport, queue, ORG_A, routing=Routing(), idle_s=IDLE) == 3
    own = dead_letter_queue(f"tenant.org-A.{queue}")
    assert [m.properties[MESSAGE_ID_PROPERTY] for m in broker.messages(own)] == [
        "a-0",
        "a-1",
        "a-2",
    ]
    assert [
        m.properties[MESSAGE_ID_PROPERTY] for m in broker.messages(dead_letter_queue(queue))
    ] == ["b-0"]
    admin = DeadLetterAdmin(transport, store)
    assert sorted(admin.redrive(ORG_A, queue, idle_s=IDLE)) == ["a-0", "a-1", "a-2"]
    assert broker.depth(f"tenant.org-A.{queue}") == 3


def test_migrate_refuses_a_queue_still_shared(broker: InMemoryBroker) -> None:
    with pytest.raises(ConfigError, match="shared in this routing"):
        migrate_dead_letters(connected(broker), "cmd.x", ORG_A, routing=Routing(Topology.SHARED))


def test_the_migrate_command_prints_what_it_moved_per_tenant(
    cli_broker: Quarantined, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = cli_broker.queue
    cli_broker.broker.put(dead_letter_queue(queue), dead_letter(ORG_A, queue, "a-0"))
    cli_broker.broker.put(dead_letter_queue(queue), dead_letter(ORG_B, queue, "b-0"))
    argv = ["migrate", "dead-letters", "--queue", queue, "--tenant", "org-A,org-B"]
    assert main(argv) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == [
        {"tenant": "org-A", "queue": queue, "moved": 1},
        {"tenant": "org-B", "queue": queue, "moved": 1},
    ]
    assert cli_broker.broker.depth(dead_letter_queue(queue)) == 0


def test_the_list_command_says_where_it_looked_when_nothing_is_quarantined(
    cli_broker: Quarantined, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quarantine", "list", "--queue", "cmd.none-here"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout stays one JSON object per message: none
    assert "no quarantined messages in DLQ.cmd.none-here.quarantine at " in captured.err


def test_the_list_command_prints_a_table_with_hostile_values_escaped(
    cli_broker: Quarantined, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quarantine", "list", "--queue", cli_broker.queue, "--output", "table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["message", "id", "cause"]
    assert len(lines) == 4
    assert all("\x1b" not in line for line in lines)
    assert {"missing-tenant", "invalid-tenant"} <= {line.split()[1] for line in lines[1:]}
