"""The professor's rule engine: each document type from realistic text, "other" for unrelated text,
the confidence formula, and when a document needs review."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.professor.engine import interpret, score_types
from services.professor.rules import DEFAULT_RULES, Keyword, Rule, RuleSet
from tests.unit.services.professor_texts import CONTRACT, INVOICE, LETTER, RECEIPT, UNRELATED


@pytest.mark.parametrize(
    ("text", "expected"),
    [(INVOICE, "invoice"), (RECEIPT, "receipt"), (LETTER, "letter"), (CONTRACT, "contract")],
)
def test_each_type_is_recognised_without_review(text: str, expected: str) -> None:
    result = interpret(text, DEFAULT_RULES, threshold=0.6)
    assert result.document_type == expected
    assert result.needs_review is False
    assert result.reasons == ()
    assert 0.6 <= result.confidence <= 1.0


def test_invoice_fields() -> None:
    result = interpret(INVOICE, DEFAULT_RULES, threshold=0.6)
    assert result.fields == {
        "invoiceNumber": "INV-2026-0042",
        "dates": ["2026-03-14", "2026-04-13"],
        "issueDate": "2026-03-14",
        "dueDate": "2026-04-13",
        "total": {"value": "1234.56", "currency": "EUR"},
        "amounts": [
            {"value": "289.00", "currency": "EUR"},
            {"value": "578.00", "currency": "EUR"},
            {"value": "227.50", "currency": "EUR"},
            {"value": "1039.40", "currency": "EUR"},
            {"value": "195.16", "currency": "EUR"},
            {"value": "1234.56", "currency": "EUR"},
        ],
        "iban": ["DE89370400440532013000"],
        "vatIds": ["DE123456789"],
    }


def test_receipt_and_contract_fields() -> None:
    receipt = interpret(RECEIPT, DEFAULT_RULES, threshold=0.6).fields
    assert receipt["total"] == {"value": "23.40", "currency": "EUR"}
    assert receipt["issueDate"] == "2026-03-14"
    assert "invoiceNumber" not in receipt
    assert "dueDate" not in receipt
    contract = interpret(CONTRACT, DEFAULT_RULES, threshold=0.6).fields
    assert contract["amounts"] == [{"value": "12000.00", "currency": "EUR"}]
    assert "total" not in contract


def test_issue_and_due_date_on_one_line_and_german_labels() -> None:
    text = "Rechnung Nr. 17\nRechnungsdatum: 14.03.2026   Zahlbar bis: 13.04.2026\nGesamt 10,00 EUR"
    fields = interpret(text, DEFAULT_RULES, threshold=0.6).fields
    assert (fields["issueDate"], fields["dueDate"]) == ("2026-03-14", "2026-04-13")
    assert fields["invoiceNumber"] == "17"


def test_due_date_label_is_not_taken_for_the_issue_date() -> None:
    text = "Due date: 2026-04-13\nDate: 2026-03-14\nInvoice No. 5"
    fields = interpret(text, DEFAULT_RULES, threshold=0.6).fields
    assert (fields["issueDate"], fields["dueDate"]) == ("2026-03-14", "2026-04-13")


def test_unrelated_text_is_other_and_needs_review() -> None:
    result = interpret(UNRELATED, DEFAULT_RULES, threshold=0.6)
    assert result.document_type == "other"
    assert result.confidence == 0.0
    assert result.needs_review
    assert result.reasons == ("no document type matched",)
    assert result.fields == {"dates": [], "amounts": [], "iban": [], "vatIds": []}


def test_a_weak_match_is_other() -> None:
    result = interpret("The client will call about the term.", DEFAULT_RULES, threshold=0.6)
    assert result.document_type == "other"
    assert result.needs_review
    assert "no document type matched well (contract scored 1, 1.5 needed)" in result.reasons


def test_invoice_without_any_evidence_field_is_below_the_threshold() -> None:
    text = "Invoice\nfor the services of last month, as agreed on the phone."
    result = interpret(text, DEFAULT_RULES, threshold=0.6)
    assert result.document_type == "invoice"
    # share 1, strength 2/3, evidence 0.5
    assert result.confidence == 0.333
    assert result.needs_review
    assert result.reasons[0] == "confidence 0.333 is below the review threshold 0.600"
    assert "invoice without any of invoiceNumber, iban, vatIds, total" in result.reasons


def test_the_same_text_with_an_invoice_number_is_confident() -> None:
    text = "Invoice\nInvoice No. 2026-17\nfor the services of last month."
    result = interpret(text, DEFAULT_RULES, threshold=0.6)
    assert (result.document_type, result.confidence, result.needs_review) == ("invoice", 1.0, False)


def test_an_ambiguous_text_gets_the_score_share() -> None:
    text = "Dear Sir,\nplease find the agreement and the contract enclosed.\nSincerely"
    scores = score_types(text, DEFAULT_RULES)
    assert (scores["letter"], scores["contract"]) == (4.0, 4.0)
    result = interpret(text, DEFAULT_RULES, threshold=0.6)
    assert result.document_type == "contract"  # a tie goes to the type defined first
    assert result.confidence == 0.5
    assert result.needs_review
    assert "contract (score 4) also resembles letter (score 4)" in result.reasons


def test_the_threshold_decides_review() -> None:
    assert interpret(LETTER, DEFAULT_RULES, threshold=0.6).needs_review is False
    strict = interpret(LETTER, DEFAULT_RULES, threshold=1.0)
    assert strict.confidence == 1.0
    assert strict.needs_review is False  # 1.0 is not below 1.0
    lenient = interpret(INVOICE, DEFAULT_RULES, threshold=0.0)
    strict = interpret(INVOICE, DEFAULT_RULES, threshold=0.99)
    assert lenient.confidence == strict.confidence == 0.941  # 8 / (8 + 0.5 for "qty")
    assert lenient.needs_review is False
    assert strict.needs_review
    assert strict.reasons == (
        "confidence 0.941 is below the review threshold 0.990",
        "invoice (score 8) also resembles receipt (score 0.5)",
    )


def test_an_invalid_iban_checksum_needs_review_despite_high_confidence() -> None:
    text = INVOICE.replace("DE89 3704", "DE88 3704")
    result = interpret(text, DEFAULT_RULES, threshold=0.6)
    assert result.document_type == "invoice"
    assert result.confidence >= 0.6
    assert result.fields["iban"] == []
    assert result.needs_review
    assert result.reasons == ("IBAN DE88370400440532013000 fails its checksum",)


def test_a_keyword_counts_once_however_often_it_occurs() -> None:
    once = score_types("receipt", DEFAULT_RULES)["receipt"]
    assert score_types("receipt receipt RECEIPT receipt", DEFAULT_RULES)["receipt"] == once


def test_keywords_match_whole_words_case_insensitively_across_line_breaks() -> None:
    rules = RuleSet(
        rules=(
            Rule(
                document_type="purchase_order",
                keywords=(Keyword(phrase="purchase order", weight=3.0),),
            ),
        )
    )
    assert score_types("PURCHASE\n  Order", rules)["purchase_order"] == 3.0
    assert score_types("purchase orders", rules)["purchase_order"] == 0.0


def test_interpretation_is_deterministic() -> None:
    first = interpret(CONTRACT, DEFAULT_RULES, threshold=0.6)
    assert all(interpret(CONTRACT, DEFAULT_RULES, threshold=0.6) == first for _ in range(3))


def test_threshold_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold"):
        interpret(INVOICE, DEFAULT_RULES, threshold=1.5)


SAMPLES = Path(__file__).resolve().parents[3] / "services" / "samples"
SAMPLE_FILES = [
    ("invoice.pdf", "application/pdf", "invoice"),
    ("receipt.txt", "text/plain", "receipt"),
    ("letter.html", "text/html", "letter"),
    (
        "contract.docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "contract",
    ),
]


@pytest.mark.parametrize(("name", "content_type", "expected"), SAMPLE_FILES)
def test_sample_documents_are_classified_without_review(
    name: str, content_type: str, expected: str
) -> None:
    extract = pytest.importorskip("services.extractor.extract")
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"sample {name} not generated")
    text = extract.extract_text(path.read_bytes(), content_type=content_type, file_name=name)
    result = interpret(text, DEFAULT_RULES, threshold=0.6)
    assert (result.document_type, result.needs_review) == (expected, False), result.reasons
