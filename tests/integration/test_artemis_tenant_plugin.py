"""The project's Artemis plugin (brokers/artemis, TenantPlugin) on a real Artemis 2.44: a broker of
its own started with one shared queue listed and no tenant listed.

- every tenant's messages sent to the shared queue, over STOMP and over AMQP, are stored in
  tenant.<tenant>.<queue> at send time, in order, with the original address kept;
- a message without a valid tenantUUID goes to DLQ.<queue>.quarantine with the reason, never to
  a tenant's queue, and nothing stays on the shared queue;
- a runner of the toolkit makes no divert per tenant there and handles what the plugin routed;
- each tenant's limits (largest message, messages/s, backlog) refuse its sends at the broker,
  for a producer that is not the toolkit, while another tenant's sends go through; a policy
  changed in the toolkit's policy store applies without a restart.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import stomp

from boost_tenancy import (
    BoostTenancyError,
    ProcessorRunner,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProducer,
)
from boost_tenancy.application import AppSettings
from boost_tenancy.cli import build_parser
from boost_tenancy.ops.stats import broker_counts_of
from boost_tenancy.quotas.policy_store import SqlPolicyStore, open_policy_store
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.amqp import AmqpSettings, AmqpTransport
from boost_tenancy.transports.artemis_management import (
    PLUGIN_DIVERT_PREFIX,
    ManagedRoutes,
    divert_names,
    list_diverts,
)
from boost_tenancy.transports.base import send_route_installer
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from devtools.artemis_plugin import plugin_xml
from devtools.local_artemis import (
    HOST,
    PASSWORD,
    USER,
    ArtemisSettings,
    LocalArtemis,
    ensure_client_jar,
)
from tests.conftest import unavailable, wait_until
from tests.integration.send_time_support import Recorder
from tests.jms.peer import JmsPeer, compile_peer, jms_available

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("runs an Artemis of its own with the project's plugin"),
    pytest.mark.own_broker("artemis"),
]

OFFSET = 1400
"""Ports 63113 (STOMP), 63116 (CORE), 7172 (AMQP): clear of every other broker of the suite."""
QUEUE = "cmd.aplugin"
REFRESH_S = 1


@dataclass(frozen=True)
class PluginBroker:
    broker: LocalArtemis
    policies: SqlPolicyStore

    @property
    def stomp_port(self) -> int:
        return self.broker.settings.stomp_port

    @property
    def stomp(self) -> StompSettings:
        return StompSettings(host=HOST, port=self.stomp_port, username=USER, password=PASSWORD)

    @property
    def amqp(self) -> AmqpSettings:
        return AmqpSettings(
            host=HOST, port=self.broker.settings.amqp_port, username=USER, password=PASSWORD
        )


@pytest.fixture(scope="module")
def plugin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PluginBroker]:
    if shutil.which("mvn") is None or shutil.which("java") is None:
        unavailable("the Artemis plugin is built with Maven and runs on Java 17")
    home = tmp_path_factory.mktemp("artemis-plugin")
    policy_db = home / "policies.sqlite3"
    policies = open_policy_store(str(policy_db))  # the table exists before the broker reads it
    settings = ArtemisSettings(
        home=home / "broker",
        port_offset=OFFSET,
        plugins_xml=plugin_xml(
            [QUEUE],
            {
                "policy-store-url": f"jdbc:sqlite:{policy_db}",
                "policy-refresh-seconds": str(REFRESH_S),
            },
        ),
    )
    broker = LocalArtemis(settings)
    broker.start()
    try:
        yield PluginBroker(broker, policies)
    finally:
        broker.stop()
        policies.close()


class Frames(stomp.ConnectionListener):  # type: ignore[misc]
    """What a raw STOMP connection received: messages, receipts, errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[stomp.utils.Frame] = []
        self.receipts: set[str] = set()
        self.errors: list[stomp.utils.Frame] = []

    def on_message(self, frame: stomp.utils.Frame) -> None:
        with self.lock:
            self.messages.append(frame)

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        with self.lock:
            self.receipts.add(frame.headers["receipt-id"])

    def on_error(self, frame: stomp.utils.Frame) -> None:
        with self.lock:
            self.errors.append(frame)


