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
from boost_tenancy.ops.broker_routes import classic_destination_interceptors


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
