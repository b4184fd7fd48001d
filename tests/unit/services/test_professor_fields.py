"""The professor's field extractors: dates, amounts in both decimal conventions, totals, invoice
numbers, IBANs (checksum and length) and VAT id formats."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.professor.fields import (
    IBAN_LENGTHS,
    Amount,
    extract_amounts,
    extract_dates,
    extract_invoice_number,
    extract_vat_ids,
    find_ibans,
    find_total,
    iban_checksum_ok,
    is_valid_iban,
    parse_number,
)


# -- dates ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Invoice date: 2026-03-14", date(2026, 3, 14)),
        ("Datum: 14.03.2026", date(2026, 3, 14)),
        ("issued 14/03/2026", date(2026, 3, 14)),
        ("London, March 14, 2026", date(2026, 3, 14)),
        ("London, Mar. 14 2026", date(2026, 3, 14)),
        ("14 March 2026", date(2026, 3, 14)),
        ("14th March, 2026", date(2026, 3, 14)),
        ("Berlin, den 14. März 2026", date(2026, 3, 14)),
        ("1.4.2026", date(2026, 4, 1)),
        ("leap day 29.02.2028", date(2028, 2, 29)),
    ],
)
def test_dates_in_every_supported_notation(text: str, expected: date) -> None:
    assert extract_dates(text) == (expected,)


@pytest.mark.parametrize(
    "text",
    [
        "31.02.2026",
        "2026-13-01",
        "2026-02-30",
        "29.02.2027",
        "32 March 2026",
        "03/14/2026",  # read day first: month 14 does not exist
        "February 30, 2026",
        "version 1.2.3, 12026-03-14",
    ],
)
def test_impossible_or_malformed_dates_are_rejected(text: str) -> None:
    assert extract_dates(text) == ()


def test_dates_come_in_order_of_appearance_without_duplicates() -> None:
    text = "Due 2026-04-13. Issued 14.03.2026, i.e. March 14, 2026; due again 13/04/2026."
    assert extract_dates(text) == (date(2026, 4, 13), date(2026, 3, 14))


# -- amounts --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value", "currency"),
    [
        ("EUR 1,234.56", "1234.56", "EUR"),
        ("1.234,56 EUR", "1234.56", "EUR"),
        ("€1,234.56", "1234.56", "EUR"),
        ("1.234,56 €", "1234.56", "EUR"),
        ("$ 99.00", "99.00", "USD"),
        ("USD 12,000.00", "12000.00", "USD"),
        ("23.40 EUR", "23.40", "EUR"),
        ("23,40 EUR", "23.40", "EUR"),
        ("GBP 1,000,000.5", "1000000.5", "GBP"),
        ("CHF 1'234.50", "1234.50", "CHF"),
        ("£7", "7", "GBP"),
        ("EUR 1.234", "1234", "EUR"),
        ("1234.56 EUR", "1234.56", "EUR"),
        ("12.345.678,90 EUR", "12345678.90", "EUR"),
    ],
)
def test_amounts_in_both_decimal_conventions(text: str, value: str, currency: str) -> None:
    assert extract_amounts(f"Amount: {text}.") == (Amount(value=Decimal(value), currency=currency),)


@pytest.mark.parametrize("raw", ["1.234.56", "1,234.567,89", "1.234,567.89"])
def test_inconsistent_separators_are_no_number(raw: str) -> None:
    assert parse_number(raw) is None


@pytest.mark.parametrize(
    "text",
    [
        "Qty 23.40",  # no currency
        "EUR 19%",  # a rate, not an amount
        "EUR 2026-03-14",  # a date
        "SEUR 100",  # not a currency code on its own
        "IBAN DE89 3704 0044 0532 0130 00",
    ],
)
def test_numbers_without_currency_are_no_amounts(text: str) -> None:
    assert extract_amounts(text) == ()


def test_currency_between_quantity_and_price_belongs_to_the_price() -> None:
    line = "Office chair 2 EUR 289.00 19% EUR 578.00"
    assert [a.value for a in extract_amounts(line)] == [Decimal("289.00"), Decimal("578.00")]


def test_total_is_the_largest_amount_on_a_total_line() -> None:
    text = (
        "Net EUR 1,037.45\n"
        "Subtotal EUR 1,037.45\n"
        "Total VAT EUR 197.11\n"
        "Total EUR 1,234.56\n"
        "Thank you. Voucher worth EUR 5,000.00 for your next order.\n"
    )
    assert find_total(text) == Amount(value=Decimal("1234.56"), currency="EUR")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("TOTAL 23.40 EUR\nincl. VAT 7%: 1.53 EUR", "23.40"),
        ("Amount due: $ 99.00", "99.00"),
        ("Gesamtbetrag: 1.234,56 EUR\nMwSt 197,11 EUR", "1234.56"),
        ("Balance due\n\nEUR 80.00", "80.00"),  # table layout: the value below its label
    ],
)
def test_total_labels(text: str, value: str) -> None:
    total = find_total(text)
    assert total is not None
    assert total.value == Decimal(value)


def test_no_total_without_a_total_line() -> None:
    assert find_total("Subtotal EUR 10.00\nShipping EUR 5.00") is None


# -- invoice number -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Invoice No. 12345", "12345"),
        ("Invoice no: A-77/2026", "A-77/2026"),
        ("Invoice number: INV-2026-0042", "INV-2026-0042"),
        ("INVOICE NUMBER 2026-0042.", "2026-0042"),
        ("Invoice #: 9981", "9981"),
        ("Invoice #9981", "9981"),
        ("Rechnungsnummer: RE-2026-17", "RE-2026-17"),
        ("Reference: INV-2026-0042", "INV-2026-0042"),
        ("Invoice notes: see below\nINV-7", "INV-7"),
    ],
)
def test_invoice_numbers(text: str, expected: str) -> None:
    assert extract_invoice_number(text) == expected


@pytest.mark.parametrize(
    "text", ["Invoice date: 2026-03-14", "Invoice number: pending", "INVOICE", "INV-ABC"]
)
def test_no_invoice_number(text: str) -> None:
    assert extract_invoice_number(text) is None


# -- IBAN -----------------------------------------------------------------------------------------
VALID_IBANS = [
    "DE89370400440532013000",
    "AT611904300234573201",
    "CH9300762011623852957",
    "FR1420041010050500013M02606",
    "GB82WEST12345698765432",
    "NL91ABNA0417164300",
    "BE68539007547034",
    "IT60X0542811101000000123456",
    "ES9121000418450200051332",
    "LU280019400644750000",
]


@pytest.mark.parametrize("iban", VALID_IBANS)
def test_valid_ibans_are_found_compact_and_grouped(iban: str) -> None:
    grouped = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    assert is_valid_iban(iban)
    assert is_valid_iban(grouped)
    for text in (f"IBAN: {iban}", f"IBAN: {grouped} BIC ABCDEFGHXXX", f"IBAN {grouped}."):
        scan = find_ibans(text)
        assert scan.valid == (iban,)
        assert scan.invalid_checksum == ()


def test_an_iban_with_a_wrong_checksum_is_reported_as_invalid() -> None:
    scan = find_ibans("IBAN: DE88 3704 0044 0532 0130 00")
    assert scan.valid == ()
    assert scan.invalid_checksum == ("DE88370400440532013000",)
    assert not is_valid_iban("DE88370400440532013000")


@pytest.mark.parametrize(
    "iban",
    [
        "DE8937040044053201300",  # one character short for DE
        "DE893704004405320130000",  # one too many
        "NL91ABNA04171643001",
        "XX89370400440532013000",  # no such country
    ],
)
def test_wrong_length_or_unknown_country_is_not_an_iban(iban: str) -> None:
    assert not is_valid_iban(iban)
    assert find_ibans(f"IBAN {iban} BIC") == find_ibans("")


def test_check_digits_99_are_refused_even_when_mod_97_agrees() -> None:
    iban = next(
        candidate
        for n in range(1000)
        if (candidate := _with_check_digits("DE", f"{n:018d}"))[2:4] == "02"
    )
    alias = iban[:2] + "99" + iban[4:]  # 99 is congruent to 02 mod 97
    assert is_valid_iban(iban)
    assert iban_checksum_ok(alias)
    assert not is_valid_iban(alias)
    assert find_ibans(f"IBAN {alias}").invalid_checksum == (alias,)


def test_a_vat_id_and_other_uppercase_tokens_are_no_iban() -> None:
    text = "VAT ID DE123456789 IBAN DE89 3704 0044 0532 0130 00 BIC COBADEFFXXX"
    assert find_ibans(text).valid == ("DE89370400440532013000",)
    assert find_ibans(text).invalid_checksum == ()


def _with_check_digits(country: str, bban: str) -> str:
    numeric = int("".join(str(int(c, 36)) for c in bban + country + "00"))
    return f"{country}{98 - numeric % 97:02d}{bban}"


_BBAN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@st.composite
def ibans(draw: st.DrawFn) -> str:
    country = draw(st.sampled_from(sorted(IBAN_LENGTHS)))
    size = IBAN_LENGTHS[country] - 4
    bban = draw(st.text(alphabet=_BBAN_CHARS, min_size=size, max_size=size))
    return _with_check_digits(country, bban)


@given(iban=ibans(), data=st.data())
def test_any_iban_with_a_correct_checksum_is_accepted_and_one_changed_digit_is_not(
    iban: str, data: st.DataObject
) -> None:
    assert is_valid_iban(iban)
    grouped = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    assert iban in find_ibans(f"Please pay to IBAN {grouped} today").valid
    digits = [i for i, char in enumerate(iban) if char.isdigit()]  # the check digits at least
    position = data.draw(st.sampled_from(digits))
    replacement = data.draw(st.sampled_from([d for d in "0123456789" if d != iban[position]]))
    changed = iban[:position] + replacement + iban[position + 1 :]
    assert not is_valid_iban(changed)
    assert changed not in find_ibans(f"IBAN {changed}").valid


# -- VAT ids --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "vat",
    [
        "DE123456789",
        "ATU12345678",
        "FR12345678901",
        "FRXA123456789",
        "NL123456789B01",
        "GB123456789",
        "GB123456789012",
        "GBGD123",
        "IT12345678901",
        "ESX1234567L",
        "ESA12345678",
        "ES12345678Z",
        "BE0123456789",
        "LU12345678",
    ],
)
def test_valid_vat_formats(vat: str) -> None:
    found = extract_vat_ids(f"VAT ID: {vat}, thank you")
    assert [v.value for v in found] == [vat]
    assert found[0].country == vat[:2]


def test_vat_id_with_a_space_after_the_prefix_is_normalised() -> None:
    assert [v.value for v in extract_vat_ids("USt-IdNr.: DE 123456789")] == ["DE123456789"]


@pytest.mark.parametrize(
    "vat",
    [
        "DE12345678",  # 8 digits
        "DE1234567890",  # 10 digits
        "AT12345678",  # U missing
        "ATU1234567",
        "NL123456789C01",
        "NL12345678B01",
        "FRI1123456789",  # I is not a French key letter
        "IT1234567890",
        "ES123456789",  # Spanish NIF needs a letter first or last
        "BE2123456789",  # Belgian numbers start with 0 or 1
        "GB12345678",
        "XX123456789",
        "DE123456789X",
    ],
)
def test_malformed_vat_ids_are_rejected(vat: str) -> None:
    assert extract_vat_ids(f"VAT ID: {vat}") == ()


def test_no_vat_id_inside_an_iban() -> None:
    text = "IBAN DE89370400440532013000 / AT611904300234573201 / DE89 3704 0044 0532 0130 00"
    assert extract_vat_ids(text) == ()
