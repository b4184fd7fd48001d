"""Tenant rule files: added on top of the defaults for their tenant only, validated strictly with
errors naming the file and the field, cached and reloaded when the file changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from boost_tenancy import ConfigError, TenantId
from services.professor.engine import interpret
from services.professor.rules import (
    DEFAULT_RULES,
    RuleLoader,
    load_rules,
    rules_file,
)
from tests.unit.services.professor_texts import PURCHASE_ORDER_RULES, PURCHASE_ORDER_TEXT

ACME = TenantId("org-acme")
GLOBEX = TenantId("org-globex")


def write_rules(rules_dir: Path, tenant: TenantId, content: object, *, bump_s: int = 0) -> Path:
    path = rules_file(rules_dir, tenant)
    path.write_text(content if isinstance(content, str) else json.dumps(content), "utf-8")
    if bump_s:
        # Filesystems with coarse timestamps could otherwise keep the old mtime for a fast edit.
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump_s * 1_000_000_000))
    return path


def test_defaults_cover_invoice_receipt_contract_and_letter() -> None:
    assert DEFAULT_RULES.document_types == ("invoice", "receipt", "contract", "letter")
    assert load_rules(None, ACME) is DEFAULT_RULES


def test_no_file_for_the_tenant_means_the_defaults(tmp_path: Path) -> None:
    assert load_rules(tmp_path, ACME) is DEFAULT_RULES


def test_tenant_rules_add_a_type_for_that_tenant_only(tmp_path: Path) -> None:
    path = write_rules(tmp_path, ACME, PURCHASE_ORDER_RULES)
    acme = load_rules(tmp_path, ACME)
    globex = load_rules(tmp_path, GLOBEX)
    assert acme.source == path
    assert acme.document_types == ("invoice", "receipt", "contract", "letter", "purchase_order")
    assert globex is DEFAULT_RULES
    for_acme = interpret(PURCHASE_ORDER_TEXT, acme, threshold=0.6)
    for_globex = interpret(PURCHASE_ORDER_TEXT, globex, threshold=0.6)
    assert (for_acme.document_type, for_acme.needs_review) == ("purchase_order", False)
    assert for_acme.confidence == 1.0
    assert for_globex.document_type == "other"
    assert for_globex.needs_review


def test_tenant_rules_can_strengthen_a_default_type(tmp_path: Path) -> None:
    text = "Statement of charges\nCharges for March: EUR 40.00\nTotal EUR 40.00"
    assert interpret(text, DEFAULT_RULES, threshold=0.6).document_type == "other"
    write_rules(
        tmp_path,
        ACME,
        {
            "rules": [
                {
                    "documentType": "invoice",
                    "keywords": {"statement of charges": 2.0},
                    "weight": 1.5,
                    "requiredFields": ["total"],
                }
            ]
        },
    )
    result = interpret(text, load_rules(tmp_path, ACME), threshold=0.6)
    assert result.document_type == "invoice"
    assert result.confidence == 1.0  # score 3.0 = 1.5 x 2.0; the total is its evidence


@pytest.mark.parametrize(
    ("content", "field", "problem"),
    [
        ("{not json", "is not valid JSON:", "line 1 column 2"),
        ("[]", "top level", "must be an object"),
        ({"rules": [], "extra": 1}, "top level", "unknown field(s) 'extra'"),
        ({}, "rules", "must be a list"),
        ({"rules": ["invoice"]}, "rules[0]", "must be an object"),
        (
            {"rules": [{"keywords": {"po": 1}}]},
            "rules[0].documentType",
            "must be a lowercase name",
        ),
        (
            {"rules": [{"documentType": "Purchase Order", "keywords": {"po": 1}}]},
            "rules[0].documentType",
            "'Purchase Order'",
        ),
        (
            {"rules": [{"documentType": "other", "keywords": {"po": 1}}]},
            "rules[0].documentType",
            "reserved",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": {}}]},
            "rules[0].keywords",
            "must be a non-empty object",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": ["purchase order"]}]},
            "rules[0].keywords",
            "must be a non-empty object",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": {"purchase order": "high"}}]},
            "rules[0].keywords['purchase order']",
            "must be a positive number, got 'high'",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": {"purchase order": True}}]},
            "rules[0].keywords['purchase order']",
            "must be a positive number",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": {"  ": 1}}]},
            "rules[0].keywords",
            "phrase '  '",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": {"po": 1}, "weight": -1}]},
            "rules[0].weight",
            "must be a positive number, got -1",
        ),
        (
            {"rules": [{"documentType": "po", "keywords": {"po": 1}, "weigth": 2}]},
            "rules[0]",
            "unknown field(s) 'weigth'",
        ),
        (
            {
                "rules": [
                    {"documentType": "po", "keywords": {"po": 1}},
                    {"documentType": "po", "keywords": {"po": 1}, "requiredFields": ["poNo"]},
                ]
            },
            "rules[1].requiredFields",
            "must be a list of",
        ),
    ],
)
def test_invalid_rules_file_error_names_the_file_and_the_field(
    tmp_path: Path, content: object, field: str, problem: str
) -> None:
    path = write_rules(tmp_path, ACME, content)
    with pytest.raises(ConfigError) as raised:
        RuleLoader(tmp_path).load(ACME)
    message = str(raised.value)
    assert str(path) in message
    assert field in message
    assert problem in message


def test_invalid_json_error_gives_the_position(tmp_path: Path) -> None:
    write_rules(tmp_path, ACME, '{\n  "rules": [\n    {"documentType": "po",}\n  ]\n}')
    with pytest.raises(ConfigError, match=r"org-acme\.json.*line 3 column"):
        RuleLoader(tmp_path).load(ACME)


def test_rules_are_cached_until_the_file_changes(tmp_path: Path) -> None:
    loader = RuleLoader(tmp_path)
    write_rules(tmp_path, ACME, PURCHASE_ORDER_RULES)
    first = loader.load(ACME)
    assert loader.load(ACME) is first  # unchanged file: the cached rule set
    changed = {"rules": [{"documentType": "delivery_note", "keywords": {"delivery note": 3.0}}]}
    write_rules(tmp_path, ACME, changed, bump_s=5)
    reloaded = loader.load(ACME)
    assert reloaded is not first
    assert reloaded.document_types[-1] == "delivery_note"
    assert "purchase_order" not in reloaded.document_types
    rules_file(tmp_path, ACME).unlink()
    assert loader.load(ACME) is DEFAULT_RULES


def test_a_broken_file_fails_every_time_until_fixed(tmp_path: Path) -> None:
    loader = RuleLoader(tmp_path)
    write_rules(tmp_path, ACME, PURCHASE_ORDER_RULES)
    loader.load(ACME)
    write_rules(tmp_path, ACME, "{broken", bump_s=5)
    for _ in range(2):
        with pytest.raises(ConfigError):
            loader.load(ACME)
    write_rules(tmp_path, ACME, PURCHASE_ORDER_RULES, bump_s=10)
    assert "purchase_order" in loader.load(ACME).document_types


def test_load_rules_shares_a_cache_per_folder(tmp_path: Path) -> None:
    write_rules(tmp_path, ACME, PURCHASE_ORDER_RULES)
    assert load_rules(tmp_path, ACME) is load_rules(tmp_path, ACME)
