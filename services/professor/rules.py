"""Classification rules: weighted keyword phrases per document type, defaults plus tenant files.

A tenant's `<rules_dir>/<tenant>.json` is validated strictly and cached until the file changes.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from boost_tenancy import ConfigError, TenantId

OTHER: Final = "other"
"""The type of a document no rule matched well; reserved, no rule may claim it."""

FIELD_NAMES: Final = frozenset(
    {"invoiceNumber", "dates", "issueDate", "dueDate", "total", "amounts", "iban", "vatIds"}
)
"""Field names a rule may require (the keys of an interpretation's fields)."""

_TYPE_RE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
_MAX_PHRASE: Final = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class Keyword:
    """A phrase matched case-insensitively as whole words, and what finding it is worth."""

    phrase: str
    weight: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """Evidence for one document type: its keywords, the rule's weight, and the fields of which
    at least one must be found for full confidence (none: no field is needed)."""

    document_type: str
    keywords: tuple[Keyword, ...]
    required_fields: tuple[str, ...] = ()
    weight: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleSet:
    """The rules one tenant's documents are classified by, in order (defaults first)."""

    rules: tuple[Rule, ...]
    source: Path | None = None
    """The tenant file that added rules to the defaults, if any."""

    @property
    def document_types(self) -> tuple[str, ...]:
        """Every type a rule names, in first-seen order (the order that breaks score ties)."""
        return tuple(dict.fromkeys(rule.document_type for rule in self.rules))


def _rule(
    document_type: str, keywords: dict[str, float], required_fields: tuple[str, ...] = ()
) -> Rule:
    return Rule(
        document_type=document_type,
        keywords=tuple(Keyword(phrase=p, weight=w) for p, w in keywords.items()),
        required_fields=required_fields,
    )


DEFAULT_RULES: Final = RuleSet(
    rules=(
        _rule(
            "invoice",
            {
                "invoice": 2.0,
                "invoice number": 1.5,
                "invoice no": 1.5,
                "invoice date": 1.0,
                "rechnung": 2.0,
                "rechnungsnummer": 1.5,
                "bill to": 1.0,
                "amount due": 1.0,
                "due date": 1.0,
                "payment terms": 1.0,
                "please pay": 0.5,
                "vat": 0.5,
                "ust-idnr": 0.5,
                "iban": 0.5,
            },
            # Keywords alone make a weak invoice: one of these must be there for full confidence.
            ("invoiceNumber", "iban", "vatIds", "total"),
        ),
        _rule(
            "receipt",
            {
                "receipt": 2.5,
                "kassenbon": 2.5,
                "quittung": 2.5,
                "cash": 1.0,
                "change": 0.5,
                "cashier": 1.0,
                "paid by card": 1.0,
                "card payment": 1.0,
                "thank you for your purchase": 1.5,
                "thank you for shopping": 1.5,
                "store": 0.5,
                "qty": 0.5,
            },
            ("total",),
        ),
        _rule(
            "contract",
            {
                "agreement": 2.0,
                "contract": 2.0,
                "vertrag": 2.0,
                "parties": 1.0,
                "party": 0.5,
                "provider": 0.5,
                "client": 0.5,
                "term": 0.5,
                "termination": 1.0,
                "terminate": 0.5,
                "notice": 0.5,
                "shall": 0.5,
                "effective date": 1.0,
                "governing law": 1.5,
                "jurisdiction": 1.0,
                "whereas": 1.0,
                "hereby": 0.5,
                "in witness whereof": 1.5,
                "signature": 0.5,
            },
        ),
        _rule(
            "letter",
            {
                "dear": 2.0,
                "sincerely": 2.0,
                "yours faithfully": 1.5,
                "yours truly": 1.5,
                "kind regards": 1.0,
                "best regards": 1.0,
                "sehr geehrte": 1.5,
                "sehr geehrter": 1.5,
                "mit freundlichen grüßen": 1.5,
            },
        ),
    )
)


# -- tenant rule files ----------------------------------------------------------------------------
def _fail(path: Path, where: str, problem: str) -> ConfigError:
    return ConfigError(f"rules file {str(path)!r}: {where} {problem}")


def _positive_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_keys(path: Path, where: str, value: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _fail(path, where, f"has unknown field(s) {', '.join(map(repr, unknown))}")


def _parse_rule(path: Path, index: int, raw: object) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        raise _fail(path, where, f"must be an object, got {type(raw).__name__}")
    _check_keys(path, where, raw, {"documentType", "keywords", "weight", "requiredFields"})
    document_type = raw.get("documentType")
    if not isinstance(document_type, str) or _TYPE_RE.fullmatch(document_type) is None:
        raise _fail(
            path,
            f"{where}.documentType",
            f"must be a lowercase name like 'purchase_order', got {document_type!r}",
        )
    if document_type == OTHER:
        raise _fail(path, f"{where}.documentType", f"{OTHER!r} is reserved for no match")
    keywords = raw.get("keywords")
    if not isinstance(keywords, dict) or not keywords:
        raise _fail(
            path,
            f"{where}.keywords",
            f"must be a non-empty object of phrase: weight, got {keywords!r}",
        )
    parsed: list[Keyword] = []
    for phrase, weight in keywords.items():
        normalised = " ".join(phrase.split())
        if not normalised or len(normalised) > _MAX_PHRASE:
            raise _fail(
                path,
                f"{where}.keywords",
                f"phrase {phrase!r} must be 1 to {_MAX_PHRASE} characters",
            )
        if not _positive_number(weight):
            raise _fail(
                path, f"{where}.keywords[{phrase!r}]", f"must be a positive number, got {weight!r}"
            )
        parsed.append(Keyword(phrase=normalised, weight=float(weight)))
    weight = raw.get("weight", 1.0)
    if not _positive_number(weight):
        raise _fail(path, f"{where}.weight", f"must be a positive number, got {weight!r}")
    required = raw.get("requiredFields", [])
    if not isinstance(required, list) or any(
        not isinstance(name, str) or name not in FIELD_NAMES for name in required
    ):
        raise _fail(
            path,
            f"{where}.requiredFields",
            f"must be a list of {', '.join(sorted(FIELD_NAMES))}, got {required!r}",
        )
    return Rule(
        document_type=document_type,
        keywords=tuple(parsed),
        required_fields=tuple(required),
        weight=float(weight),
    )


def parse_rules_file(path: Path, text: str) -> tuple[Rule, ...]:
    """The rules of a tenant file's text; ConfigError naming the file and the offending field."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(
            path, "is not valid JSON:", f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    if not isinstance(document, dict):
        raise _fail(path, "top level", f"must be an object, got {type(document).__name__}")
    _check_keys(path, "top level", document, {"rules"})
    rules = document.get("rules")
    if not isinstance(rules, list):
        raise _fail(path, "rules", f"must be a list of rules, got {rules!r}")
    return tuple(_parse_rule(path, index, raw) for index, raw in enumerate(rules))


def rules_file(rules_dir: Path, tenant: TenantId) -> Path:
    """Where a tenant's rules live; the tenant grammar keeps the name inside rules_dir."""
    return rules_dir / f"{TenantId.parse(tenant).value}.json"


class RuleLoader:
    """Loads each tenant's rule set, cached until the file's mtime or size changes.

    Thread-safe: one loader serves every worker thread of a processor.
    """

    def __init__(self, rules_dir: Path | None) -> None:
        self._rules_dir = rules_dir
        self._lock = threading.Lock()
        self._cache: dict[TenantId, tuple[tuple[int, int], RuleSet]] = {}

    def load(self, tenant: TenantId) -> RuleSet:
        """The tenant's rules: the defaults, plus its file's rules when it has one.

        A broken file raises ConfigError every time (nothing is cached), so fixing it takes
        effect with the next message.
        """
        if self._rules_dir is None:
            return DEFAULT_RULES
        tenant = TenantId.parse(tenant)
        path = rules_file(self._rules_dir, tenant)
        try:
            stat = path.stat()
        except FileNotFoundError:
            with self._lock:
                self._cache.pop(tenant, None)
            return DEFAULT_RULES
        except OSError as exc:
            raise ConfigError(f"rules file {str(path)!r} cannot be read: {exc}") from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._cache.get(tenant)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"rules file {str(path)!r} cannot be read: {exc}") from exc
        loaded = RuleSet(rules=DEFAULT_RULES.rules + parse_rules_file(path, text), source=path)
        with self._lock:
            self._cache[tenant] = (stamp, loaded)
        return loaded


_loaders: dict[Path | None, RuleLoader] = {}
_loaders_lock = threading.Lock()


def load_rules(rules_dir: Path | None, tenant: TenantId) -> RuleSet:
    """The tenant's rule set from rules_dir (defaults only without one), via a shared cache."""
    with _loaders_lock:
        loader = _loaders.get(rules_dir)
        if loader is None:
            loader = _loaders[rules_dir] = RuleLoader(rules_dir)
    return loader.load(tenant)


__all__ = [
    "DEFAULT_RULES",
    "FIELD_NAMES",
    "OTHER",
    "Keyword",
    "Rule",
    "RuleLoader",
    "RuleSet",
    "load_rules",
    "parse_rules_file",
    "rules_file",
]
