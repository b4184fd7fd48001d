"""Routes at send time on Artemis (exclusive diverts made through the management address): the
requests and replies, the in-memory model of what Artemis does with them, the STOMP session that
asks, and the runner that installs its tenants' routes at start.

Checked against Artemis's source and the in-memory model, not a running Artemis (none runs
here): transports/artemis_management.py names the source of each behaviour.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from stomp.utils import parse_frame

from boost_tenancy import HandlerContext, IncomingMessage, ProcessorRunner, TenantProcessor
from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli import main
from boost_tenancy.errors import ConfigError, TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.dead_letter import quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.amqp_peer import AmqpPeer, PeerFlavour
from boost_tenancy.transports.artemis_management import (
    PLUGIN_DIVERT_PREFIX,
    create_divert,
    divert_name,
    divert_operations,
    install,
    queue_operations,
    routes_named,
)
from boost_tenancy.transports.artemis_requests import (
    MANAGEMENT_ADDRESS,
    ManagementError,
    Operation,
    Replies,
    read_reply,
)
from boost_tenancy.transports.base import SendRoute, send_route_installer
from boost_tenancy.transports.registry import open_transport
from boost_tenancy.transports.stomp import BrokerFlavour
from boost_tenancy.transports.stomp.management import _on_reply, _Session
from tests.conftest import wait_until

A, B = TenantId.parse("org-a"), TenantId.parse("org-b")
SHARED = "cmd.docs"
ROUTED = Routing(Topology.ROUTED)


def route(tenant: TenantId, source: str = SHARED) -> SendRoute:
    return SendRoute(source, tenant, ROUTED.physical(source, tenant))


def message(tenant: str | None, body: str = "x") -> WireMessage:
    properties = {} if tenant is None else {"tenantUUID": tenant}
    return WireMessage(body=body, properties=properties)


# -- requests and replies -------------------------------------------------------------------------


def test_every_queue_is_asked_for_and_only_missing_diverts() -> None:
    queues = queue_operations([route(A), route(B)])
    assert [(op.name, json.loads(str(op.params[0]))["name"]) for op in queues] == [
        ("createQueue", SHARED),
        ("createQueue", "tenant.org-a.cmd.docs"),
        ("createQueue", "tenant.org-b.cmd.docs"),
    ]
    # ignoreIfExists as a JSON boolean: a string would pick another overload of createQueue.
    assert json.loads(queues[0].body)[1] is True
    assert queues[0].properties == {
        "_AMQ_ResourceName": "broker",
        "_AMQ_OperationName": "createQueue",
    }
    diverts = divert_operations([route(A), route(B)], existing=[divert_name(route(B))])
    assert [json.loads(str(op.params[0]))["name"] for op in diverts] == [divert_name(route(A))]


class Scripted:
    """A management session whose broker answers as told: operations by name that fail, and
    whether createDivert makes anything."""

    def __init__(self, *, failing: set[str] = frozenset(), makes_diverts: bool = True) -> None:
        self.asked: list[str] = []
        self.diverts: list[str] = []
        self._failing = failing
        self._makes = makes_diverts

    def run(self, ops: Sequence[Operation]) -> list[object]:
        results: list[object] = []
        for op in ops:
            self.asked.append(op.name)
            if op.name in self._failing:
                results.append(None)
                failed = op
                continue
            if op.name == "createDivert" and self._makes:
                self.diverts.append(json.loads(str(op.params[0]))["name"])
            results.append(list(self.diverts) if op.name == "getDivertNames" else None)
        if any(op.name in self._failing for op in ops):
            raise ManagementError(f"refused {failed.name}")
        return results


def test_no_divert_is_asked_for_unless_every_queue_was_made() -> None:
    # Artemis runs each request on its own: a divert sent along with a queue that failed would
    # be made, and drop its tenant's messages.
    session = Scripted(failing={"createQueue"})
    with pytest.raises(ManagementError, match="createQueue"):
        install(session, [route(A), route(B)])
    assert "createDivert" not in session.asked


def test_diverts_are_listed_again_and_one_answered_but_not_made_is_an_error() -> None:
    made = Scripted()
    assert install(made, [route(A), route(B)]) == 2
    assert made.asked[-1] == "getDivertNames"
    assert install(made, [route(A), route(B)]) == 0
    with pytest.raises(ManagementError, match=r"has no divert boost\.divert\.tenant\.org-a"):
        install(Scripted(makes_diverts=False), [route(A)])


class PluginRouted(Scripted):
    """A broker whose tenant plugin routes every queue: making a queue's address makes the
    plugin's divert for it."""

    def run(self, ops: Sequence[Operation]) -> list[object]:
        for op in ops:
            if op.name == "createQueue":
                name = json.loads(str(op.params[0]))["name"]
                if not name.startswith("tenant."):
                    self.diverts.append(PLUGIN_DIVERT_PREFIX + name)
        return super().run(ops)


