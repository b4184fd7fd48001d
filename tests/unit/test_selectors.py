"""Selector building: tenants are validated before a selector exists, literals are escaped, property
names cannot carry operators, and matches() agrees with what the rendered text means."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from boost_tenancy.errors import ConfigError, InvalidTenantError
from boost_tenancy.selectors import (
    TENANT_PROPERTY,
    Selector,
    check_property_name,
    string_literal,
    tenant_selector,
)
from boost_tenancy.tenancy import TenantId

INJECTIONS = [
    "x' OR '1'='1",
    "a' OR tenantUUID IS NOT NULL OR 'b'='b",
    "a'--",
    "' OR 1=1 --",
    "org-A' OR 'x'='x",
    "org-A\u2019 OR \u20181\u2019=\u20181",
    "org-A\u02bc",
    "org-A\uff07",
    "org-A\x00",
    "org-A\n OR 1=1",
    "org-A\r",
    "org-A OR 1=1",
    "org-A)",
    "%",
    "org_%",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_payload_as_tenant_is_refused_before_a_selector_exists(payload: str) -> None:
    with pytest.raises(InvalidTenantError) as caught:
        tenant_selector(payload)
    assert caught.value.value == payload


@pytest.mark.parametrize("payload", INJECTIONS)
def test_selector_built_directly_refuses_an_injection_payload_as_tenant(payload: str) -> None:
    with pytest.raises(InvalidTenantError):
        Selector(payload)  # type: ignore[arg-type]


def test_tenant_selector_accepts_a_tenant_id_or_valid_text() -> None:
    assert tenant_selector("org-A") == tenant_selector(TenantId("org-A"))
    assert tenant_selector("org-A").tenant == TenantId("org-A")


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("", "''"),
        ("plain", "'plain'"),
        ("it's", "'it''s'"),
        ("'", "''''"),
        ("''", "''''''"),
        ("x' OR '1'='1", "'x'' OR ''1''=''1'"),
        ('say "hi"', "'say \"hi\"'"),
        ("Zürich", "'Zürich'"),
    ],
)
def test_string_literal_quotes_and_doubles_embedded_quotes(value: str, literal: str) -> None:
    assert string_literal(value) == literal


def test_render_of_a_tenant_selector_is_one_equality_on_tenant_uuid() -> None:
    assert tenant_selector("org-A").render() == "tenantUUID = 'org-A'"


def test_render_joins_clauses_with_and_in_the_order_added() -> None:
    selector = tenant_selector("org-A").and_equals("kind", "invoice").and_equals("region", "eu")
    assert selector.render() == "tenantUUID = 'org-A' AND kind = 'invoice' AND region = 'eu'"


def test_render_escapes_a_quote_in_a_clause_value() -> None:
    selector = tenant_selector("org-A").and_equals("kind", "a' OR tenantUUID IS NOT NULL OR 'b'='b")
    assert selector.render() == (
        "tenantUUID = 'org-A' AND kind = 'a'' OR tenantUUID IS NOT NULL OR ''b''=''b'"
    )


def test_and_equals_returns_a_new_selector_leaving_the_original_unchanged() -> None:
    base = tenant_selector("org-A")
    narrower = base.and_equals("kind", "x")
    assert base.clauses == ()
    assert narrower.clauses == (("kind", "x"),)
    assert narrower.tenant == base.tenant


def test_matches_requires_the_exact_tenant() -> None:
    selector = tenant_selector("org-A")
    assert selector.matches({TENANT_PROPERTY: "org-A"})
    assert selector.matches({TENANT_PROPERTY: "org-A", "other": "x"})
    assert not selector.matches({TENANT_PROPERTY: "org-B"})
    assert not selector.matches({TENANT_PROPERTY: "ORG-A"}), "tenant ids are case-sensitive"
    assert not selector.matches({TENANT_PROPERTY: "org-A "})
    assert not selector.matches({}), "a message without a tenant matches no tenant selector"


def test_matches_requires_every_clause() -> None:
    selector = tenant_selector("org-A").and_equals("kind", "x").and_equals("region", "eu")
    assert selector.matches({TENANT_PROPERTY: "org-A", "kind": "x", "region": "eu"})
    assert not selector.matches({TENANT_PROPERTY: "org-A", "kind": "x"})
    assert not selector.matches({TENANT_PROPERTY: "org-A", "kind": "y", "region": "eu"})
    assert not selector.matches({TENANT_PROPERTY: "org-B", "kind": "x", "region": "eu"})


def test_matches_compares_a_quoted_clause_value_literally() -> None:
    payload = "x' OR '1'='1"
    selector = tenant_selector("org-A").and_equals("kind", payload)
    assert selector.matches({TENANT_PROPERTY: "org-A", "kind": payload})
    assert not selector.matches({TENANT_PROPERTY: "org-A", "kind": "x"})
    assert not selector.matches({TENANT_PROPERTY: "org-A", "kind": "1"})


@pytest.mark.parametrize("name", ["kind", "Kind", "_k", "$k", "a1", "x_y$z", "jmsLike", "nullable"])
def test_plain_identifier_is_a_valid_property_name(name: str) -> None:
    assert check_property_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "1kind",
        "kind = 'x' OR 1=1 OR kind",
        "a b",
        "a=b",
        "a<>b",
        "a-b",
        "a.b",
        "a'",
        "a)",
        "(a",
        "a+b",
        "a*b",
        "a/b",
        "a,b",
        "a\n",
        "kïnd",
        "NULL",
        "null",
        "TRUE",
        "false",
        "NOT",
        "and",
        "Or",
        "BETWEEN",
        "like",
        "IN",
        "is",
        "ESCAPE",
    ],
)
def test_property_name_that_is_not_a_plain_identifier_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="expected a JMS identifier"):
        check_property_name(name)


@pytest.mark.parametrize("name", ["JMSType", "JMSXGroupID", "JMS_AMQ_x", "JMS"])
def test_property_name_with_the_jms_prefix_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="the JMS prefix is reserved"):
        check_property_name(name)


@pytest.mark.parametrize("name", ["kind OR 1=1", "JMSType", "AND", "1x"])
def test_and_equals_refuses_an_invalid_property_name(name: str) -> None:
    with pytest.raises(ConfigError):
        tenant_selector("org-A").and_equals(name, "x")


def test_selector_refuses_a_non_string_clause_value() -> None:
    with pytest.raises(ConfigError, match="selector value for 'kind' must be a string"):
        tenant_selector("org-A").and_equals("kind", 1)  # type: ignore[arg-type]


def _parse_literal(literal: str) -> str:
    assert literal.startswith("'")
    assert literal.endswith("'")
    inner = literal[1:-1]
    assert "'" not in inner.replace("''", ""), "every quote inside the literal is doubled"
    return inner.replace("''", "'")


@given(st.text())
@example("'")
@example("x' OR '1'='1")
@example("a' OR tenantUUID IS NOT NULL OR 'b'='b")
@example("'''")
def test_rendered_clause_literal_parses_back_to_the_same_value(value: str) -> None:
    prefix = "tenantUUID = 'org-A' AND kind = "
    rendered = tenant_selector("org-A").and_equals("kind", value).render()
    assert rendered.startswith(prefix)
    assert _parse_literal(rendered[len(prefix) :]) == value
    assert _parse_literal(string_literal(value)) == value


def test_selector_given_tenant_text_is_either_refused_or_rendered_correctly() -> None:
    try:
        selector = Selector("org-A")  # type: ignore[arg-type]
    except (ConfigError, InvalidTenantError, TypeError):
        return
    assert selector.render() == "tenantUUID = 'org-A'"
