"""Regenerates the pipeline's sample documents in this folder, byte for byte the same every run.

Run `python services/samples/make_samples.py` after changing one; README.md says what each yields.
"""

from __future__ import annotations

import hashlib
import io
import sys
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from docx import Document
from docx.shared import Pt
from PIL import Image, ImageDraw

SAMPLES_DIR = Path(__file__).resolve().parent

# -- invoice.pdf ----------------------------------------------------------------------------------
# (font, size, x, y, text); F1 is Helvetica, F2 Helvetica-Bold, both standard PDF fonts, so the
# file needs no embedded font and stays a few kilobytes.
_Line = tuple[str, int, int, int, str]

_INVOICE_LINES: tuple[_Line, ...] = (
    ("F2", 24, 50, 780, "INVOICE"),
    ("F2", 12, 50, 750, "Acme Supplies GmbH"),
    ("F1", 10, 50, 736, "Industriestrasse 12, 10115 Berlin, Germany"),
    ("F1", 10, 50, 722, "VAT ID: DE123456789"),
    ("F1", 10, 360, 750, "Invoice number: INV-2026-0042"),
    ("F1", 10, 360, 736, "Invoice date: 2026-03-14"),
    ("F1", 10, 360, 722, "Due date: 2026-04-13"),
    ("F2", 10, 50, 690, "Bill to:"),
    ("F1", 10, 50, 676, "Example Trading Ltd"),
    ("F1", 10, 50, 662, "1 Market Street, London EC1A 1AA, United Kingdom"),
    ("F2", 10, 50, 630, "Description"),
    ("F2", 10, 300, 630, "Qty"),
    ("F2", 10, 340, 630, "Unit price"),
    ("F2", 10, 420, 630, "VAT"),
    ("F2", 10, 470, 630, "Amount"),
    ("F1", 10, 50, 610, "Office chair, ergonomic"),
    ("F1", 10, 300, 610, "2"),
    ("F1", 10, 340, 610, "EUR 289.00"),
    ("F1", 10, 420, 610, "19%"),
    ("F1", 10, 470, 610, "EUR 578.00"),
    ("F1", 10, 50, 595, "LED desk lamp"),
    ("F1", 10, 300, 595, "4"),
    ("F1", 10, 340, 595, "EUR 39.90"),
    ("F1", 10, 420, 595, "19%"),
    ("F1", 10, 470, 595, "EUR 159.60"),
    ("F1", 10, 50, 580, "Printer paper A4, 500 sheets"),
    ("F1", 10, 300, 580, "10"),
    ("F1", 10, 340, 580, "EUR 5.49"),
    ("F1", 10, 420, 580, "19%"),
    ("F1", 10, 470, 580, "EUR 54.90"),
    ("F1", 10, 50, 565, "Toner cartridge, black"),
    ("F1", 10, 300, 565, "1"),
    ("F1", 10, 340, 565, "EUR 227.50"),
    ("F1", 10, 420, 565, "19%"),
    ("F1", 10, 470, 565, "EUR 227.50"),
    ("F1", 10, 50, 550, "Office organisation handbook"),
    ("F1", 10, 300, 550, "1"),
    ("F1", 10, 340, 550, "EUR 19.40"),
    ("F1", 10, 420, 550, "7%"),
    ("F1", 10, 470, 550, "EUR 19.40"),
    ("F1", 10, 340, 520, "Subtotal: EUR 1,039.40"),
    ("F1", 10, 340, 505, "VAT 19% on EUR 1,020.00: EUR 193.80"),
    ("F1", 10, 340, 490, "VAT 7% on EUR 19.40: EUR 1.36"),
    ("F2", 12, 340, 470, "Total: EUR 1,234.56"),
    ("F1", 10, 340, 455, "Gesamtbetrag / Total: 1.234,56 EUR"),
    ("F1", 10, 50, 430, "Payable by 2026-04-13 without deduction."),
    ("F1", 10, 50, 416, "Bank transfer to Acme Supplies GmbH"),
    ("F1", 10, 50, 402, "IBAN: DE89 3704 0044 0532 0130 00"),
    ("F1", 10, 50, 388, "BIC: COBADEFFXXX"),
    ("F1", 10, 50, 374, "Reference: INV-2026-0042"),
    (
        "F1",
        8,
        50,
        80,
        "Acme Supplies GmbH, Managing director: Jane Doe, Commercial register: HRB 123456 B",
    ),
)