def test_where_the_plugin_routes_every_queue_only_the_shared_queues_are_made() -> None:
    session = PluginRouted()
    assert install(session, [route(A), route(B), route(A, "cmd.other")]) == 0
    assert session.asked == ["getDivertNames", "createQueue", "createQueue", "getDivertNames"]
    assert install(session, [route(A)]) == 0
    assert session.asked[4:] == ["getDivertNames"], "a routed queue asks nothing more"


def test_a_divert_is_exclusive_anycast_and_filters_on_the_tenant() -> None:
    (config,) = json.loads(create_divert(route(A)).body)
    assert json.loads(config) == {
        "name": "boost.divert.tenant.org-a.cmd.docs",
        "address": SHARED,
        "forwarding-address": "tenant.org-a.cmd.docs",
        "exclusive": True,
        "filter-string": "tenantUUID = 'org-a'",
        "routing-type": "ANYCAST",
    }


def test_replies_give_the_result_or_raise_the_brokers_text() -> None:
    op = Operation("getDivertNames")
    assert read_reply(op, {"_AMQ_OperationSucceeded": "true"}, '[["d1"]]') == ["d1"]
    assert read_reply(op, {"_AMQ_OperationSucceeded": "true"}, None) is None
    with pytest.raises(ManagementError, match="AMQ229019: Queue x already exists"):
        read_reply(
            op, {"_AMQ_OperationSucceeded": "false"}, '["AMQ229019: Queue x already exists"]'
        )
    with pytest.raises(ManagementError, match="not JSON"):
        read_reply(op, {"_AMQ_OperationSucceeded": "true"}, "<html>")
    with pytest.raises(ManagementError, match="refused"):
        read_reply(op, {}, None)  # a reply that does not say it succeeded


# -- the in-memory model ------------------------------------------------------------------------


@pytest.fixture
def artemis() -> Iterator[InMemoryBroker]:
    made = InMemoryBroker(flavour=BrokerFlavour.ARTEMIS)
    yield made
    made.close()


def connected(broker: InMemoryBroker) -> InMemoryTransport:
    transport = InMemoryTransport(broker)
    transport.connect()
    return transport


def test_artemis_stores_a_routed_tenants_message_in_its_queue_and_the_rest_on_the_shared_one(
    artemis: InMemoryBroker,
) -> None:
    transport = connected(artemis)
    installer = send_route_installer(transport)
    assert installer is not None
    assert installer.install_send_routes([route(A), route(B)]) == 2
    assert installer.install_send_routes([route(A), route(B)]) == 0  # kept as they were
    for tenant in ("org-a", "org-b", "org-zed", None):
        artemis.put(SHARED, message(tenant, body=f"from {tenant}"))
    (to_a,) = artemis.messages("tenant.org-a.cmd.docs")
    assert to_a.body == "from org-a"
    assert to_a.properties["_AMQ_ORIG_ADDRESS"] == SHARED
    assert to_a.properties["_AMQ_ORIG_QUEUE"] == "boost.divert.tenant.org-a.cmd.docs"
    assert [m.body for m in artemis.messages("tenant.org-b.cmd.docs")] == ["from org-b"]
    assert [m.body for m in artemis.messages(SHARED)] == ["from org-zed", "from None"]


def test_artemis_drops_a_diverted_copy_whose_target_has_no_queue_and_keeps_a_taken_name(
    artemis: InMemoryBroker,
) -> None:
    config = {
        "name": "tenant.org-a.cmd.docs",  # a queue's name: Artemis makes no divert, says success
        "address": SHARED,
        "forwarding-address": "nowhere",
        "exclusive": True,
        "filter-string": "tenantUUID = 'org-a'",
    }
    artemis.run([Operation("createQueue", (json.dumps({"name": SHARED}), True))])
    artemis.run([Operation("createQueue", (json.dumps({"name": "tenant.org-a.cmd.docs"}), True))])
    assert artemis.run([Operation("createDivert", (json.dumps(config),))]) == [None]
    assert artemis.diverts(SHARED) == {}
    config["name"] = "boost.divert.x"
    artemis.run([Operation("createDivert", (json.dumps(config),))])
    artemis.put(SHARED, message("org-a"))
    assert artemis.messages(SHARED) == [] and artemis.messages("nowhere") == []  # dropped


