"""The local broker's tenant routing plugin: which queues it is configured with, where it goes in
activemq.xml, and its build from brokers/classic (compiled for real where a JDK and the broker's
jars are installed; CI installs both)."""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from boost_tenancy.errors import ConfigError
from boost_tenancy.ops.broker_routes import EVERY_QUEUE, ROUTING_PLUGIN_CLASS
from boost_tenancy.routing import MAX_LOGICAL_QUEUE, check_logical_queue
from boost_tenancy.testing.routing_plugin import plugin_queues
from devtools import classic_plugin
from devtools.broker_settings import LocalBrokerError, LocalBrokerSettings, render_config
from devtools.classic_plugin import build_digest, build_plugin
from devtools.local_broker import LocalBroker
from services.common.contract import CMD_DOCUMENT_PROCESS, ROUTED_QUEUES

CORE_NS = "{http://activemq.apache.org/schema/core}"
BEANS_NS = "{http://www.springframework.org/schema/beans}"


def plugins_of(settings: LocalBrokerSettings) -> list[str]:
    broker = ET.fromstring(render_config(settings)).find(f"{CORE_NS}broker")
    assert broker is not None
    plugins = broker.find(f"{CORE_NS}plugins")
    assert plugins is not None
    return [child.get("class") or child.tag for child in plugins]


def routed_queues_of(settings: LocalBrokerSettings) -> str | None:
    broker = ET.fromstring(render_config(settings)).find(f"{CORE_NS}broker")
    assert broker is not None
    (bean,) = broker.iter(f"{BEANS_NS}bean")
    (prop,) = bean.iter(f"{BEANS_NS}property")
    return prop.get("value")


def test_by_default_the_pipeline_queues_are_routed_by_the_plugin(tmp_path: Path) -> None:
    settings = LocalBrokerSettings(home=tmp_path)
    assert CMD_DOCUMENT_PROCESS in settings.routed_queues
    # First in <plugins>: Classic runs the last one first, so an authorization plugin listed
    # after it checks the queue the producer named.
    assert plugins_of(settings) == [ROUTING_PLUGIN_CLASS, f"{CORE_NS}statisticsBrokerPlugin"]
    assert routed_queues_of(settings) == ",".join(sorted(ROUTED_QUEUES))


def test_none_leaves_the_plugin_out(tmp_path: Path) -> None:
    settings = LocalBrokerSettings.from_env({"BOOST_BROKER_ROUTED_QUEUES": "none"})
    assert settings.routed_queues == ()
    assert plugins_of(settings) == [f"{CORE_NS}statisticsBrokerPlugin"]


def test_the_variable_names_the_queues(tmp_path: Path) -> None:
    settings = LocalBrokerSettings.from_env({"BOOST_BROKER_ROUTED_QUEUES": " cmd.a , cmd.b"})
    assert settings.routed_queues == ("cmd.a", "cmd.b")
    assert routed_queues_of(settings) == "cmd.a,cmd.b"


@pytest.mark.parametrize("raw", ["cmd.>", "cmd.a,,cmd.b", "tenant.acme.cmd", "DLQ.cmd"])
def test_a_bad_queue_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"BOOST_BROKER_ROUTED_QUEUES="):
        LocalBrokerSettings.from_env({"BOOST_BROKER_ROUTED_QUEUES": raw})


def test_settings_refuse_a_reserved_queue(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        LocalBrokerSettings(home=tmp_path, routed_queues=("DLQ.cmd",))


def test_the_digest_follows_the_sources(tmp_path: Path) -> None:
    source = tmp_path / "src" / "A.java"
    source.parent.mkdir()
    source.write_text("class A {}")
    before = build_digest(tmp_path / "src")
    assert build_digest(tmp_path / "src") == before
    source.write_text("class A { int x; }")
    assert build_digest(tmp_path / "src") != before


def test_missing_sources_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(LocalBrokerError, match="sources are missing"):
        build_plugin(tmp_path / "lib", root=tmp_path / "nothing")


def test_a_compile_error_is_reported_with_javac_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("javac") is None:
        pytest.skip("no javac here")
    monkeypatch.setattr(classic_plugin, "_BROKER_JARS", ())
    source = tmp_path / "src" / "Broken.java"
    source.parent.mkdir()
    source.write_text("class Broken { void f() { return 1; } }")
    failed = r"javac .*failed with exit code 1;[\s\S]*Broken.java"
    with pytest.raises(LocalBrokerError, match=failed):
        build_plugin(tmp_path / "lib", root=tmp_path / "src")
    assert not list((tmp_path / "lib").glob("*.jar"))


def test_the_plugin_builds_once_and_goes_on_the_brokers_class_path(tmp_path: Path) -> None:
    missing = [str(p) for p in classic_plugin._BROKER_JARS if not p.is_file()]
    if (missing or shutil.which("javac") is None) and os.environ.get("CI") != "true":
        pytest.skip(f"no JDK or broker jars here ({missing})")
    lib = tmp_path / "lib"
    (lib).mkdir()
    (lib / "boost-tenancy-classic-0000000000000000.jar").write_bytes(b"an older build")
    jar = build_plugin(lib)
    assert jar.name == f"boost-tenancy-classic-{build_digest()}.jar"
    assert [p.name for p in lib.iterdir()] == [jar.name]  # the older build and the work removed
    built_at = jar.stat().st_mtime_ns
    assert build_plugin(lib) == jar
    assert jar.stat().st_mtime_ns == built_at  # the same sources: not built again
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path / "home"))
    broker._plugin_jar = jar
    (classpath,) = [a for a in broker.command() if a.startswith("-Dactivemq.classpath=")]
    assert str(jar) in classpath.split("=", 1)[1].split(os.pathsep)


