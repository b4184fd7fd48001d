"""The tenant grammar: 1-64 characters from [A-Za-z0-9_-], starting and ending with a letter or
digit, UUIDs accepted, case-sensitive, never normalised; errors show the value and the problem."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from boost_tenancy.errors import InvalidTenantError
from boost_tenancy.tenancy import MAX_TENANT_LENGTH, TenantId, parse_tenants

UUID = "550e8400-e29b-41d4-a716-446655440000"


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "Z",
        "7",
        "org-A",
        "org_a",
        "tenant-42",
        "a-b_c-d",
        "A1",
        "a--b",
        "a__b",
        UUID,
        UUID.upper(),
        "x" * MAX_TENANT_LENGTH,
        "a" + "-" * 62 + "b",
    ],
)
def test_valid_tenant_is_accepted_and_kept_exactly(value: str) -> None:
    tenant = TenantId(value)
    assert tenant.value == value
    assert str(tenant) == value


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "it is empty"),
        ("x" * (MAX_TENANT_LENGTH + 1), "it is 65 characters long; the limit is 64"),
        ("x" * 1000, "it is 1000 characters long"),
        (" org", "whitespace"),
        ("org ", "whitespace"),
        ("org a", "whitespace"),
        ("org\ta", "whitespace"),
        ("org\n", "whitespace"),
        ("org\u00a0a", "whitespace"),
        ("org'a", "quote"),
        ('org"a', "quote"),
        ("org`a", "quote"),
        ("x' OR '1'='1", "quote"),
        ("x'OR'1'='1", "quote"),
        ("org\x00a", "control character U+0000"),
        ("org\x1ba", "control character U+001B"),
        ("org\x7fa", "control character U+007F"),
        ("org\u200ba", "control character U+200B"),
        ("zürich", "it contains 'ü'; only A-Z, a-z, 0-9, '-' and '_' are allowed"),
        ("org\u2019a", "only A-Z, a-z, 0-9"),
        ("\u0661\u0662", "only A-Z, a-z, 0-9"),
        ("\uff4f\uff52\uff47", "only A-Z, a-z, 0-9"),
        ("org.a", "it contains '.'"),
        ("org/a", "it contains '/'"),
        ("org=a", "it contains '='"),
        ("org;a", "it contains ';'"),
        ("org%a", "it contains '%'"),
        ("-org", "must start and end with a letter or digit"),
        ("org-", "must start and end with a letter or digit"),
        ("_org", "must start and end with a letter or digit"),
        ("org_", "must start and end with a letter or digit"),
        ("-", "must start and end with a letter or digit"),
        ("_", "must start and end with a letter or digit"),
    ],
)
def test_invalid_tenant_is_refused_with_the_value_and_the_problem(value: str, problem: str) -> None:
    with pytest.raises(InvalidTenantError) as caught:
        TenantId(value)
    message = str(caught.value)
    assert repr(value) in message, "the message shows the offending value"
    assert problem in message
    assert caught.value.value == value
    assert problem in caught.value.reason


def test_invalid_tenant_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid tenant id"):
        TenantId("a b")


@pytest.mark.parametrize("value", [None, 42, 4.2, b"org-a", ["org-a"], ("org-a",), {"v": 1}])
def test_non_string_tenant_is_refused_naming_its_type(value: object) -> None:
    with pytest.raises(InvalidTenantError, match=f"expected a string, got {type(value).__name__}"):
        TenantId(value)  # type: ignore[arg-type]


def test_parse_remembers_valid_strings_only_and_within_its_bound() -> None:
    from boost_tenancy import tenancy

    assert TenantId.parse("org-remembered") is TenantId.parse("org-remembered")
    for _ in range(2):  # a refused string is refused again, never remembered
        with pytest.raises(InvalidTenantError, match="org remembered"):
            TenantId.parse("org remembered")
    assert "org remembered" not in tenancy._parsed
    for n in range(tenancy._PARSED_MAX + 10):
        assert TenantId.parse(f"bulk-{n}").value == f"bulk-{n}"
    assert 0 < len(tenancy._parsed) <= tenancy._PARSED_MAX

    class Named(TenantId):
        pass

    assert type(Named.parse("org-remembered")) is Named  # a subclass gets its own instances


def test_parse_passes_an_existing_tenant_through_unchanged() -> None:
    tenant = TenantId("org-A")
    assert TenantId.parse(tenant) is tenant


def test_parse_validates_raw_text() -> None:
    assert TenantId.parse("org-A") == TenantId("org-A")
    with pytest.raises(InvalidTenantError, match="quote"):
        TenantId.parse("org'A")
    with pytest.raises(InvalidTenantError, match="expected a string"):
        TenantId.parse(7)


def test_tenant_ids_are_case_sensitive_and_not_normalised() -> None:
    lower, upper = TenantId(UUID), TenantId(UUID.upper())
    assert lower != upper
    assert upper.value == UUID.upper()
    assert len({TenantId("Org"), TenantId("org"), TenantId("ORG")}) == 3


def test_is_uuid_recognises_only_the_canonical_form() -> None:
    assert TenantId(UUID).is_uuid
    assert TenantId(UUID.upper()).is_uuid
    assert not TenantId(UUID.replace("-", "")).is_uuid
    assert not TenantId("org-A").is_uuid
    assert not TenantId(UUID + "0").is_uuid


def test_tenant_is_immutable_and_hashable() -> None:
    tenant = TenantId("org-A")
    with pytest.raises(AttributeError):
        tenant.value = "org-B"  # type: ignore[misc]
    assert {tenant: 1}[TenantId("org-A")] == 1


# -- parse_tenants --------------------------------------------------------------------------------
def test_parse_tenants_splits_a_comma_string_and_strips_spaces() -> None:
    assert parse_tenants("org-A, org-B ,org-C") == (
        TenantId("org-A"),
        TenantId("org-B"),
        TenantId("org-C"),
    )


def test_parse_tenants_accepts_a_list_or_tuple_keeping_the_order() -> None:
    expected = (TenantId("b"), TenantId("a"), TenantId(UUID))
    assert parse_tenants(["b", "a", UUID]) == expected
    assert parse_tenants(("b", TenantId("a"), UUID)) == expected


@pytest.mark.parametrize("values", ["org-A,org-B,org-A", ["org-A", "org-A"], "x, x"])
def test_parse_tenants_refuses_duplicates_naming_the_tenant(values: object) -> None:
    with pytest.raises(InvalidTenantError, match="listed twice") as caught:
        parse_tenants(values)
    assert caught.value.value in {"org-A", "x"}


def test_parse_tenants_treats_ids_differing_in_case_as_distinct() -> None:
    assert len(parse_tenants(["org", "ORG"])) == 2


@pytest.mark.parametrize("values", ["", "   ", [], ()])
def test_parse_tenants_refuses_an_empty_list(values: object) -> None:
    with pytest.raises(InvalidTenantError, match="the list of tenants is empty"):
        parse_tenants(values)


@pytest.mark.parametrize("values", ["org-A,,org-B", "org-A,", ["org-A", ""]])
def test_parse_tenants_refuses_an_empty_entry(values: object) -> None:
    with pytest.raises(InvalidTenantError, match="it is empty"):
        parse_tenants(values)


@pytest.mark.parametrize("values", ["org-A,x' OR '1'='1", ["org-A", "a;b"]])
def test_parse_tenants_validates_every_entry(values: object) -> None:
    with pytest.raises(InvalidTenantError):
        parse_tenants(values)


@pytest.mark.parametrize("values", [None, 3, {"org-A"}, b"org-A"])
def test_parse_tenants_refuses_other_types(values: object) -> None:
    with pytest.raises(InvalidTenantError, match="expected a list of tenant ids"):
        parse_tenants(values)


# -- property -------------------------------------------------------------------------------------
@given(st.text())
@example("")
@example("a")
@example(UUID)
@example("x' OR '1'='1")
@example("a" * 64)
@example("a" * 65)
def test_any_text_is_either_refused_or_kept_unchanged(value: str) -> None:
    try:
        tenant = TenantId(value)
    except InvalidTenantError as exc:
        assert exc.value == value
        assert exc.reason
    else:
        assert tenant.value == value
        assert TenantId.parse(value) == tenant
        assert 1 <= len(value) <= MAX_TENANT_LENGTH
        assert value.isascii()


@given(st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_-]{0,62}[A-Za-z0-9])?", fullmatch=True))
def test_every_string_of_the_grammar_is_accepted(value: str) -> None:
    assert TenantId(value).value == value