def connect(port: int) -> tuple[stomp.Connection12, Frames]:
    connection = stomp.Connection12([(HOST, port)], heartbeats=(0, 0))
    frames = Frames()
    connection.set_listener("", frames)
    connection.connect(USER, PASSWORD, wait=True)
    return connection, frames


def send_all(
    port: int, sends: list[tuple[str | None, str]], queue: str = QUEUE
) -> tuple[int, list[str]]:
    """Plain STOMP sends, as a service that is not the toolkit sends: (tenantUUID or none,
    body). Returns how many the broker confirmed and the error messages of those it refused."""
    connection, frames = connect(port)
    receipts = []
    try:
        for tenant, body in sends:
            receipt = uuid.uuid4().hex
            receipts.append(receipt)
            headers = {"persistent": "true", "receipt": receipt}
            if tenant is not None:
                headers["tenantUUID"] = tenant
            connection.send(f"/queue/{queue}", body=body, headers=headers)
        assert wait_until(lambda: len(frames.receipts) + len(frames.errors) >= len(sends), 20)
    finally:
        connection.disconnect()
    confirmed = sum(1 for r in receipts if r in frames.receipts)
    return confirmed, [e.headers.get("message", "") + e.body for e in frames.errors]


def send_each(
    port: int, sends: list[tuple[str | None, str]], queue: str = QUEUE
) -> tuple[int, list[str]]:
    """send_all, each message on a connection of its own: Artemis closes a STOMP connection
    whose send it refused (the ERROR frame ends it, as STOMP has it), so a refusal must not
    stand for the sends after it."""
    confirmed, errors = 0, []
    for send in sends:
        one, error = send_all(port, [send], queue)
        confirmed += one
        errors += error
    return confirmed, errors


def read_all(
    port: int, queue: str, expected: int, timeout: float = 10.0
) -> list[stomp.utils.Frame]:
    connection, frames = connect(port)
    try:
        connection.subscribe(f"/queue/{queue}", id="read", ack="auto")
        wait_until(lambda: len(frames.messages) >= expected, timeout)
        if expected == 0:
            time.sleep(1.0)
    finally:
        connection.disconnect()
    return frames.messages


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_every_tenant_is_stored_in_its_own_queue_at_send_time(plugin_broker: PluginBroker) -> None:
    port = plugin_broker.stomp_port
    heavy, light = fresh("org-heavy"), fresh("org-light")
    sends = [(heavy, f"h{n}") for n in range(300)] + [(light, f"l{n}") for n in range(20)]
    assert send_all(port, sends) == (320, [])
    light_frames = read_all(port, f"tenant.{light}.{QUEUE}", 20)
    assert [f.body for f in light_frames] == [f"l{n}" for n in range(20)]  # in the order sent
    assert {f.headers["tenantUUID"] for f in light_frames} == {light}
    assert {f.headers["_AMQ_ORIG_ADDRESS"] for f in light_frames} == {QUEUE}
    assert len(read_all(port, f"tenant.{heavy}.{QUEUE}", 300)) == 300
    assert read_all(port, QUEUE, 0) == []


def test_messages_sent_over_amqp_are_routed_too(plugin_broker: PluginBroker) -> None:
    tenant = fresh("org-amqp")
    transport = AmqpTransport(plugin_broker.amqp)
    transport.connect()
    try:
        # A shared topology: the producer sends to the shared queue, as a Java service does.
        producer = TenantProducer(transport, routing=Routing(default="shared"))
        for n in range(5):
            producer.send(QUEUE, tenant, {"n": n})
    finally:
        transport.close()
    frames = read_all(plugin_broker.stomp_port, f"tenant.{tenant}.{QUEUE}", 5)
    assert len(frames) == 5
    assert {f.headers["tenantUUID"] for f in frames} == {tenant}


@pytest.mark.parametrize(
    ("tenant", "error_type"),
    [(None, "MissingTenant"), ("bad.tenant", "InvalidTenant"), ("x" * 65, "InvalidTenant")],
)
def test_a_message_without_a_valid_tenant_is_quarantined_with_the_reason(
    plugin_broker: PluginBroker, tenant: str | None, error_type: str
) -> None:
    port = plugin_broker.stomp_port
    body = f"nobody-{uuid.uuid4().hex[:8]}"
    assert send_all(port, [(tenant, body)]) == (1, [])
    quarantined = [f for f in read_all(port, f"DLQ.{QUEUE}.quarantine", 1) if f.body == body]
    assert len(quarantined) == 1
    headers = quarantined[0].headers
    assert headers["boostDeadLetterReason"] == "tenancy-violation"
    assert headers["boostErrorType"] == error_type
    assert headers["boostOriginalQueue"] == QUEUE
    assert "tenantUUID" in headers["boostError"]
    assert read_all(port, QUEUE, 0) == []


