"""Per-tenant queue statistics on the in-memory broker: the counts a tenant's queues hold, what
cannot be told per tenant said rather than invented, the capability deciding, the command's
table, JSON and refusal, and the Prometheus gauges."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from boost_tenancy import TenantId, TenantProducer
from boost_tenancy.cli import common as cli_common
from boost_tenancy.cli import main
from boost_tenancy.errors import QueueStatsUnavailableError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.ops.stats import NOT_REPORTED, SHARED_QUEUE, QueueRow, TenantStats, stats_table
from boost_tenancy.ops.stats_metrics import queue_gauges
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.routing import Routing, Topology, parked_queue
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.base import QueueStats, Transport, queue_stats_reader
from boost_tenancy.transports.capabilities import TransportCapabilities
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.statistics import classic_queue_stats, decode_map_json
from tests.conftest import Inbox, unique_queue, wait_until
from tests.no_statistics import without_statistics
from tests.stats_scenario import HELD, WAITING, backlog

ORG_A, ORG_B = TenantId("org-a"), TenantId("org-b")
ROUTED = Routing()


@pytest.fixture
def broker() -> Iterator[InMemoryBroker]:
    broker = InMemoryBroker()
    yield broker
    broker.close()


@pytest.fixture
def transport(broker: InMemoryBroker) -> Iterator[InMemoryTransport]:
    transport = InMemoryTransport(broker)
    transport.connect()
    yield transport
    transport.close()


def message(tenant: TenantId, n: int = 0) -> WireMessage:
    return WireMessage(
        body=json.dumps({"n": n, "tenantUUID": tenant.value}),
        properties={"tenantUUID": tenant.value},
    )


# -- the counts -----------------------------------------------------------------------------------


def test_a_runners_backlog_is_counted_exactly_and_only_for_its_tenant(
    broker: InMemoryBroker, transport: InMemoryTransport, tmp_path: Path
) -> None:
    queue = unique_queue("cmd")
    # Another tenant's messages of the same queue count for that tenant only.
    TenantProducer(transport).send(queue, ORG_B, {"kind": "plain"})
    with backlog(InMemoryTransport(broker), transport, queue, ORG_A, tmp_path):
        rows = TenantStats(transport).rows_for([ORG_A, ORG_B], [queue])
    a, b = rows
    assert (a.tenant, a.queue, a.topology) == (ORG_A, queue, Topology.ROUTED)
    assert a.broker_queue == f"tenant.org-a.{queue}"
    assert a.exists
    assert a.counts() == {
        "depth": WAITING,
        "in_flight": HELD,
        "scheduled": None,
        "dead_lettered": 1,
        "quarantined": 1,
        "parked": 0,
    }
    assert a.unavailable == {"scheduled": NOT_REPORTED}
    assert (b.depth, b.in_flight, b.dead_lettered, b.quarantined) == (1, 0, 0, 0)


def test_the_classic_model_counts_waiting_and_in_flight_apart_and_no_scheduled(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("q")
    for n in range(5):
        transport.send(queue, message(ORG_A, n))
    transport.send(queue, message(ORG_A, 99), delay_ms=60_000)
    inbox = Inbox()
    transport.subscribe(queue, selector=None, prefetch=2, on_delivery=inbox)
    assert wait_until(lambda: len(inbox) == 2)
    missing = unique_queue("missing")

    stats = transport.queue_stats([queue, missing])

    # Classic's scheduler holds the delayed message outside the queue and counts it nowhere.
    assert stats == {queue: QueueStats(waiting=3, in_flight=2, scheduled=None), missing: None}
    counted = stats[queue]
    assert counted is not None
    assert counted.stored == 5
    # Asking created nothing.
    assert transport.queue_stats([missing]) == {missing: None}
    assert broker.queue_stats([missing]) == {missing: None}


def test_queues_the_broker_does_not_have_count_zero_and_are_named(
    transport: InMemoryTransport,
) -> None:
    queue = unique_queue("cmd")
    (row,) = TenantStats(transport).rows(ORG_A, [queue])
    assert not row.exists
    assert (row.depth, row.in_flight, row.dead_lettered, row.quarantined, row.parked) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert f"the broker has no queue tenant.org-a.{queue} yet" in stats_table([row])


def test_dead_letters_quarantine_and_parked_are_read_from_their_own_queues(
    transport: InMemoryTransport,
) -> None:
    queue = unique_queue("cmd")
    own = ROUTED.physical(queue, ORG_A)
    for name, count in (
        (dead_letter_queue(own), 2),
        (quarantine_queue(own), 3),
        (parked_queue(queue, ORG_A), 4),
        # The shared queue's dead letters are nobody's in particular: not counted for org-a.
        (dead_letter_queue(queue), 5),
    ):
        for n in range(count):
            transport.send(name, message(ORG_A, n))
    (row,) = TenantStats(transport, routing=ROUTED).rows(ORG_A, [queue])
    assert (row.dead_lettered, row.quarantined, row.parked) == (2, 3, 4)


def test_a_shared_queue_says_what_is_not_available_per_tenant_instead_of_inventing_it(
    transport: InMemoryTransport,
) -> None:
    queue = unique_queue("cmd")
    shared = Routing(Topology.SHARED)
    TenantProducer(transport, routing=shared).send(queue, ORG_A, {"n": 1})
    transport.send(parked_queue(queue, ORG_A), message(ORG_A))
    (row,) = TenantStats(transport, routing=shared).rows(ORG_A, [queue])
    assert row.broker_queue == queue
    assert row.exists
    assert row.counts() == {
        "depth": None,
        "in_flight": None,
        "scheduled": None,
        "dead_lettered": None,
        "quarantined": None,
        "parked": 1,
    }
    assert set(row.unavailable.values()) == {SHARED_QUEUE}
    table = stats_table([row])
    assert "n/a" in table
    assert "not available per tenant on a shared queue" in table


# -- the capability decides -----------------------------------------------------------------------


def test_a_broker_without_statistics_is_refused() -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    transport = without_statistics(InMemoryTransport(broker))
    transport.connect()
    try:
        assert not transport.capabilities.queue_statistics
        with pytest.raises(QueueStatsUnavailableError):
            TenantStats(transport).rows(ORG_A, ["cmd.x"])
        with pytest.raises(QueueStatsUnavailableError):
            transport.queue_stats(["cmd.x"])
    finally:
        transport.close()
        broker.close()


class _Reporting:
    """A transport of no known broker that reports scheduled messages per queue."""

    def __init__(self, *, declared: bool, stats: Mapping[str, QueueStats | None]) -> None:
        self.capabilities = TransportCapabilities(
            server_side_selectors=False,
            native_delivery_count=False,
            delayed_delivery=True,
            atomic_forward=False,
            atomic_batches=False,
            prefetch_counts_messages=True,
            queue_statistics=declared,
        )
        self._stats = stats
        self.asked: list[Sequence[str]] = []

    def queue_stats(self, queues: Sequence[str]) -> Mapping[str, QueueStats | None]:
        self.asked.append(queues)
        return self._stats


def test_the_capability_decides_not_the_method_nor_the_broker() -> None:
    undeclared = _Reporting(declared=False, stats={})
    with pytest.raises(QueueStatsUnavailableError, match="no queue statistics"):
        queue_stats_reader(cast(Transport, undeclared))
    assert undeclared.asked == []

    own = ROUTED.physical("cmd.x", ORG_A)
    declared = _Reporting(
        declared=True, stats={own: QueueStats(waiting=1, in_flight=0, scheduled=2)}
    )
    (row,) = TenantStats(cast(Transport, declared)).rows(ORG_A, ["cmd.x"])
    assert (row.depth, row.scheduled) == (1, 2)
    assert row.unavailable == {}
    # One request for every queue of the row.
    assert sorted(declared.asked[0]) == sorted(
        [own, dead_letter_queue(own), quarantine_queue(own), parked_queue("cmd.x", ORG_A)]
    )


def test_capabilities_are_declared_per_broker() -> None:
    assert BrokerFlavour.CLASSIC.capabilities.queue_statistics
    assert BrokerFlavour.ARTEMIS.capabilities.queue_statistics  # its management address
    assert not BrokerFlavour.OTHER.capabilities.queue_statistics
    assert {f: f.capabilities().queue_statistics for f in AmqpFlavour} == {
        f: f is AmqpFlavour.ARTEMIS for f in AmqpFlavour
    }


# -- Classic's answer -----------------------------------------------------------------------------

# A reply of ActiveMQ Classic 5.17's statistics plugin to a STOMP subscription with
# transformation: jms-map-json, for a queue holding 5 messages, 2 of them delivered and not acked.
CLASSIC_REPLY = (
    b'{"map":{"entry":[{"string":"dequeueCount","long":0},{"string":"averageMessageSize",'
    b'"long":1026},{"string":["brokerId","ID:vm-32841-1795426806179-0:1"]},{"string":'
    b'"memoryUsage","long":5130},{"string":"consumerCount","long":1},{"string":"minEnqueueTime",'
    b'"double":2},{"string":"memoryPercentUsage","int":0},{"string":"averageEnqueueTime",'
    b'"double":31.5},{"string":"messagesCached","long":0},{"string":"expiredCount","long":0},'
    b'{"string":"inflightCount","long":2},{"string":"maxEnqueueTime","double":61},{"string":'
    b'"dispatchCount","long":2},{"string":"size","long":5},{"string":["destinationName",'
    b'"queue:\\/\\/probe.stats.17d152b2"]},{"string":"producerCount","long":0},{"string":'
    b'"memoryLimit","long":268435456},{"string":["brokerName","boost"]},{"string":'
    b'"enqueueCount","long":5}]}}'
)


def test_classic_reply_is_decoded_and_size_includes_the_in_flight() -> None:
    entries = decode_map_json(CLASSIC_REPLY)
    assert entries["destinationName"] == "queue://probe.stats.17d152b2"
    assert (entries["size"], entries["inflightCount"], entries["brokerName"]) == (5, 2, "boost")
    assert classic_queue_stats(entries) == QueueStats(waiting=3, in_flight=2, scheduled=None)


def test_classic_end_of_list_and_single_entries_are_decoded() -> None:
    assert decode_map_json(b'{"map":""}') == {}
    assert decode_map_json(b'{"map":{"entry":{"string":"size","long":7}}}') == {"size": 7}


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"list":[]}', b'{"map":{"entry":[{"string":"size"}]}}', b'{"map":{}}'],
)
def test_a_reply_that_is_not_a_map_is_a_transport_error(body: bytes) -> None:
    with pytest.raises(TransportError):
        decode_map_json(body)


def test_a_reply_without_the_counts_is_a_transport_error() -> None:
    with pytest.raises(TransportError, match="inflightCount"):
        classic_queue_stats({"size": 3})


# -- the command ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """main() configures structlog onto the captured stderr; later tests must not write there."""
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)


def _cli_on(broker: InMemoryBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("BOOST_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(cli_common, "open_broker", lambda settings, env: InMemoryTransport(broker))


def test_stats_command_prints_a_table_and_json_lines(
    broker: InMemoryBroker,
    transport: InMemoryTransport,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _cli_on(broker, monkeypatch)
    queue, other = unique_queue("cmd"), unique_queue("cmd")
    producer = TenantProducer(transport)
    for n in range(3):
        producer.send(queue, ORG_A, {"n": n})

    assert main(["stats", "--tenant", "org-a", "--queue", f"{queue},{other}"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert re.split(r"\s{2,}", table[0]) == [
        "tenant",
        "queue",
        "topology",
        "broker queue",
        "depth",
        "in flight",
        "scheduled",
        "dead-lettered",
        "quarantined",
        "parked",
    ]
    assert re.split(r"\s{2,}", table[1]) == [
        "org-a",
        queue,
        "routed",
        f"tenant.org-a.{queue}",
        "3",
        "0",
        "n/a",
        "0",
        "0",
        "0",
    ]
    assert f"n/a scheduled: {NOT_REPORTED} ({queue}, {other})" in table

    assert main(["stats", "--tenant", "org-a", "--queue", queue, "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {
        "tenant": "org-a",
        "queue": queue,
        "topology": "routed",
        "broker_queue": f"tenant.org-a.{queue}",
        "exists": True,
        "depth": 3,
        "in_flight": 0,
        "scheduled": None,
        "dead_lettered": 0,
        "quarantined": 0,
        "parked": 0,
        "unavailable": {"scheduled": NOT_REPORTED},
    }
    assert main(["stats", "--tenant", "org-a", "--queue", queue, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(line)


def test_stats_command_exits_2_with_one_line_where_the_broker_gives_no_statistics(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    try:
        for name in [n for n in os.environ if n.startswith("BOOST_")]:
            monkeypatch.delenv(name)
        monkeypatch.setattr(
            cli_common,
            "open_broker",
            lambda settings, env: without_statistics(InMemoryTransport(broker)),
        )
        assert main(["stats", "--tenant", "org-a", "--queue", "cmd.x"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        (line,) = captured.err.strip().splitlines()
        assert line.startswith("boost-tenancy: error: ")
        assert "no queue statistics" in line
    finally:
        broker.close()


def test_stats_command_refuses_an_invalid_tenant(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--tenant", "org a", "--queue", "cmd.x"]) == 2
    assert "invalid tenant id" in capsys.readouterr().err


# -- Prometheus -----------------------------------------------------------------------------------


def _row(tenant: TenantId, queue: str, **counts: int | None) -> QueueRow:
    values: dict[str, int | None] = {
        "depth": 0,
        "in_flight": 0,
        "scheduled": None,
        "dead_lettered": 0,
        "quarantined": 0,
        "parked": 0,
        **counts,
    }
    return QueueRow(
        tenant=tenant,
        queue=queue,
        topology=Topology.ROUTED,
        broker_queue=ROUTED.physical(queue, tenant),
        exists=True,
        **values,  # type: ignore[arg-type]  # every count, by name
    )


def _samples(text: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


def test_gauges_are_summed_across_tenants_unless_the_tenant_label_is_asked_for() -> None:
    rows = [
        _row(ORG_A, "cmd.a", depth=3, in_flight=1, dead_lettered=2, quarantined=1),
        _row(ORG_B, "cmd.a", depth=4, in_flight=0, dead_lettered=0, quarantined=0),
        _row(ORG_A, "cmd.b", depth=1),
    ]
    summed = queue_gauges(rows)
    assert "# TYPE boost_tenancy_queue_depth gauge" in summed
    assert "tenant=" not in summed
    samples = _samples(summed)
    assert samples['boost_tenancy_queue_depth{queue="cmd.a"}'] == "7"
    assert samples['boost_tenancy_queue_depth{queue="cmd.b"}'] == "1"
    assert samples['boost_tenancy_queue_in_flight{queue="cmd.a"}'] == "1"
    assert samples['boost_tenancy_queue_dead_lettered{queue="cmd.a"}'] == "2"
    assert samples['boost_tenancy_queue_quarantined{queue="cmd.a"}'] == "1"

    labelled = _samples(queue_gauges(rows, tenant_label=True))
    assert labelled['boost_tenancy_queue_depth{tenant="org-a",queue="cmd.a"}'] == "3"
    assert labelled['boost_tenancy_queue_depth{tenant="org-b",queue="cmd.a"}'] == "4"
    assert labelled['boost_tenancy_queue_depth{tenant="org-a",queue="cmd.b"}'] == "1"


def test_a_count_the_broker_cannot_tell_is_left_out_not_reported_as_zero() -> None:
    shared = QueueRow(
        tenant=ORG_A,
        queue="cmd.s",
        topology=Topology.SHARED,
        broker_queue="cmd.s",
        exists=True,
        depth=None,
        in_flight=None,
        scheduled=None,
        dead_lettered=None,
        quarantined=None,
        parked=2,
    )
    text = queue_gauges([shared, _row(ORG_B, "cmd.r", scheduled=5)], tenant_label=True)
    samples = _samples(text)
    assert not any('queue="cmd.s"' in name and "parked" not in name for name in samples)
    assert samples['boost_tenancy_queue_parked{tenant="org-a",queue="cmd.s"}'] == "2"
    assert samples['boost_tenancy_queue_scheduled{tenant="org-b",queue="cmd.r"}'] == "5"
    assert 'boost_tenancy_queue_scheduled{tenant="org-a"' not in text