def _pdf_string(text: str) -> bytes:
    """A PDF literal string; the standard fonts use WinAnsiEncoding, so the text is cp1252."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("cp1252") + b")"


def _content_stream(lines: Sequence[_Line]) -> bytes:
    ops: list[bytes] = []
    # Rules above and below the item table and above the total.
    for y in (643, 625, 540, 485):
        ops.append(f"0.5 w 50 {y} m 545 {y} l S".encode())
    for font, size, x, y, text in lines:
        ops.append(
            f"BT /{font} {size} Tf 1 0 0 1 {x} {y} Tm ".encode() + _pdf_string(text) + b" Tj ET"
        )
    return b"\n".join(ops) + b"\n"


def build_pdf(lines: Sequence[_Line], *, title: str) -> bytes:
    """A one-page A4 PDF 1.4 with the given text lines, its xref offsets computed exactly."""
    content = _content_stream(lines)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
        b"/Resources << /Font << /F1 4 0 R /F2 5 0 R >> >> /Contents 6 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
        b"<< /Length " + str(len(content)).encode() + b" >>\nstream\n" + content + b"endstream",
        b"<< /Title " + _pdf_string(title) + b" /Producer (make_samples.py) >>",
    ]
    # The binary comment line marks the file as binary for transfer tools, as the spec advises.
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref_at = len(out)
    out += f"xref\n0 {len(objects) + 1}\n".encode()
    # Each entry is exactly 20 bytes: 10-digit offset, 5-digit generation, type, space + LF.
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {len(objects)} 0 R >>\n"
        f"startxref\n{xref_at}\n%%EOF\n"
    ).encode()
    return bytes(out)


# -- receipt.txt ----------------------------------------------------------------------------------
RECEIPT = """\
CORNER MARKET BERLIN
Friedrichstrasse 100, 10117 Berlin
VAT ID: DE987654321

Date: 2026-03-14  Time: 10:32
Receipt no.: 0017-20260314
--------------------------------------
Whole milk 1L        2 x 1.15     2.30
Müsli 500g                        3.49
Coffee beans 250g                 6.99
Apples 1kg                        2.79
Sourdough bread                   4.20
Butter 250g                       2.45
Orange juice 1L                   1.18
--------------------------------------
TOTAL 23.40 EUR
incl. VAT 7%: 1.53 EUR

Payment: card (VISA **** 4242)
Card payment 23.40 EUR approved

Thank you for your purchase!
"""

# -- letter.html ----------------------------------------------------------------------------------
LETTER = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Letter head title that is not part of the letter</title>
<style>
  body { font-family: Georgia, serif; }
  .hidden-style-marker::after { content: "STYLE-CONTENT-MUST-NOT-APPEAR"; }
</style>
<script>
  var marker = "SCRIPT-CONTENT-MUST-NOT-APPEAR";
  if (1 < 2 && marker) { console.log(marker); }
</script>
</head>
<body>
<div class="sender">Smith &amp; Partners Consulting<br>Hauptstrasse 5, 80331 M&uuml;nchen</div>
<div class="recipient">Ms. Erika Example<br>Example Trading Ltd<br>1 Market Street, London</div>
<p class="date">Munich, 2026-03-14</p>
<p><strong>Subject: Renewal of our consulting agreement</strong></p>
<p>Dear Ms. Example,</p>
<p>thank you for the pleasant meeting last week. As discussed, we are happy to
   continue our cooperation for another year under the   existing terms.</p>
<p>Please find the updated schedule attached. We would appreciate your reply
   by 2026-04-01 &ndash; a short e-mail is sufficient.</p>
<script>document.write("SCRIPT-CONTENT-MUST-NOT-APPEAR");</script>
<p>Sincerely,</p>
<p>John Smith<br>Managing Partner</p>
</body>
</html>
"""


# -- contract.docx --------------------------------------------------------------------------------
_FIXED_TIME = datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC)