def test_a_runner_makes_no_divert_per_tenant_and_handles_what_the_plugin_routed(
    plugin_broker: PluginBroker, tmp_path: Path
) -> None:
    tenant = fresh("org-run")
    settings = plugin_broker.stomp
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    processor = Recorder(QUEUE)
    runner = ProcessorRunner(
        processor,
        StompTransport(settings),
        [tenant],
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10),
    )
    runner.start()
    try:
        assert runner.send_routes_added == 0  # the plugin routes the queue: no divert made
        assert (
            send_all(plugin_broker.stomp_port, [(tenant, f'{{"n": {n}}}') for n in range(10)])[0]
            == 10
        )
        assert wait_until(lambda: len(processor.seen) == 10, 20)
        check = StompTransport(settings)
        check.connect()
        try:
            installer = send_route_installer(check)
            assert installer is not None
            assert [r for r in installer.send_routes() if r.tenant == TenantId(tenant)] == []
        finally:
            check.close()
    finally:
        runner.stop(grace_s=5)
        store.close()


def test_send_routes_lists_the_queues_the_plugin_routes_for_every_tenant(
    plugin_broker: PluginBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = StompTransport(plugin_broker.stomp)
    check.connect()
    try:
        installer = send_route_installer(check)
        assert installer is not None
        assert installer.routed_by_broker() == [QUEUE]
    finally:
        check.close()
    env = {
        "BOOST_BROKER_URL": f"stomp://{HOST}:{plugin_broker.stomp_port}",
        "BOOST_BROKER_USER": USER,
        "BOOST_BROKER_PASSWORD": PASSWORD,
    }
    for name, value in env.items():  # the command connects with what the environment says
        monkeypatch.setenv(name, value)
    for queue, expected in ((QUEUE, 1), ("cmd.not-listed", 0)):
        args = build_parser().parse_args(["send-routes", "--queue", queue])
        assert args.handler(args, AppSettings.from_env(env)) == 0
        shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [row for row in shown if row["by"] == "broker plugin"] == [
            {
                "queue": QUEUE,
                "tenant": "*",
                "target": f"tenant.<tenant>.{QUEUE}",
                "by": "broker plugin",
                "removed": False,
            }
        ][:expected]


def test_a_tenant_over_its_largest_message_is_refused_at_the_broker_and_others_are_not(
    plugin_broker: PluginBroker,
) -> None:
    small, other = fresh("org-small"), fresh("org-other")
    plugin_broker.policies.set(TenantId(small), {"max_message_bytes": 2000}, actor="test")
    time.sleep(REFRESH_S * 3)
    confirmed, errors = send_each(
        plugin_broker.stomp_port, [(small, "x" * 3000), (small, "x" * 100), (other, "x" * 3000)]
    )
    assert (confirmed, len(errors)) == (2, 1)
    assert "AMQ339011" in errors[0]  # STOMP is told the send failed, not why
    # Straight to the tenant's own queue, as the toolkit's producers send: limited alike.
    direct = f"tenant.{small}.{QUEUE}"
    assert send_each(plugin_broker.stomp_port, [(small, "x" * 3000)], queue=direct)[0] == 0
    assert send_each(plugin_broker.stomp_port, [(small, "x" * 100)], queue=direct)[0] == 1
    assert [f.body for f in read_all(plugin_broker.stomp_port, direct, 2)] == ["x" * 100] * 2


def test_an_amqp_producer_over_a_limit_is_told_why_and_sends_on(
    plugin_broker: PluginBroker,
) -> None:
    small = fresh("org-amqp-small")
    plugin_broker.policies.set(TenantId(small), {"max_message_bytes": 2000}, actor="test")
    time.sleep(REFRESH_S * 3)
    transport = AmqpTransport(plugin_broker.amqp)
    transport.connect()
    try:
        producer = TenantProducer(transport, routing=Routing(default="shared"))
        with pytest.raises(BoostTenancyError, match=r"refused \(size\).*over tenant .*2000 bytes"):
            producer.send(QUEUE, small, {"big": "x" * 3000})
        producer.send(QUEUE, small, {"n": 1})  # the same connection sends on
    finally:
        transport.close()
    assert len(read_all(plugin_broker.stomp_port, f"tenant.{small}.{QUEUE}", 1)) == 1


def test_a_tenant_over_its_rate_is_refused_while_another_sends_freely_until_its_policy_changes(
    plugin_broker: PluginBroker,
) -> None:
    slow, fast = fresh("org-slow"), fresh("org-fast")
    plugin_broker.policies.set(TenantId(slow), {"messages_per_s": 5.0}, actor="test")
    time.sleep(REFRESH_S * 3)
    started = time.monotonic()
    confirmed, errors = send_each(plugin_broker.stomp_port, [(slow, f"s{n}") for n in range(40)])
    elapsed = time.monotonic() - started
    # A bucket of one second at 5/s, full at first and refilled while the sends went.
    assert 5 <= confirmed <= 5 + 5 * elapsed + 1
    assert len(errors) == 40 - confirmed > 0
    assert send_each(plugin_broker.stomp_port, [(fast, f"f{n}") for n in range(40)]) == (40, [])
    # Changed at run time, in the store the toolkit's `policy set` writes: no restart.
    plugin_broker.policies.set(TenantId(slow), {"messages_per_s": 10_000.0}, actor="test")
    time.sleep(REFRESH_S * 3)
    assert send_each(plugin_broker.stomp_port, [(slow, f"t{n}") for n in range(40)]) == (40, [])


def test_a_tenant_queue_over_its_backlog_quota_refuses_the_producer(
    plugin_broker: PluginBroker,
) -> None:
    full, other = fresh("org-full"), fresh("org-roomy")
    plugin_broker.policies.set(TenantId(full), {"max_queued_messages": 3}, actor="test")
    time.sleep(REFRESH_S * 3)
    confirmed, errors = send_each(plugin_broker.stomp_port, [(full, f"q{n}") for n in range(6)])
    assert confirmed == 3
    assert len(errors) == 3
    assert send_all(plugin_broker.stomp_port, [(other, f"o{n}") for n in range(6)]) == (6, [])
    assert len(read_all(plugin_broker.stomp_port, f"tenant.{full}.{QUEUE}", 3)) == 3
    assert counts_of(plugin_broker, full) == {("routed", ""): 3, ("refused", "backlog"): 3}


def counts_of(plugin_broker: PluginBroker, tenant: str) -> dict[tuple[str, str], int]:
    """What the plugin counted for tenant, asked as `boost-tenancy stats` asks (over STOMP)."""
    transport = StompTransport(plugin_broker.stomp)
    transport.connect()
    try:
        counts = broker_counts_of(transport, TenantId(tenant))
    finally:
        transport.close()
    assert counts is not None
    assert {c.queue for c in counts} <= {QUEUE}
    return {(c.event, c.reason): c.count for c in counts}


def test_the_broker_counts_what_it_routed_and_refused_per_tenant_over_either_protocol(
    plugin_broker: PluginBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = fresh("org-counted")
    plugin_broker.policies.set(TenantId(tenant), {"max_message_bytes": 1000}, actor="test")
    time.sleep(REFRESH_S * 3)
    confirmed, errors = send_each(plugin_broker.stomp_port, [(tenant, "x" * 2000), (tenant, "ok")])
    assert (confirmed, len(errors)) == (1, 1)
    assert counts_of(plugin_broker, tenant) == {("routed", ""): 1, ("refused", "size"): 1}
    transport = AmqpTransport(plugin_broker.amqp)
    transport.connect()
    try:
        over_amqp = broker_counts_of(transport, TenantId(tenant))
    finally:
        transport.close()
    assert over_amqp is not None
    assert {(c.event, c.reason, c.count) for c in over_amqp} == {
        ("routed", "", 1),
        ("refused", "size", 1),
    }
    # The operator's command shows them under the tenant's queue counts. Its handler is called
    # as main() calls it, without main()'s logging set-up, which would bind the test's stderr.
    env = {
        "BOOST_BROKER_URL": f"stomp://{HOST}:{plugin_broker.stomp_port}",
        "BOOST_BROKER_USER": USER,
        "BOOST_BROKER_PASSWORD": PASSWORD,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["stats", "--tenant", tenant, "--queue", QUEUE])
    assert args.handler(args, AppSettings.from_env(env)) == 0
    out = capsys.readouterr().out
    assert "at the broker (tenant plugin)" in out
    assert [line.split()[1:] for line in out.splitlines() if line.startswith(QUEUE + " ")][-2:] == [
        ["refused", "size", "1"],
        ["routed", "-", "1"],
    ]


def test_a_transacted_send_is_counted_when_it_commits_and_never_when_it_rolls_back(
    plugin_broker: PluginBroker,
) -> None:
    tenant = fresh("org-transacted")
    connection, frames = connect(plugin_broker.stomp_port)
    try:
        for outcome in ("abort", "commit"):
            tx = connection.begin()
            connection.send(
                f"/queue/{QUEUE}",
                body=outcome,
                headers={"persistent": "true", "tenantUUID": tenant},
                transaction=tx,
            )
            receipt = uuid.uuid4().hex
            (connection.abort if outcome == "abort" else connection.commit)(
                tx, headers={"receipt": receipt}
            )
            assert wait_until(lambda r=receipt: r in frames.receipts, 10)
            if outcome == "abort":
                assert counts_of(plugin_broker, tenant) == {}
    finally:
        connection.disconnect()
    assert counts_of(plugin_broker, tenant) == {("routed", ""): 1}
    assert [f.body for f in read_all(plugin_broker.stomp_port, f"tenant.{tenant}.{QUEUE}", 1)] == [
        "commit"
    ]


def test_the_plugins_divert_is_one_per_listed_queue(plugin_broker: PluginBroker) -> None:
    """Whatever the number of tenants sent so far, the broker has one divert for the queue."""
    transport = StompTransport(plugin_broker.stomp)
    transport.connect()
    try:
        installer = send_route_installer(transport)
        assert isinstance(installer, ManagedRoutes)
        names = installer.management_session(
            lambda session: divert_names(session.run([list_diverts()])[0])
        )
    finally:
        transport.close()
    assert [n for n in names if n.startswith(PLUGIN_DIVERT_PREFIX)] == [
        PLUGIN_DIVERT_PREFIX + QUEUE
    ]


@pytest.fixture(scope="module")
def java_producer(tmp_path_factory: pytest.TempPathFactory) -> JmsPeer:
    """A Java service's producer: the Artemis JMS client over CORE, logged in."""
    reason = jms_available()
    if reason is not None:
        unavailable(f"JMS peer unavailable: {reason}")
    peer = compile_peer(tmp_path_factory.mktemp("jms-peer-classes"))
    client = ensure_client_jar(ArtemisSettings().cache)
    return dataclasses.replace(peer, artemis_client=client, login=(USER, PASSWORD))


def test_a_java_producer_over_its_tenants_rate_is_refused_and_another_tenant_is_not(
    plugin_broker: PluginBroker, java_producer: JmsPeer
) -> None:
    url = f"tcp://{HOST}:{plugin_broker.broker.settings.core_port}"
    limited, other = fresh("org-java-slow"), fresh("org-java-free")
    plugin_broker.policies.set(TenantId(limited), {"messages_per_s": 2.0}, actor="test")
    time.sleep(REFRESH_S * 3)
    with pytest.raises(RuntimeError, match=r"refused \(rate\): tenant org-java-slow-\w+ is over"):
        java_producer.send_each(url, QUEUE, '{"n": 0}', [limited] * 20)
    java_producer.send_each(url, QUEUE, '{"n": 0}', [other] * 20)
    assert len(read_all(plugin_broker.stomp_port, f"tenant.{other}.{QUEUE}", 20)) == 20
    kept = read_all(plugin_broker.stomp_port, f"tenant.{limited}.{QUEUE}", 2, timeout=3.0)
    assert 2 <= len(kept) < 20  # the bucket's burst, then the refusal ended the producer
    assert counts_of(plugin_broker, limited)[("refused", "rate")] >= 1
