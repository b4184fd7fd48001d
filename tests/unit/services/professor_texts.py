"""Realistic document texts shared by the professor tests, resembling the pipeline's samples.

Each is what text extraction yields for a typical document of its type.
"""

from __future__ import annotations

from typing import Any

INVOICE = """ACME Supplies GmbH
Industriestrasse 12, 10115 Berlin
VAT ID: DE123456789

INVOICE
Invoice number: INV-2026-0042
Invoice date: 2026-03-14
Due date: 2026-04-13

Bill to: Example Trading Ltd, 1 Market Street, London

Description            Qty   Unit price    Amount
Office chair           2     EUR 289.00    EUR 578.00
Toner cartridge        1     EUR 227.50    EUR 227.50
Subtotal: EUR 1,039.40
VAT 19%: EUR 195.16
Total: EUR 1,234.56

Please pay by bank transfer to IBAN DE89 3704 0044 0532 0130 00, BIC COBADEFFXXX.
"""

RECEIPT = """CORNER MARKET BERLIN
Date: 2026-03-14  Time: 10:32
Receipt no.: 0017-20260314
Whole milk 1L        2 x 1.15     2.30
Coffee beans 250g                 6.99
TOTAL 23.40 EUR
Card payment 23.40 EUR approved
Thank you for your purchase!
"""

LETTER = """Smith & Partners Consulting
Hauptstrasse 5, 80331 Munich

Munich, 2026-03-14

Dear Ms. Example,

thank you for the pleasant meeting last week. We are happy to continue our cooperation
for another year. Please find the updated schedule attached.

Sincerely,
John Smith
"""

CONTRACT = """SERVICE AGREEMENT
Effective date: 2026-04-01
This Agreement is entered into between Acme Supplies GmbH (the "Provider") and Example
Trading Ltd (the "Client").
1. Services. The Provider shall maintain the Client's printers.
2. Term. This Agreement runs for an initial term of 24 months.
3. Fees. The Client shall pay a fee of EUR 12,000.00 per year.
4. Termination. Either party may terminate this Agreement with three months' notice.
5. Governing law. This Agreement is governed by the laws of Germany.
"""

UNRELATED = """The quick brown fox jumps over the lazy dog.
Tomorrow will be sunny with light winds from the west and highs around 18 degrees.
"""

PURCHASE_ORDER_RULES: dict[str, Any] = {
    "rules": [
        {
            "documentType": "purchase_order",
            "keywords": {"purchase order": 3.0, "po number": 2.0, "ship to": 1.0},
            "weight": 1.0,
        }
    ]
}
PURCHASE_ORDER_TEXT = """PURCHASE ORDER
PO Number: PO-4711
Date: 2026-03-14
Ship to: Acme Warehouse, Dock 3, Berlin
Please deliver 40 office chairs as quoted (EUR 289.00 each).
"""