def build_contract() -> bytes:
    """The service agreement as DOCX, with fixed metadata and zip timestamps."""
    doc = Document()
    style = doc.styles["Normal"]
    style.font.size = Pt(11)
    doc.add_heading("SERVICE AGREEMENT", level=0)
    doc.add_paragraph("Agreement no.: SA-2026-007")
    doc.add_paragraph("Effective date: 2026-04-01")
    doc.add_paragraph(
        "This Agreement is entered into on 2026-03-01 between Acme Supplies GmbH, "
        "Industriestrasse 12, 10115 Berlin, Germany (the 'Provider') and Example Trading Ltd, "
        "1 Market Street, London, United Kingdom (the 'Client')."
    )
    doc.add_heading("1. Services", level=1)
    doc.add_paragraph(
        "The Provider shall supply office equipment and consumables and maintain the Client's "
        "printers as described in the schedule below."
    )
    table = doc.add_table(rows=1, cols=3)
    table.style = "Table Grid"
    for cell, text in zip(table.rows[0].cells, ("Service", "Frequency", "Fee"), strict=True):
        cell.text = text
    for row in (
        ("Printer maintenance", "Quarterly", "EUR 6,000.00 per year"),
        ("Consumables delivery", "Monthly", "EUR 6,000.00 per year"),
    ):
        cells = table.add_row().cells
        for cell, text in zip(cells, row, strict=True):
            cell.text = text
    doc.add_heading("2. Term", level=1)
    doc.add_paragraph(
        "This Agreement starts on the effective date and runs for an initial term of 24 months. "
        "It renews for successive periods of 12 months unless terminated."
    )
    doc.add_heading("3. Fees and payment", level=1)
    doc.add_paragraph(
        "The Client shall pay a fee of EUR 12,000.00 per year, invoiced quarterly in advance and "
        "payable within 30 days of the invoice date."
    )
    doc.add_heading("4. Termination", level=1)
    doc.add_paragraph(
        "Either party may terminate this Agreement with three months' notice to the end of a term. "
        "Either party may terminate for cause with immediate effect."
    )
    doc.add_heading("5. Governing law", level=1)
    doc.add_paragraph(
        "This Agreement is governed by the laws of the Federal Republic of Germany. "
        "Place of jurisdiction is Berlin."
    )
    doc.add_heading("Signature", level=1)
    signatures = doc.add_table(rows=2, cols=2)
    signatures.rows[0].cells[0].text = "For the Provider: Jane Doe, Managing Director"
    signatures.rows[0].cells[1].text = "For the Client: Erika Example, Director"
    signatures.rows[1].cells[0].text = "Berlin, 2026-03-01"
    signatures.rows[1].cells[1].text = "London, 2026-03-01"

    props = doc.core_properties
    props.title = "Service Agreement SA-2026-007"
    props.author = "Acme Supplies GmbH"
    props.last_modified_by = "Acme Supplies GmbH"
    props.created = _FIXED_TIME.replace(tzinfo=None)
    props.modified = _FIXED_TIME.replace(tzinfo=None)
    props.revision = 1
    buffer = io.BytesIO()
    doc.save(buffer)
    return _normalised_zip(buffer.getvalue())


def _normalised_zip(data: bytes) -> bytes:
    """The same archive with fixed member timestamps: the zip writer stamps the current time."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2026, 3, 1, 9, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(fixed, source.read(info.filename))
    return out.getvalue()


# -- photo.png ------------------------------------------------------------------------------------
def build_photo() -> bytes:
    """A 640x480 landscape of flat shapes (flat colours keep the PNG small)."""
    image = Image.new("RGB", (640, 480), (135, 190, 235))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 330, 640, 480), fill=(90, 160, 80))
    draw.ellipse((480, 40, 580, 140), fill=(250, 215, 70))
    draw.polygon([(0, 330), (150, 150), (300, 330)], fill=(120, 120, 135))
    draw.polygon([(200, 330), (380, 110), (560, 330)], fill=(100, 100, 120))
    draw.polygon([(340, 160), (380, 110), (420, 160)], fill=(245, 245, 250))
    draw.rectangle((90, 280, 190, 380), fill=(200, 80, 60))
    draw.polygon([(80, 280), (140, 230), (200, 280)], fill=(120, 50, 40))
    draw.rectangle((125, 330, 155, 380), fill=(80, 50, 30))
    draw.rectangle((100, 295, 120, 315), fill=(230, 240, 250))
    draw.rectangle((160, 295, 180, 315), fill=(230, 240, 250))
    draw.ellipse((60, 60, 160, 100), fill=(250, 250, 250))
    draw.ellipse((110, 45, 210, 95), fill=(250, 250, 250))
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


# -- corrupt.pdf ----------------------------------------------------------------------------------
def build_corrupt_pdf() -> bytes:
    """A PDF header followed by bytes that parse as nothing: extraction must fail cleanly."""
    garbage = b"".join(hashlib.sha256(f"corrupt-sample-{n}".encode()).digest() for n in range(64))
    return b"%PDF-1.7\n" + garbage


def build_all() -> dict[str, bytes]:
    return {
        "invoice.pdf": build_pdf(_INVOICE_LINES, title="Invoice INV-2026-0042"),
        "receipt.txt": RECEIPT.encode("utf-8"),
        "letter.html": LETTER.encode("utf-8"),
        "contract.docx": build_contract(),
        "photo.png": build_photo(),
        "corrupt.pdf": build_corrupt_pdf(),
    }


def main(target: Path = SAMPLES_DIR) -> int:
    for name, data in build_all().items():
        (target / name).write_bytes(data)
        print(f"{name:<14} {len(data):>7,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else SAMPLES_DIR))
