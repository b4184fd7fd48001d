"""The only place a JMS selector string is built.

A selector is a value (one tenant's messages, or every tenant but some) rendered with escaped
string literals; the in-memory transport evaluates the same value, so both transports agree.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from boost_tenancy.errors import ConfigError
from boost_tenancy.tenancy import TenantId

TENANT_PROPERTY: Final = "tenantUUID"

# JMS identifiers (JMS 1.1 §3.8.1.1) restricted to ASCII; a property name is never quoted, so it
# must not be able to carry operators.
_IDENTIFIER_RE: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_RESERVED_WORDS: Final = frozenset(
    {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}
)


@runtime_checkable
class SelectorLike(Protocol):
    """What a transport needs of a selector: the text for the broker, the same test in memory."""

    def render(self) -> str:
        """The selector text sent to the broker."""
        ...

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether a message with these properties is selected."""
        ...


def string_literal(value: str) -> str:
    """Render a JMS selector string literal: single quotes, an embedded quote doubled."""
    return "'" + value.replace("'", "''") + "'"


def check_property_name(name: str) -> str:
    """Refuse a property name that is not a plain JMS identifier."""
    if not isinstance(name, str):
        raise ConfigError(f"invalid message property name {name!r}: expected a JMS identifier")
    _checked_property_name(name)
    return name


@functools.lru_cache(maxsize=4096)
def _checked_property_name(name: str) -> None:
    # Asked for every property of every message sent, of the few names an application uses:
    # a valid name is remembered (a refused one raises, and is checked again next time); the
    # caller gets its own argument back, never an equal one cached before.
    if _IDENTIFIER_RE.fullmatch(name) is None or name.upper() in _RESERVED_WORDS:
        raise ConfigError(f"invalid message property name {name!r}: expected a JMS identifier")
    if name.startswith("JMS"):
        raise ConfigError(f"invalid message property name {name!r}: the JMS prefix is reserved")


@dataclass(frozen=True, slots=True)
class Selector:
    """tenantUUID = '<tenant>' AND <name> = '<value>' ...: a conjunction of string equalities."""

    tenant: TenantId
    clauses: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenant", TenantId.parse(self.tenant))
        for name, value in self.clauses:
            check_property_name(name)
            if not isinstance(value, str):
                raise ConfigError(f"selector value for {name!r} must be a string")

    def and_equals(self, name: str, value: str) -> Selector:
        """A narrower selector: this one AND name = value."""
        return Selector(self.tenant, (*self.clauses, (name, value)))

    def render(self) -> str:
        """The selector text sent to the broker."""
        parts = [f"{TENANT_PROPERTY} = {string_literal(self.tenant.value)}"]
        parts.extend(f"{name} = {string_literal(value)}" for name, value in self.clauses)
        return " AND ".join(parts)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Evaluate the selector the way a broker does for string properties."""
        if properties.get(TENANT_PROPERTY) != self.tenant.value:
            return False
        return all(properties.get(name) == value for name, value in self.clauses)


@dataclass(frozen=True, slots=True)
class TenantExclusion:
    """tenantUUID IS NULL OR tenantUUID NOT IN (...): every message but these tenants'.

    The parking sweeper's selector. A message without the property is selected too (JMS
    three-valued logic would otherwise hide it from NOT IN), so it can be quarantined.
    """

    tenants: tuple[TenantId, ...]

    def __post_init__(self) -> None:
        if isinstance(self.tenants, str | TenantId):
            raise ConfigError("TenantExclusion takes a sequence of tenants, not one tenant")
        parsed = tuple(dict.fromkeys(TenantId.parse(t) for t in self.tenants))
        if not parsed:
            # An empty NOT IN list is not valid selector syntax; "exclude nobody" is no selector.
            raise ConfigError("TenantExclusion needs at least one tenant to exclude")
        object.__setattr__(self, "tenants", parsed)

    def render(self) -> str:
        """The selector text sent to the broker."""
        listed = ", ".join(string_literal(t.value) for t in self.tenants)
        return f"{TENANT_PROPERTY} IS NULL OR {TENANT_PROPERTY} NOT IN ({listed})"

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Evaluate the selector the way a broker does for string properties."""
        value = properties.get(TENANT_PROPERTY)
        return value is None or all(value != t.value for t in self.tenants)


def tenant_selector(tenant: TenantId | str) -> Selector:
    """The selector of one tenant's messages; a raw string is validated first."""
    return Selector(TenantId.parse(tenant))
