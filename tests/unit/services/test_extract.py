"""extract_text on the shipped samples and on edge cases: types, fallbacks, encodings, limits."""

from __future__ import annotations

import io
import zipfile

import pytest

from services.extractor.extract import (
    DOCX,
    MAX_INPUT_BYTES,
    ExtractionError,
    extract_text,
)
from services.samples.make_samples import build_pdf
from tests.unit.services.processor_support import SAMPLES


def sample_text(name: str, content_type: str) -> str:
    return extract_text((SAMPLES / name).read_bytes(), content_type=content_type, file_name=name)


def test_invoice_pdf_yields_number_dates_iban_and_totals_on_their_own_lines() -> None:
    text = sample_text("invoice.pdf", "application/pdf")
    lines = text.split("\n")
    assert lines[0] == "INVOICE"
    for line in (
        "Acme Supplies GmbH",
        "VAT ID: DE123456789",
        "Invoice number: INV-2026-0042",
        "Invoice date: 2026-03-14",
        "Due date: 2026-04-13",
        "Office chair, ergonomic 2 EUR 289.00 19% EUR 578.00",
        "Subtotal: EUR 1,039.40",
        "Total: EUR 1,234.56",
        "Gesamtbetrag / Total: 1.234,56 EUR",
        "IBAN: DE89 3704 0044 0532 0130 00",
        "BIC: COBADEFFXXX",
    ):
        assert line in lines


def test_receipt_text_keeps_utf8_and_layout() -> None:
    text = sample_text("receipt.txt", "text/plain")
    assert text.startswith("CORNER MARKET BERLIN\n")
    assert "Müsli 500g" in text
    assert "\nTOTAL 23.40 EUR\n" in text
    assert "Date: 2026-03-14" in text
    assert "Card payment 23.40 EUR approved" in text
    assert text.endswith("Thank you for your purchase!")


def test_letter_html_yields_visible_text_only_one_block_per_line() -> None:
    text = sample_text("letter.html", "text/html; charset=utf-8")
    lines = text.split("\n")
    assert "Dear Ms. Example," in lines
    assert "Sincerely," in lines
    assert "Munich, 2026-03-14" in lines
    assert "Smith & Partners Consulting" in lines  # &amp; unescaped
    assert "Hauptstrasse 5, 80331 München" in lines  # <br> breaks, &uuml; decoded
    assert "under the existing terms." in text  # source line breaks and runs of spaces collapsed
    for hidden in ("MUST-NOT-APPEAR", "console.log", "font-family", "Letter head title"):
        assert hidden not in text


def test_contract_docx_yields_paragraphs_and_table_rows_in_document_order() -> None:
    text = sample_text("contract.docx", DOCX)
    lines = text.split("\n")
    assert lines[0] == "SERVICE AGREEMENT"
    assert "Effective date: 2026-04-01" in lines
    assert "(the 'Provider') and Example Trading Ltd" in text
    assert "(the 'Client')" in text
    assert "EUR 12,000.00 per year" in text
    for heading in ("2. Term", "4. Termination", "5. Governing law", "Signature"):
        assert heading in lines
    row = "Printer maintenance\tQuarterly\tEUR 6,000.00 per year"
    assert lines.index("1. Services") < lines.index(row) < lines.index("2. Term")
    assert "Berlin, 2026-03-01\tLondon, 2026-03-01" in lines


def test_image_is_unsupported_and_the_reason_names_its_type() -> None:
    with pytest.raises(ExtractionError) as caught:
        sample_text("photo.png", "image/png")
    assert "image/png" in caught.value.reason
    assert caught.value.reason == str(caught.value)


def test_corrupt_pdf_is_an_extraction_error_naming_the_parser_failure() -> None:
    with pytest.raises(ExtractionError) as caught:
        sample_text("corrupt.pdf", "application/pdf")
    assert caught.value.reason.startswith("cannot read PDF: ")


def test_pdf_without_text_is_an_extraction_error() -> None:
    blank = build_pdf((), title="blank")
    with pytest.raises(ExtractionError, match="no text found in application/pdf"):
        extract_text(blank, content_type="application/pdf", file_name="scan.pdf")


