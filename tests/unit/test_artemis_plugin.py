"""The project's Artemis plugin (brokers/artemis): the names it accepts are the toolkit's (the same
vectors through the Python side and the plugin's own code, built with Maven where Maven is; CI
has it), the configuration broker-routes prints for it, and the runners' send routes leaving
to it the queues it routes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import pytest

from boost_tenancy.application import AppSettings
from boost_tenancy.cli import build_parser
from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.ops.broker_routes import ARTEMIS_PLUGIN_CLASS, artemis_tenant_plugin
from boost_tenancy.routing import MAX_LOGICAL_QUEUE, check_logical_queue
from boost_tenancy.tenancy import TenantId
from boost_tenancy.transports.artemis_management import (
    PLUGIN_DIVERT_PREFIX,
    STOMP_LOSS_PLUGIN,
    divert_name,
    install,
)
from boost_tenancy.transports.artemis_requests import Operation
from boost_tenancy.transports.base import SendRoute
from devtools.artemis_plugin import build_digest, build_plugin, plugin_xml

TENANTS = ["acme", "org-1", "a", "A_b-9", "x" * 64, "x" * 65, "", "-a", "a-", "a.b", "a b"]
TENANTS += ["a'b", "a*", "tenant#", "é", "a\nb", "_a", "a_"]
QUEUES = [" cmd.a , cmd.b,", "cmd.>", "cmd.*", "cmd.#", "tenant.acme.x", "parked.acme.x"]
QUEUES += ["DLQ.x", "x.quarantine", "a b", ".cmd", "q" * 201, "q" * (MAX_LOGICAL_QUEUE + 1)]
QUEUES += ["activemq.management", "DLA", "ExpiryQueue", "BROKER.DLQ.x", "EXP.x"]

CHECK = """
import io.boosttenancy.artemis.TenantNames;
public class Check {
    public static void main(String[] args) {
        for (int i = 1; i < args.length; i++) {
            if (args[0].equals("tenant")) {
                System.out.println(TenantNames.isTenant(args[i]) ? "valid" : "invalid");
            } else {
                try {
                    String routed = String.join(",", TenantNames.parseQueues(args[i]));
                    System.out.println("routes " + routed);
                } catch (IllegalArgumentException e) {
                    System.out.println("refused");
                }
            }
        }
    }
}
"""


def python_tenant(value: str) -> str:
    try:
        TenantId.parse(value)
    except InvalidTenantError:
        return "invalid"
    return "valid"


@pytest.fixture(scope="module")
def plugin_jar() -> Path:
    if shutil.which("mvn") is None and os.environ.get("CI") != "true":
        pytest.skip("no Maven here: the plugin is built with it (CI has it)")
    return build_plugin()[0]


def run_check(jar: Path, tmp_path: Path, kind: str, values: Sequence[str]) -> list[str]:
    (tmp_path / "Check.java").write_text(CHECK)
    result = subprocess.run(
        ["java", "-cp", str(jar), str(tmp_path / "Check.java"), kind, *values],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout.splitlines()


def test_the_plugin_takes_the_tenant_ids_the_toolkit_takes(
    plugin_jar: Path, tmp_path: Path
) -> None:
    assert run_check(plugin_jar, tmp_path, "tenant", TENANTS) == [python_tenant(t) for t in TENANTS]


def test_the_plugin_refuses_the_queue_names_the_toolkit_refuses(
    plugin_jar: Path, tmp_path: Path
) -> None:
    for name in QUEUES[1:]:
        with pytest.raises(ConfigError):
            check_logical_queue(name)
    assert run_check(plugin_jar, tmp_path, "queues", QUEUES) == [
        "routes cmd.a,cmd.b",
        *("refused" for _ in QUEUES[1:]),
    ]


def test_the_build_is_reused_for_the_same_sources(plugin_jar: Path) -> None:
    built_at = plugin_jar.stat().st_mtime_ns
    assert build_plugin()[0] == plugin_jar
    assert plugin_jar.stat().st_mtime_ns == built_at
    assert {p.name.split("-")[0] for p in build_plugin()[1:]} >= {"postgresql", "sqlite"}


def test_the_digest_follows_the_sources(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "pom.xml").write_text("<project/>")
    source = tmp_path / "src" / "A.java"
    source.write_text("class A {}")
    before = build_digest(tmp_path)
    source.write_text("class A { int x; }")
    assert build_digest(tmp_path) != before


def test_broker_routes_prints_the_plugin_element_for_artemis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(
        ["broker-routes", "--broker", "artemis", "--queue", "cmd.b,cmd.a"]
    )
    assert args.handler(args, AppSettings.from_env({})) == 0
    printed = capsys.readouterr().out
    element = ET.fromstring(printed.split("-->", 1)[1])
    loss, plugin = element
    assert loss.get("class-name") == STOMP_LOSS_PLUGIN
    assert plugin.get("class-name") == ARTEMIS_PLUGIN_CLASS
    assert [(p.get("key"), p.get("value")) for p in plugin] == [("queues", "cmd.a,cmd.b")]


def test_broker_routes_for_artemis_takes_no_tenant() -> None:
    args = build_parser().parse_args(
        ["broker-routes", "--broker", "artemis", "--queue", "cmd.a", "--tenant", "acme"]
    )
    with pytest.raises(ConfigError, match="routes every tenant"):
        args.handler(args, AppSettings.from_env({}))


def test_the_devtools_element_is_the_printed_one_inside_core() -> None:
    xml = plugin_xml(["cmd.a"], {"messages-per-second": "5"})
    element = ET.fromstring(xml)
    assert element.tag == "broker-plugins"
    loss, plugin = element
    assert (loss.get("class-name"), list(loss)) == (STOMP_LOSS_PLUGIN, [])
    assert plugin.get("class-name") == ARTEMIS_PLUGIN_CLASS
    assert [(p.get("key"), p.get("value")) for p in plugin] == [
        ("queues", "cmd.a"),
        ("messages-per-second", "5"),
    ]
    assert artemis_tenant_plugin(["cmd.a"], {"messages-per-second": "5"}).count("<property") == 2


class FakeSession:
    """A management session whose broker has the diverts given."""

    def __init__(self, diverts: list[str]) -> None:
        self.diverts = diverts
        self.asked: list[Operation] = []

    def run(self, ops: Sequence[Operation]) -> list[object]:
        self.asked.extend(ops)
        results: list[object] = []
        for op in ops:
            if op.name == "getDivertNames":
                results.append(list(self.diverts))
            elif op.name == "createDivert":
                self.diverts.append(json.loads(str(op.params[0]))["name"])
                results.append(None)
            else:
                results.append(None)
        return results


def test_a_queue_the_plugin_routes_gets_no_divert_per_tenant() -> None:
    routes = [
        SendRoute("cmd.a", TenantId("acme"), "tenant.acme.cmd.a"),
        SendRoute("cmd.b", TenantId("acme"), "tenant.acme.cmd.b"),
    ]
    session = FakeSession([PLUGIN_DIVERT_PREFIX + "cmd.a"])
    assert install(session, routes) == 1
    assert divert_name(routes[1]) in session.diverts
    assert divert_name(routes[0]) not in session.diverts
    made = [
        json.loads(str(op.params[0]))["name"] for op in session.asked if op.name == "createQueue"
    ]
    assert made == ["cmd.b", "tenant.acme.cmd.b"]  # nothing asked for the plugin's queue


def test_with_every_queue_routed_by_the_plugin_nothing_is_asked_but_the_listing() -> None:
    session = FakeSession([PLUGIN_DIVERT_PREFIX + "cmd.a"])
    assert install(session, [SendRoute("cmd.a", TenantId("acme"), "tenant.acme.cmd.a")]) == 0
    assert [op.name for op in session.asked] == ["getDivertNames"]