def test_the_environment_by_default_routes_every_queue_but_the_shared_ones() -> None:
    """What the toolkit's routing says (every queue routed unless declared shared), so a
    backlog sent to any queue is stored per tenant as it is sent."""
    assert LocalBrokerSettings.from_env({}).routed_queues == ("*",)
    assert LocalBrokerSettings.from_env({}).shared_queues == ()
    settings = LocalBrokerSettings.from_env(
        {"BOOST_ROUTING_OVERRIDES": "evt.document.text.extracted=shared"}
    )
    assert (settings.routed_queues, settings.shared_queues) == (
        ("*",),
        ("evt.document.text.extracted",),
    )
    # Every queue shared: no queue to route, so no plugin.
    assert LocalBrokerSettings.from_env({"BOOST_ROUTING": "shared"}).routed_queues == ()


def test_pipeline_routes_the_pipeline_queues_the_routing_does_not_make_shared() -> None:
    """A Java service reads a shared queue with its selector: the plugin would move its
    messages away."""
    assert LocalBrokerSettings.from_env(
        {"BOOST_BROKER_ROUTED_QUEUES": "pipeline"}
    ).routed_queues == tuple(ROUTED_QUEUES)
    settings = LocalBrokerSettings.from_env(
        {
            "BOOST_BROKER_ROUTED_QUEUES": "pipeline",
            "BOOST_ROUTING_OVERRIDES": "evt.document.text.extracted=shared",
        }
    )
    assert set(settings.routed_queues) == set(ROUTED_QUEUES) - {"evt.document.text.extracted"}
    assert settings.shared_queues == ()


def test_a_shared_queue_named_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"BOOST_BROKER_ROUTED_QUEUES=.*'cmd.b' is shared"):
        LocalBrokerSettings.from_env(
            {"BOOST_BROKER_ROUTED_QUEUES": "cmd.a,cmd.b", "BOOST_ROUTING_OVERRIDES": "cmd.b=shared"}
        )


CHECK_QUEUES = """
import io.boosttenancy.activemq.TenantRoutingPlugin;
public class CheckQueues {
    public static void main(String[] names) {
        for (String name : names) {
            try {
                TenantRoutingPlugin plugin = new TenantRoutingPlugin();
                plugin.setQueues(name);
                System.out.println("routes " + plugin.getQueues());
            } catch (IllegalArgumentException e) {
                System.out.println("refused " + name);
            }
        }
    }
}
"""


