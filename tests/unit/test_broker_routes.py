"""The Classic configuration that routes tenants at send time, and the command that prints it.

What the broker does with it is checked against a real Classic in
tests/integration/test_broker_routes.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from boost_tenancy.cli import main
from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.ops.broker_routes import (
    ROUTING_PLUGIN_CLASS,
    classic_destination_interceptors,
    classic_routing_plugin,
)

BEANS_NS = "http://www.springframework.org/schema/beans"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)


def routes_of(xml: str) -> dict[str, list[tuple[str | None, str | None]]]:
    """compositeQueue name -> [(selector, queue)] of its filtered destinations."""
    root = ET.fromstring(xml)
    assert root.tag == "destinationInterceptors"
    found: dict[str, list[tuple[str | None, str | None]]] = {}
    for composite in root.iter("compositeQueue"):
        # Unmatched messages stay on the shared queue instead of being dropped.
        assert composite.get("sendWhenNotMatched") == "true"
        assert composite.get("forwardOnly") == "true"
        name = composite.get("name")
        assert name is not None
        found[name] = [
            (f.get("selector"), f.get("queue")) for f in composite.iter("filteredDestination")
        ]
    return found


def test_every_tenant_of_every_queue_gets_its_routed_queue() -> None:
    xml = classic_destination_interceptors(["cmd.b", "cmd.a", "cmd.a"], ["globex", "acme"])
    assert routes_of(xml) == {
        "cmd.a": [
            ("tenantUUID = 'acme'", "tenant.acme.cmd.a"),
            ("tenantUUID = 'globex'", "tenant.globex.cmd.a"),
        ],
        "cmd.b": [
            ("tenantUUID = 'acme'", "tenant.acme.cmd.b"),
            ("tenantUUID = 'globex'", "tenant.globex.cmd.b"),
        ],
    }


@pytest.mark.parametrize(
    ("queues", "tenants", "problem"),
    [
        ([], ["acme"], "no queue given"),
        (["cmd.a"], [], "no tenant given"),
        (["tenant.acme.cmd"], ["acme"], "reserved for per-tenant"),
        (["DLQ.cmd"], ["acme"], "reserved for dead-letter"),
        (["cmd.a"], ["acme' OR 1=1 --"], "tenant"),
    ],
)
def test_bad_queues_and_tenants_are_refused(
    queues: list[str], tenants: list[str], problem: str
) -> None:
    with pytest.raises(BoostTenancyError, match=problem):
        classic_destination_interceptors(queues, tenants)


def test_the_command_prints_the_element(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker-routes", "--queue", "cmd.a,cmd.b", "--tenant", "acme"]) == 0
    assert set(routes_of(capsys.readouterr().out)) == {"cmd.a", "cmd.b"}


def test_the_command_refuses_a_shared_queue(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared queue's runners read the queue itself: forwarding would hide every message."""
    monkeypatch.setenv("BOOST_ROUTING", "shared")
    assert main(["broker-routes", "--queue", "cmd.a", "--tenant", "acme"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "queue 'cmd.a' is shared" in captured.err


def plugin_queues(element: str) -> str | None:
    bean = ET.fromstring(element.split("-->", 1)[1])
    assert bean.get("class") == ROUTING_PLUGIN_CLASS
    (prop,) = bean.iter(f"{{{BEANS_NS}}}property")
    assert prop.get("name") == "queues"
    return prop.get("value")


def test_without_tenants_the_command_prints_the_plugin_for_every_tenant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["broker-routes", "--queue", "cmd.b,cmd.a", "--queue", "cmd.a"]) == 0
    assert plugin_queues(capsys.readouterr().out) == "cmd.a,cmd.b"


@pytest.mark.parametrize(
    ("queues", "problem"),
    [
        ([], "no queue given"),
        (["tenant.acme.cmd"], "reserved for per-tenant"),
        (["DLQ.cmd"], "reserved for dead-letter"),
        (["cmd.>"], "invalid queue name"),
        (["cmd.a,cmd.b"], "invalid queue name"),
    ],
)
def test_the_plugin_takes_logical_queues_only(queues: list[str], problem: str) -> None:
    """One name per queue, never a wildcard or a list of Classic's own syntax: the plugin must
    not route a queue the toolkit reads as shared, nor one of its own namespaces."""
    with pytest.raises(BoostTenancyError, match=problem):
        classic_routing_plugin(queues)


def test_every_queue_prints_the_plugin_with_the_queues_the_routing_makes_shared(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOOST_ROUTING_OVERRIDES", "evt.b=shared,evt.a=shared,cmd.c=per_tenant")
    assert main(["broker-routes", "--queue", "*"]) == 0
    bean = ET.fromstring(capsys.readouterr().out.split("-->", 1)[1])
    values = {p.get("name"): p.get("value") for p in bean.iter(f"{{{BEANS_NS}}}property")}
    assert values == {"queues": "*", "shared": "evt.a,evt.b"}
    assert main(["broker-routes", "--queue", "*", "--broker", "artemis"]) == 0
    element = ET.fromstring(capsys.readouterr().out.split("-->", 1)[1])
    properties = {p.get("key"): p.get("value") for p in element.iter("property")}
    assert properties == {"queues": "*", "shared": "evt.a,evt.b"}
    assert main(["broker-routes", "--queue", "*", "--tenant", "acme"]) == 2
    assert "--tenant routes list their queues" in capsys.readouterr().err
    monkeypatch.setenv("BOOST_ROUTING", "shared")
    assert main(["broker-routes", "--queue", "*"]) == 2
    assert "every queue is shared" in capsys.readouterr().err
