"""TenantId: the one validated tenant type, and the grammar every tenant id must match.

A tenant enters the toolkit as untrusted text (producer, consumer, configuration, CLI, message
property); TenantId.parse is the only way in, so an invalid id never reaches a selector or a queue.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from boost_tenancy.errors import InvalidTenantError, TenantMismatchError

MAX_TENANT_LENGTH: Final = 64
"""Longest accepted tenant id; a UUID (36 characters) fits with room for descriptive slugs."""

# Grammar (documented in docs/tenancy.md): 1 to 64 characters from [A-Za-z0-9_-], starting and
# ending with a letter or digit. A canonical UUID (8-4-4-4-12 hex digits) is one such slug.
TENANT_PATTERN: Final = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?"
"""The tenant grammar as a regular expression (whole-string match), as published to clients
(the AsyncAPI document's tenantUUID header)."""
_TENANT_RE: Final = re.compile(TENANT_PATTERN)
_UUID_RE: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def _explain(value: str) -> str:  # noqa: PLR0911  # one early return per kind of defect
    """Say what is wrong with a value that failed the grammar, for the error message."""
    if value == "":
        return "it is empty"
    if len(value) > MAX_TENANT_LENGTH:
        return f"it is {len(value)} characters long; the limit is {MAX_TENANT_LENGTH}"
    for char in value:
        if char.isspace():
            return "it contains whitespace"
        if char in "'\"`":
            return "it contains a quote character"
        if unicodedata.category(char).startswith("C"):
            return f"it contains the control character U+{ord(char):04X}"
        if not (char.isascii() and (char.isalnum() or char in "_-")):
            return f"it contains {char!r}; only A-Z, a-z, 0-9, '-' and '_' are allowed"
    return "it must start and end with a letter or digit"


@dataclass(frozen=True, slots=True)
class TenantId:
    """A validated tenant id: a URL-safe slug or a UUID, case-sensitive, never normalised."""

    value: str

    def __post_init__(self) -> None:
        value: object = self.value
        if not isinstance(value, str):
            raise InvalidTenantError(value, f"expected a string, got {type(value).__name__}")
        if _TENANT_RE.fullmatch(value) is None:
            raise InvalidTenantError(value, _explain(value))

    @classmethod
    def parse(cls, value: object) -> TenantId:
        """Validate untrusted input; an existing TenantId passes through unchanged. A valid
        string's TenantId is remembered: a producer names its tenant as a string on every
        message, and the few a process serves are checked once (a refused one never is)."""
        if isinstance(value, TenantId):
            return value
        if type(value) is str and cls is TenantId:
            known = _parsed.get(value)
            if known is None:
                known = cls(value)
                if len(_parsed) >= _PARSED_MAX:
                    _parsed.clear()  # bounded whatever the input; refilled by use
                _parsed[value] = known
            return known
        return cls(value)  # type: ignore[arg-type]  # __post_init__ reports non-strings

    @property
    def is_uuid(self) -> bool:
        """Whether the id is a canonical UUID (the BOOST organisation id form)."""
        return _UUID_RE.fullmatch(self.value) is not None

    def __str__(self) -> str:
        return self.value


_PARSED_MAX: Final = 4096
_parsed: dict[str, TenantId] = {}
"""Strings TenantId.parse found valid, and their TenantId (immutable, so shared)."""


def parse_tenants(values: object) -> tuple[TenantId, ...]:
    """Parse a list of tenant ids (configuration, CLI), refusing duplicates and an empty list."""
    if isinstance(values, str):
        raw = [part.strip() for part in values.split(",")] if values.strip() else []
    elif isinstance(values, list | tuple):
        raw = list(values)
    else:
        raise InvalidTenantError(values, "expected a list of tenant ids")
    tenants = tuple(TenantId.parse(item) for item in raw)
    if not tenants:
        raise InvalidTenantError(values, "the list of tenants is empty")
    seen: set[TenantId] = set()
    for tenant in tenants:
        if tenant in seen:
            raise InvalidTenantError(tenant.value, "it is listed twice")
        seen.add(tenant)
    return tenants


# -- the tenant guard: every check of a message's tenant goes through these -----------------------
BODY_TENANT_KEYS: Final = ("tenantUUID", "organizationId")
"""The BOOST JSON bodies name the tenant under either key (seed 001, "Fallback Handling")."""


def claimed_tenant(raw: object) -> TenantId | None:
    """The tenant a message claims by its tenantUUID property as received; None when it names
    none or nothing valid (such a message belongs to no tenant: it is quarantined)."""
    if not isinstance(raw, str):
        return None
    try:
        return TenantId.parse(raw)
    except InvalidTenantError:
        return None


def belongs_to(raw: object, tenant: TenantId) -> bool:
    """Whether a delivery whose tenantUUID property is raw may reach tenant's handler."""
    return raw == tenant.value


def check_body_tenant(body: Mapping[str, Any], tenant: TenantId, *, against: str) -> None:
    """Refuse a JSON body that names a tenant other than tenant; against says what tenant is
    (the message tenant, the tenantUUID property) for the error."""
    for key in BODY_TENANT_KEYS:
        named = body.get(key)
        if named is not None and named != tenant.value:
            raise TenantMismatchError(
                f"body field {key}={named!r} does not match {against} {tenant.value!r}"
            )