def test_the_plugin_itself_refuses_wildcards_and_the_toolkits_own_names(tmp_path: Path) -> None:
    """Its configuration is written by hand in a deployment: a wildcard or a reserved name stops
    the broker's start instead of routing queues the toolkit reads as they are."""
    missing = [str(p) for p in classic_plugin._BROKER_JARS if not p.is_file()]
    if (missing or shutil.which("javac") is None) and os.environ.get("CI") != "true":
        pytest.skip(f"no JDK or broker jars here ({missing})")
    jar = build_plugin(tmp_path / "lib")
    (tmp_path / "CheckQueues.java").write_text(CHECK_QUEUES)
    classpath = os.pathsep.join([str(jar), *(str(p) for p in classic_plugin._BROKER_JARS)])
    names = [" cmd.a , cmd.b,", "cmd.>", "cmd.*", "tenant.acme.x", "parked.acme.x", "DLQ.x"]
    names += ["x.quarantine", "ActiveMQ.Statistics", "a b", "cmd.a,it's", ".cmd", "q" * 201]
    # The brokers' own names, and a queue whose quarantine would not fit for a long tenant id:
    # refused by the plugin exactly as by the toolkit (routing.check_logical_queue).
    brokers_own = ["ActiveMQ.DLQ", "activemq.management", "DLA", "ExpiryQueue", "BROKER.DLQ.x"]
    brokers_own += ["EXP.x", "q" * (MAX_LOGICAL_QUEUE + 1)]
    for name in brokers_own:
        with pytest.raises(ConfigError):
            check_logical_queue(name)
    names += brokers_own
    result = subprocess.run(
        ["java", "-cp", classpath, str(tmp_path / "CheckQueues.java"), *names],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.splitlines() == [
        "routes cmd.a,cmd.b",
        *(f"refused {name}" for name in names[1:]),
    ]


CHECK_ROUTES = """
import io.boosttenancy.activemq.TenantRoutingPlugin;
public class CheckRoutes {
    public static void main(String[] names) {
        TenantRoutingPlugin plugin = new TenantRoutingPlugin();
        plugin.setQueues("*");
        plugin.setShared(names[0]);
        for (int i = 1; i < names.length; i++) {
            System.out.println(names[i] + " " + plugin.routes(names[i]));
        }
        try {
            plugin.setShared("tenant.acme.*");
            System.out.println("shared tenant.acme.* accepted");
        } catch (IllegalArgumentException e) {
            System.out.println("shared tenant.acme.* refused");
        }
    }
}
"""

EVERY_QUEUE_NAMES = [
    "cmd.a",
    "bench.nn.1a2b",
    "reply.checkout-1",
    "evt.document.text.extracted",
    "legacy.orders",
    "legacy",
    "legacyx.orders",
    "tenant.acme.cmd.a",
    "parked.acme.cmd.a",
    "DLQ.cmd.a",
    "cmd.a.quarantine",
    "ActiveMQ.DLQ",
    "activemq.management",
    "DLA",
    "ExpiryQueue",
    "a b",
    "q" * (MAX_LOGICAL_QUEUE + 1),
]


def test_every_queue_routes_what_the_in_memory_model_routes(tmp_path: Path) -> None:
    """queues="*" with shared queues: the plugin routes every queue with a shared queue name
    but the shared ones (an exact name, a prefix ending in .*) and the toolkit's and the
    broker's own namespaces, and the in-memory broker's model answers the same for each name."""
    missing = [str(p) for p in classic_plugin._BROKER_JARS if not p.is_file()]
    if (missing or shutil.which("javac") is None) and os.environ.get("CI") != "true":
        pytest.skip(f"no JDK or broker jars here ({missing})")
    jar = build_plugin(tmp_path / "lib")
    (tmp_path / "CheckRoutes.java").write_text(CHECK_ROUTES)
    classpath = os.pathsep.join([str(jar), *(str(p) for p in classic_plugin._BROKER_JARS)])
    shared = ["evt.document.text.extracted", "legacy.*"]
    result = subprocess.run(
        [
            "java",
            "-cp",
            classpath,
            str(tmp_path / "CheckRoutes.java"),
            ",".join(shared),
            *EVERY_QUEUE_NAMES,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    model = plugin_queues([EVERY_QUEUE], shared)
    routed = {name for name in EVERY_QUEUE_NAMES if model.routes(name)}
    assert routed == {"cmd.a", "bench.nn.1a2b", "reply.checkout-1", "legacy", "legacyx.orders"}
    with pytest.raises(ConfigError, match="reserved"):
        plugin_queues([EVERY_QUEUE], ["tenant.acme.*"])
    assert result.stdout.splitlines() == [
        *(f"{name} {str(name in routed).lower()}" for name in EVERY_QUEUE_NAMES),
        "shared tenant.acme.* refused",
    ]


def test_every_queue_leaves_out_the_queues_the_routing_makes_shared(tmp_path: Path) -> None:
    settings = LocalBrokerSettings.from_env(
        {
            "BOOST_BROKER_ROUTED_QUEUES": "*",
            "BOOST_ROUTING_OVERRIDES": "evt.document.text.extracted=shared,cmd.x=per_tenant",
        }
    )
    assert settings.routed_queues == ("*",)
    assert settings.shared_queues == ("evt.document.text.extracted",)
    broker = ET.fromstring(render_config(settings)).find(f"{CORE_NS}broker")
    assert broker is not None
    (bean,) = broker.iter(f"{BEANS_NS}bean")
    assert {p.get("name"): p.get("value") for p in bean.iter(f"{BEANS_NS}property")} == {
        "queues": "*",
        "shared": "evt.document.text.extracted",
    }
    with pytest.raises(ConfigError, match="every queue is shared"):
        LocalBrokerSettings.from_env({"BOOST_BROKER_ROUTED_QUEUES": "*", "BOOST_ROUTING": "shared"})
