"""Routing topologies and the exclusion selector: physical and logical names round-trip, bad
configuration is refused naming its variable, and TenantExclusion renders and matches alike."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boost_tenancy import Routing, TenantId
from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.environment import default_tenant_from_env, routing_from_env
from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.routing import DEFAULT_ROUTING, Topology, check_logical_queue, parked_queue
from boost_tenancy.selectors import SelectorLike, TenantExclusion, tenant_selector

TENANTS = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,20}[A-Za-z0-9])?", fullmatch=True)
QUEUES = st.from_regex(r"[a-z][a-z0-9]{0,8}(?:\.[a-z0-9_-]{1,8}){0,3}", fullmatch=True).filter(
    lambda q: not q.startswith(("tenant.", "parked."))
)


def test_default_is_routed_and_stores_each_tenant_in_its_own_queue() -> None:
    assert Routing() == DEFAULT_ROUTING
    assert DEFAULT_ROUTING.topology("cmd.x") is Topology.ROUTED
    # The toolkit's producers skip the router: they send to the tenant's queue directly.
    assert DEFAULT_ROUTING.physical("cmd.x", "org-A") == "tenant.org-A.cmd.x"
    assert DEFAULT_ROUTING.logical("tenant.org-A.cmd.x") == "cmd.x"
    assert DEFAULT_ROUTING.logical("cmd.x") == "cmd.x"
    assert DEFAULT_ROUTING.routes("cmd.x")


def test_shared_queue_is_the_queue_itself_and_not_routed() -> None:
    shared = Routing(Topology.SHARED)
    assert shared.physical("cmd.x", "org-A") == "cmd.x"
    assert not shared.routes("cmd.x")


def test_only_routed_queues_are_routed() -> None:
    routing = Routing(
        Topology.PER_TENANT, overrides={"cmd.r": Topology.ROUTED, "cmd.s": Topology.SHARED}
    )
    assert [q for q in ("cmd.r", "cmd.s", "cmd.p") if routing.routes(q)] == ["cmd.r"]
    # Routed and per-tenant queues store a tenant's messages in the same place.
    assert routing.physical("cmd.r", "org-A") == routing.physical("cmd.p", "org-A").replace(
        "cmd.p", "cmd.r"
    )
    assert routing.physical("cmd.r", "org-A") == "tenant.org-A.cmd.r"
    with pytest.raises(ConfigError, match="reserved"):
        routing.routes("tenant.org-A.cmd.r")


def test_per_tenant_uses_the_documented_prefix_scheme() -> None:
    routing = Routing(Topology.PER_TENANT)
    assert routing.physical("cmd.document.process", "org-A") == "tenant.org-A.cmd.document.process"
    assert routing.logical("tenant.org-A.cmd.document.process") == "cmd.document.process"


@given(tenant=TENANTS, queue=QUEUES, topology=st.sampled_from(Topology))
def test_physical_and_logical_round_trip(tenant: str, queue: str, topology: Topology) -> None:
    routing = Routing(topology)
    physical = routing.physical(queue, tenant)
    assert routing.logical(physical) == queue
    # Any routing reads a per-tenant name back: the dispatcher needs no knowledge of the topology.
    assert DEFAULT_ROUTING.logical(physical) == queue


def test_overrides_choose_per_queue() -> None:
    routing = Routing(overrides={"cmd.x": Topology.PER_TENANT, "cmd.y": "shared"})
    assert routing.physical("cmd.x", "t1") == "tenant.t1.cmd.x"
    assert routing.physical("cmd.y", "t1") == "cmd.y"
    assert routing.physical("cmd.z", "t1") == "tenant.t1.cmd.z"  # the default: routed
    assert routing.overrides["cmd.y"] is Topology.SHARED


def test_routing_is_a_frozen_value() -> None:
    source = {"cmd.x": Topology.PER_TENANT}
    routing = Routing(overrides=source)
    source["cmd.y"] = Topology.PER_TENANT
    assert "cmd.y" not in routing.overrides
    with pytest.raises(TypeError):
        routing.overrides["cmd.z"] = Topology.SHARED  # type: ignore[index]
    assert hash(routing) == hash(Routing(overrides={"cmd.x": "per_tenant"}))  # type: ignore[dict-item]
    assert routing == Routing(overrides={"cmd.x": Topology.PER_TENANT})


@pytest.mark.parametrize(
    "physical",
    [
        "tenant.cmd",  # no queue after the tenant
        "tenant..cmd",  # empty tenant
        "tenant.-bad.cmd",  # not a tenant
        "tenantX.org-A.cmd",
        "DLQ.tenant.org-A.cmd",  # a dead-letter queue is not a per-tenant queue
    ],
)
def test_logical_leaves_names_that_are_not_per_tenant_queues_alone(physical: str) -> None:
    assert DEFAULT_ROUTING.logical(physical) == physical


@pytest.mark.parametrize("queue", ["tenant.org-A.cmd", "parked.org-A.cmd"])
def test_reserved_namespaces_are_refused_as_logical_queues(queue: str) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        check_logical_queue(queue)
    with pytest.raises(ConfigError, match="reserved"):
        DEFAULT_ROUTING.physical(queue, "org-A")
    with pytest.raises(ConfigError, match="reserved"):
        Routing(overrides={queue: Topology.PER_TENANT})


def test_invalid_queue_and_tenant_are_refused() -> None:
    with pytest.raises(ConfigError, match="invalid queue name"):
        Routing(Topology.PER_TENANT).physical("cmd.>", "org-A")
    with pytest.raises(InvalidTenantError):
        Routing(Topology.PER_TENANT).physical("cmd.x", "a' OR '1'='1")
    with pytest.raises(ConfigError, match="unknown topology"):
        Routing("sharded")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid queue name"):
        Routing(Topology.PER_TENANT).physical("q" * 190, "t" * 20)  # longer than 200 in all


def test_parked_queue_name() -> None:
    assert parked_queue("cmd.x", "org-B") == "parked.org-B.cmd.x"
    with pytest.raises(InvalidTenantError):
        parked_queue("cmd.x", "org B")


def test_from_env_reads_default_and_overrides() -> None:
    routing = routing_from_env(
        {
            "BOOST_ROUTING": "per_tenant",
            "BOOST_ROUTING_OVERRIDES": " cmd.a = shared ,cmd.b=per_tenant,,",
        }
    )
    assert routing.default is Topology.PER_TENANT
    assert dict(routing.overrides) == {"cmd.a": Topology.SHARED, "cmd.b": Topology.PER_TENANT}
    assert routing_from_env({}) == DEFAULT_ROUTING
    assert routing_from_env({"BOOST_ROUTING": " "}) == DEFAULT_ROUTING
    assert routing_from_env({}).default is Topology.ROUTED
    assert routing_from_env({"BOOST_ROUTING": "shared"}) == Routing(Topology.SHARED)
    overridden = routing_from_env(
        {"BOOST_ROUTING": "shared", "BOOST_ROUTING_OVERRIDES": "cmd.a=routed"}
    )
    assert overridden.routes("cmd.a")
    assert not overridden.routes("cmd.b")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BOOST_ROUTING": "PER_TENANT"}, "BOOST_ROUTING: unknown topology 'PER_TENANT'"),
        ({"BOOST_ROUTING": "pertenant"}, "BOOST_ROUTING: unknown topology"),
        ({"BOOST_ROUTING_OVERRIDES": "cmd.a"}, "BOOST_ROUTING_OVERRIDES: expected queue=topology"),
        ({"BOOST_ROUTING_OVERRIDES": "=shared"}, "BOOST_ROUTING_OVERRIDES: expected queue="),
        ({"BOOST_ROUTING_OVERRIDES": "cmd.a="}, "BOOST_ROUTING_OVERRIDES: expected queue="),
        ({"BOOST_ROUTING_OVERRIDES": "cmd.a=fast"}, "BOOST_ROUTING_OVERRIDES: unknown topology"),
        ({"BOOST_ROUTING_OVERRIDES": "cmd.>=shared"}, "BOOST_ROUTING_OVERRIDES: invalid queue"),
        ({"BOOST_ROUTING_OVERRIDES": "tenant.a.b=shared"}, "BOOST_ROUTING_OVERRIDES: invalid"),
        ({"BOOST_ROUTING_OVERRIDES": "a=shared,a=per_tenant"}, "given twice"),
    ],
)
def test_from_env_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        routing_from_env(env)


def test_app_settings_carry_the_routing() -> None:
    settings = AppSettings.from_env({"BOOST_ROUTING_OVERRIDES": "cmd.x=per_tenant"})
    assert settings.routing.physical("cmd.x", "org-A") == "tenant.org-A.cmd.x"
    with pytest.raises(ConfigError, match="BOOST_ROUTING"):
        AppSettings.from_env({"BOOST_ROUTING": "nope"})


def test_default_tenant_is_opt_in_and_validated() -> None:
    assert AppSettings.from_env({}).default_tenant is None
    assert AppSettings.from_env({"BOOST_DEFAULT_TENANT": " "}).default_tenant is None
    settings = AppSettings.from_env({"BOOST_DEFAULT_TENANT": " default "})
    assert settings.default_tenant == TenantId("default")
    assert default_tenant_from_env({"BOOST_DEFAULT_TENANT": "org-legacy"}) == TenantId("org-legacy")


@pytest.mark.parametrize("bad", ["x' OR '1'='1", "org A", "org.legacy", "t" * 65, "-default"])
def test_invalid_default_tenant_is_refused_naming_the_variable(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^BOOST_DEFAULT_TENANT: invalid tenant id"):
        AppSettings.from_env({"BOOST_DEFAULT_TENANT": bad})


# -- the exclusion selector -----------------------------------------------------------------------
def test_exclusion_renders_null_check_and_escaped_in_list() -> None:
    selector = TenantExclusion((TenantId("org-A"), TenantId("org-B"), TenantId("org-A")))
    assert selector.render() == "tenantUUID IS NULL OR tenantUUID NOT IN ('org-A', 'org-B')"
    assert selector.tenants == (TenantId("org-A"), TenantId("org-B"))
    assert isinstance(selector, SelectorLike)
    assert isinstance(tenant_selector("org-A"), SelectorLike)


def test_exclusion_matches_what_it_renders() -> None:
    selector = TenantExclusion(("org-A", "org-B"))  # type: ignore[arg-type]
    assert not selector.matches({"tenantUUID": "org-A"})
    assert not selector.matches({"tenantUUID": "org-B", "x": "y"})
    assert selector.matches({"tenantUUID": "org-C"})
    assert selector.matches({"tenantUUID": "org-a"})  # case-sensitive, like the broker
    assert selector.matches({})
    assert selector.matches({"tenantUUID": "x' OR '1'='1"})


@pytest.mark.parametrize("bad", ["x' OR '1'='1", "org-A') OR ('1'='1", "", "a b"])
def test_exclusion_refuses_invalid_tenants(bad: str) -> None:
    with pytest.raises(InvalidTenantError):
        TenantExclusion((TenantId("org-A"), bad))  # type: ignore[arg-type]


def test_exclusion_needs_at_least_one_tenant_and_a_sequence() -> None:
    with pytest.raises(ConfigError, match="at least one tenant"):
        TenantExclusion(())
    with pytest.raises(ConfigError, match="sequence of tenants"):
        TenantExclusion("org-A")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["DLQ.cmd", "cmd.quarantine", "DLQ.x.quarantine"])
def test_dead_letter_and_quarantine_names_are_not_service_queues(name: str) -> None:
    """A service queue named like one would share another queue's dead letters and re-drives."""
    with pytest.raises(ConfigError, match="reserved for dead-letter and quarantine queues"):
        check_logical_queue(name)