def test_classic_takes_no_routes_at_run_time(broker: InMemoryBroker) -> None:
    transport = connected(broker)
    assert send_route_installer(transport) is None
    with pytest.raises(TransportError, match="has no management address"):
        transport.install_send_routes([route(A)])


# -- the STOMP session ----------------------------------------------------------------------------


class _Link:
    generation = 1


class _Connection:
    """Takes the frames a session sends and answers each request as Artemis would."""

    def __init__(self, replies: Replies, answer: Any) -> None:
        self.frames: list[Any] = []
        self._replies = replies
        self._answer = answer

    def live(self) -> _Link:
        return _Link()

    def confirm(self, link: object, frames: Sequence[bytes], receipt: str, what: str) -> None:
        for raw in frames:
            frame = parse_frame(raw)
            self.frames.append(frame)
            if frame.cmd == "SEND":
                headers, body = self._answer(frame)
                headers["correlation-id"] = frame.headers["correlation-id"]
                threading.Thread(
                    target=_on_reply(self._replies), args=(1, headers, body.encode())
                ).start()


def test_the_stomp_session_sends_text_requests_with_a_reply_to_and_reads_the_replies() -> None:
    replies = Replies()

    def answer(frame: Any) -> tuple[dict[str, str], str]:
        if frame.headers["_AMQ_OperationName"] == "getDivertNames":
            return {"_AMQ_OperationSucceeded": "true"}, '[["boost.divert.x"]]'
        return {"_AMQ_OperationSucceeded": "true"}, ""

    connection = _Connection(replies, answer)
    session = _Session(connection, _Link(), replies, timeout_s=5.0)  # type: ignore[arg-type]
    subscribe = connection.frames[0]
    assert subscribe.cmd == "SUBSCRIBE"
    reply_queue = subscribe.headers["destination"].removeprefix("/queue/")
    assert session.run([Operation("getDivertNames")]) == [["boost.divert.x"]]
    request = connection.frames[1]
    assert request.headers["destination"] == MANAGEMENT_ADDRESS
    assert request.headers["reply-to"] == reply_queue
    assert "content-length" not in request.headers  # Artemis reads the parameters as text only
    body = request.body if isinstance(request.body, bytes) else request.body.encode()
    assert json.loads(body.rstrip(b"\x00")) == []


def test_a_refused_request_raises_with_the_brokers_text_and_a_silent_one_times_out() -> None:
    replies = Replies()
    refuse = _Connection(replies, lambda f: ({"_AMQ_OperationSucceeded": "false"}, '["no"]'))
    session = _Session(refuse, _Link(), replies, timeout_s=5.0)  # type: ignore[arg-type]
    with pytest.raises(ManagementError, match="refused management operation createQueue: no"):
        session.run([Operation("createQueue", ("{}", True))])

    class Silent(_Connection):
        def confirm(self, link: object, frames: Sequence[bytes], receipt: str, what: str) -> None:
            pass  # no manage permission: Artemis sends no reply

    silent = _Session(Silent(replies, None), _Link(), replies, timeout_s=0.2)  # type: ignore[arg-type]
    with pytest.raises(TransportError, match="manage permission"):
        silent.run([Operation("getDivertNames")])


# -- the runner -----------------------------------------------------------------------------------


class Docs(TenantProcessor):
    queues = (SHARED,)
    json_body = False

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self._lock:
            self.seen.append((message.tenant.value, message.body))


def test_a_runner_on_artemis_routes_at_send_and_its_router_takes_only_the_rest(
    artemis: InMemoryBroker, store: ErrorStore
) -> None:
    processor = Docs()
    runner = ProcessorRunner(processor, connected(artemis), [A, B], error_store=store)
    runner.start()
    try:
        assert runner.send_routes_added == 2
        for tenant in ("org-a", "org-b", "org-zed", None):
            artemis.put(SHARED, message(tenant, body=str(tenant)))
        assert wait_until(lambda: len(processor.seen) == 2)
        assert sorted(processor.seen) == [("org-a", "org-a"), ("org-b", "org-b")]
        router = runner.router
        assert router is not None
        # What no divert matches is the router's: a tenant this runner does not serve goes to
        # its own queue, a message without one to quarantine; nothing of org-a or org-b.
        assert wait_until(lambda: router.quarantined == 1)
        assert dict(router.routed) == {TenantId.parse("org-zed"): 1}
        assert [m.body for m in artemis.messages(quarantine_queue(SHARED))] == ["None"]
        assert [m.body for m in artemis.messages("tenant.org-zed.cmd.docs")] == ["org-zed"]
    finally:
        runner.stop(grace_s=5.0)