def test_extraction_error_is_not_a_toolkit_failure() -> None:
    from boost_tenancy import PermanentError, TransientError

    assert not issubclass(ExtractionError, PermanentError | TransientError)


@pytest.mark.parametrize(
    ("content_type", "file_name", "expected"),
    [
        ("application/octet-stream", "invoice.pdf", "INV-2026-0042"),
        ("", "Contract.DOCX", "SERVICE AGREEMENT"),
        ("binary/octet-stream", "letter.htm", "Dear Ms. Example,"),
        ("text/csv", "items.csv", "TOTAL 23.40 EUR"),
    ],
)
def test_generic_or_textual_content_type_falls_back_sensibly(
    content_type: str, file_name: str, expected: str
) -> None:
    source = {".pdf": "invoice.pdf", ".docx": "contract.docx", ".htm": "letter.html"}
    suffix = "." + file_name.rsplit(".", 1)[1].lower()
    data = (SAMPLES / source.get(suffix, "receipt.txt")).read_bytes()
    assert expected in extract_text(data, content_type=content_type, file_name=file_name)


def test_a_specific_unsupported_type_wins_over_the_file_name() -> None:
    data = (SAMPLES / "invoice.pdf").read_bytes()
    with pytest.raises(ExtractionError, match="application/msword"):
        extract_text(data, content_type="application/msword", file_name="invoice.pdf")


def test_unknown_extension_with_generic_type_is_unsupported() -> None:
    with pytest.raises(ExtractionError, match=r"application/octet-stream \(blob\.bin\)"):
        extract_text(b"abc", content_type="application/octet-stream", file_name="blob.bin")


def test_latin1_text_is_decoded_and_newlines_normalised() -> None:
    data = "Café crème\r\nTotal 3,50 EUR\rEnd  \r\n".encode("latin-1")
    text = extract_text(data, content_type="text/plain", file_name="note.txt")
    assert text == "Café crème\nTotal 3,50 EUR\nEnd"


def test_declared_charset_is_honoured() -> None:
    data = "Total 3,50 €".encode("cp1252")
    text = extract_text(data, content_type="text/plain; charset=windows-1252", file_name="n.txt")
    assert text == "Total 3,50 €"


def test_utf8_bom_is_dropped() -> None:
    data = "\ufeffHello".encode()
    assert extract_text(data, content_type="text/plain", file_name="n.txt") == "Hello"


def test_whitespace_only_text_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="no text found"):
        extract_text(b" \r\n\t\n", content_type="text/plain", file_name="blank.txt")


def test_empty_document_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="empty"):
        extract_text(b"", content_type="application/pdf", file_name="empty.pdf")


def test_oversize_input_is_refused_before_parsing() -> None:
    data = b"a" * (MAX_INPUT_BYTES + 1)
    with pytest.raises(ExtractionError, match="over the 20 MB limit"):
        extract_text(data, content_type="text/plain", file_name="big.txt")


def test_html_edge_cases() -> None:
    page = (
        b"<html><head><title>T</title><meta charset='iso-8859-1'>"
        b"<body><h1>Title &amp;lt;kept&amp;gt;</h1><table><tr><td>a</td><td>b</td></tr></table>"
        b"<p>caf\xe9</p><style>p{}</style><p>end</p>"
    )
    text = extract_text(page, content_type="text/html", file_name="page.html")
    assert text.split("\n") == ["Title &lt;kept&gt;", "a\tb", "café", "end"]


def test_html_missing_head_end_tag_does_not_hide_the_body() -> None:
    page = b"<html><head><title>T</title><body><p>visible</p></body></html>"
    assert extract_text(page, content_type="text/html", file_name="p.html") == "visible"


def test_docx_that_is_not_a_zip_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="not a valid zip"):
        extract_text(b"PK\x03\x04 broken", content_type=DOCX, file_name="x.docx")


def test_docx_decompression_bomb_is_refused_before_opening() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (10 * 1024 * 1024))
    with pytest.raises(ExtractionError, match="decompression bomb"):
        extract_text(buffer.getvalue(), content_type=DOCX, file_name="bomb.docx")


def test_zip_that_is_not_a_docx_is_an_extraction_error() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(ExtractionError, match="cannot read DOCX"):
        extract_text(buffer.getvalue(), content_type=DOCX, file_name="x.docx")