@pytest.mark.parametrize("flavour", [BrokerFlavour.CLASSIC, BrokerFlavour.ARTEMIS])
def test_without_routes_at_send_the_router_moves_every_message(
    flavour: BrokerFlavour, store: ErrorStore
) -> None:
    broker = InMemoryBroker(flavour=flavour)
    processor = Docs()
    runner = ProcessorRunner(
        processor,
        connected(broker),
        [A],
        error_store=store,
        route_at_send=flavour is BrokerFlavour.CLASSIC,  # asked for, but Classic cannot
    )
    runner.start()
    try:
        assert runner.send_routes_added is None
        broker.put(SHARED, message("org-a"))
        assert wait_until(lambda: len(processor.seen) == 1)
        router = runner.router
        assert router is not None
        assert wait_until(lambda: dict(router.routed) == {A: 1})
        assert broker.diverts(SHARED) == {}
    finally:
        runner.stop(grace_s=5.0)
        broker.close()


def test_a_broker_that_refuses_the_routes_leaves_the_router_to_move_everything(
    artemis: InMemoryBroker, store: ErrorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = connected(artemis)

    def refuse(routes: Sequence[SendRoute]) -> int:
        raise ManagementError("AMQ229032: User: app does not have permission='MANAGE'")

    monkeypatch.setattr(transport, "install_send_routes", refuse)
    processor = Docs()
    runner = ProcessorRunner(processor, transport, [A], error_store=store)
    runner.start()
    try:
        assert runner.send_routes_added is None
        artemis.put(SHARED, message("org-a"))
        assert wait_until(lambda: len(processor.seen) == 1)
    finally:
        runner.stop(grace_s=5.0)


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, True), ({"BOOST_SEND_ROUTES": "off"}, False), ({"BOOST_SEND_ROUTES": "on"}, True)],
)
def test_boost_send_routes_is_on_unless_turned_off(env: Mapping[str, str], expected: bool) -> None:
    assert AppSettings.from_env(env).send_routes is expected


def test_boost_send_routes_refuses_anything_but_on_or_off() -> None:
    with pytest.raises(ConfigError, match="BOOST_SEND_ROUTES"):
        AppSettings.from_env({"BOOST_SEND_ROUTES": "sometimes"})


# -- over AMQP, against the in-process peer that models Artemis ----------------------------------


def test_over_amqp_a_user_without_manage_is_refused_and_the_router_moves_everything(
    store: ErrorStore,
) -> None:
    with AmqpPeer(manage=False) as peer:
        transport = open_transport(peer.url)
        transport.connect()
        installer = send_route_installer(transport)
        assert installer is not None
        with pytest.raises(TransportError, match=r"AMQ229032.*MANAGE"):
            installer.install_send_routes([route(A)])
        processor = Docs()
        runner = ProcessorRunner(processor, transport, [A], error_store=store)
        runner.start()
        try:
            assert runner.send_routes_added is None
            sender = open_transport(peer.url)
            sender.connect()
            sender.send(SHARED, message("org-a"))
            sender.close()
            assert wait_until(lambda: len(processor.seen) == 1)
            router = runner.router
            assert router is not None
            assert dict(router.routed) == {A: 1}
        finally:
            runner.stop(grace_s=5.0)


def test_over_amqp_diverted_copies_carry_the_original_address_and_divert() -> None:
    with AmqpPeer() as peer:
        transport = open_transport(peer.url)
        transport.connect()
        try:
            assert transport.install_send_routes([route(A)]) == 1  # type: ignore[attr-defined]
            transport.send(SHARED, message("org-a", body="diverted"))
            (copy,) = peer.messages("tenant.org-a.cmd.docs")
            annotations = {str(k): v for k, v in (copy.annotations or {}).items()}
            assert annotations["x-opt-ORIG-ADDRESS"] == SHARED
            assert annotations["x-opt-ORIG-QUEUE"] == "boost.divert.tenant.org-a.cmd.docs"
            assert peer.messages(SHARED) == []
        finally:
            transport.close()


# -- listing and removing: transports and the operator's command -------------------------------


def test_routes_are_listed_and_removed_on_the_in_memory_artemis(artemis: InMemoryBroker) -> None:
    transport = connected(artemis)
    transport.install_send_routes([route(A), route(B), route(A, source="cmd.other")])
    assert [(r.source, r.tenant.value) for r in transport.send_routes()] == [
        ("cmd.docs", "org-a"),
        ("cmd.other", "org-a"),
        ("cmd.docs", "org-b"),
    ]
    assert transport.remove_send_routes([route(A), route(A, source="cmd.gone")]) == 1
    assert artemis.diverts(SHARED) == {divert_name(route(B)): "tenant.org-b.cmd.docs"}
    artemis.put(SHARED, message("org-a"))  # no divert any more: the shared queue keeps it
    assert len(artemis.messages(SHARED)) == 1
    with pytest.raises(ManagementError, match="AMQ229012"):
        artemis.run([Operation("destroyDivert", (divert_name(route(A)),))])


def printed(out: str) -> list[dict[str, Any]]:
    """The command's JSON lines (log lines of the test's own transport may come first)."""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.usefixtures("restore_logging")
def test_the_send_routes_command_lists_and_removes_over_amqp(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with AmqpPeer() as peer:
        transport = open_transport(peer.url)
        transport.connect()
        transport.install_send_routes([route(A), route(B)])  # type: ignore[attr-defined]
        transport.close()
        monkeypatch.setenv("BOOST_BROKER_URL", peer.url)
        assert main(["send-routes"]) == 0
        listed = printed(capsys.readouterr().out)
        assert [(r["queue"], r["tenant"], r["removed"]) for r in listed] == [
            (SHARED, "org-a", False),
            (SHARED, "org-b", False),
        ]
        assert main(["send-routes", "--remove"]) == 2  # never all at once
        assert "needs --queue or --tenant" in capsys.readouterr().err
        assert main(["send-routes", "--remove", "--tenant", "org-a"]) == 0
        (removed,) = printed(capsys.readouterr().out)
        assert (removed["tenant"], removed["removed"]) == ("org-a", True)
        assert main(["send-routes"]) == 0
        left = [r["tenant"] for r in printed(capsys.readouterr().out)]
        assert left == ["org-b"]


@pytest.mark.usefixtures("restore_logging")
def test_the_send_routes_command_adds_routes_ahead_of_the_runners(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tenant's messages sent before its first runner starts are stored apart already."""
    with AmqpPeer() as peer:
        monkeypatch.setenv("BOOST_BROKER_URL", peer.url)
        assert main(["send-routes", "--add", "--queue", SHARED]) == 2
        assert "needs --queue and --tenant" in capsys.readouterr().err
        monkeypatch.setenv("BOOST_ROUTING_OVERRIDES", f"{SHARED}=shared")
        assert main(["send-routes", "--add", "--queue", SHARED, "--tenant", "org-a"]) == 2
        assert "is shared, not routed" in capsys.readouterr().err
        monkeypatch.delenv("BOOST_ROUTING_OVERRIDES")
        assert main(["send-routes", "--add", "--queue", SHARED, "--tenant", "org-b,org-a"]) == 0
        added = printed(capsys.readouterr().out)
        assert [(r["queue"], r["tenant"], r["target"], r["removed"]) for r in added] == [
            (SHARED, "org-a", "tenant.org-a.cmd.docs", False),
            (SHARED, "org-b", "tenant.org-b.cmd.docs", False),
        ]
        transport = open_transport(peer.url)
        transport.connect()
        try:
            for tenant in ("org-a", "org-b", "org-zed"):
                transport.send(SHARED, message(tenant, body=f"from {tenant}"))
        finally:
            transport.close()
        assert [m.body for m in peer.messages("tenant.org-a.cmd.docs")] == ["from org-a"]
        assert [m.body for m in peer.messages("tenant.org-b.cmd.docs")] == ["from org-b"]
        assert [m.body for m in peer.messages(SHARED)] == ["from org-zed"]


@pytest.mark.usefixtures("restore_logging")
def test_the_send_routes_command_refuses_a_broker_without_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with AmqpPeer(PeerFlavour.RABBITMQ) as peer:
        monkeypatch.setenv("BOOST_BROKER_URL", peer.url)
        assert main(["send-routes"]) == 2
        assert "broker-routes" in capsys.readouterr().err


def test_only_the_toolkits_own_diverts_are_read_back_as_routes() -> None:
    names = [
        divert_name(route(A)),
        "boost.divert.x",  # no tenant queue behind it
        "boost.divert.tenant.org-a.DLQ.cmd.docs",  # a name the toolkit never gives a divert
        "boost.divert.tenant.bad tenant.cmd.docs",
        "other.divert.tenant.org-b.cmd.docs",
        "tenant.org-b.cmd.docs",
    ]
    assert routes_named(names) == [route(A)]
