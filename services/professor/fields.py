"""Pure field extractors: dates, amounts, invoice numbers, IBANs and VAT ids from plain text.

Each returns typed frozen values in order of appearance; nothing here does I/O or online lookups.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from types import MappingProxyType
from typing import Final, TypeVar

_T = TypeVar("_T")


# -- values ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Amount:
    """A sum of money: its exact value and the ISO 4217 code of its currency."""

    value: Decimal
    currency: str

    def to_json(self) -> dict[str, str]:
        """The wire form: the value as a decimal string, so no precision is lost to floats."""
        return {"value": format(self.value, "f"), "currency": self.currency}


@dataclass(frozen=True, slots=True, kw_only=True)
class IbanScan:
    """IBANs found in a text: valid ones, and well-formed ones whose checksum fails."""

    valid: tuple[str, ...] = ()
    invalid_checksum: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class VatId:
    """An EU VAT identification number in its compact form (country prefix, no spaces)."""

    country: str
    value: str


def _unique(items: Iterable[_T]) -> tuple[_T, ...]:
    return tuple(dict.fromkeys(items))


# -- dates ----------------------------------------------------------------------------------------
_MONTH_SPELLINGS: Final = (
    ("january", "jan", "januar", "jänner"),
    ("february", "feb", "februar"),
    ("march", "mar", "märz", "maerz"),
    ("april", "apr"),
    ("may", "mai"),
    ("june", "jun", "juni"),
    ("july", "jul", "juli"),
    ("august", "aug"),
    ("september", "sep", "sept"),
    ("october", "oct", "oktober", "okt"),
    ("november", "nov"),
    ("december", "dec", "dezember", "dez"),
)
_MONTHS: Final[Mapping[str, int]] = MappingProxyType(
    {name: number for number, names in enumerate(_MONTH_SPELLINGS, start=1) for name in names}
)
# Longest names first, so "march" wins over its prefix "mar".
_MONTH_NAMES: Final = "|".join(sorted(_MONTHS, key=len, reverse=True))

_DATE_RE: Final = re.compile(
    rf"""
    (?<![\d./-])(?P<iso_y>\d{{4}})-(?P<iso_m>\d{{2}})-(?P<iso_d>\d{{2}})(?![\d])
    | (?<![\d./])(?P<num_d>\d{{1,2}})(?P<sep>[./])(?P<num_m>\d{{1,2}})(?P=sep)(?P<num_y>\d{{4}})
      (?![\d])
    | (?<![\w])(?P<mdy_m>{_MONTH_NAMES})(?![\w])\.?\s+(?P<mdy_d>\d{{1,2}})(?:st|nd|rd|th)?,?
      \s+(?P<mdy_y>\d{{4}})(?![\d])
    | (?<![\d.])(?P<dmy_d>\d{{1,2}})(?:st|nd|rd|th|\.)?\s+(?P<dmy_m>{_MONTH_NAMES})(?![\w])\.?,?
      \s+(?P<dmy_y>\d{{4}})(?![\d])
    """,
    re.VERBOSE | re.IGNORECASE,
)


def _date_of(match: re.Match[str]) -> date | None:
    groups = match.groupdict()
    if groups["iso_y"] is not None:
        parts = (groups["iso_y"], groups["iso_m"], groups["iso_d"])
    elif groups["num_y"] is not None:
        # Day first: the European convention, and the only reading of 14/03/2026.
        parts = (groups["num_y"], groups["num_m"], groups["num_d"])
    elif groups["mdy_y"] is not None:
        parts = (groups["mdy_y"], str(_MONTHS[groups["mdy_m"].lower()]), groups["mdy_d"])
    else:
        parts = (groups["dmy_y"], str(_MONTHS[groups["dmy_m"].lower()]), groups["dmy_d"])
    year, month, day = (int(part) for part in parts)
    try:
        return date(year, month, day)
    except ValueError:
        return None  # 31.02.2026 and the like: a date-shaped string, not a date


def extract_dates(text: str) -> tuple[date, ...]:
    """Dates written as 2026-03-14, 14.03.2026, 14/03/2026, March 14, 2026 or 14 March 2026.

    Slashed dates are read day first; impossible dates are skipped; duplicates are dropped.
    """
    found = (_date_of(match) for match in _DATE_RE.finditer(text))
    return _unique([value for value in found if value is not None])


# -- amounts --------------------------------------------------------------------------------------
CURRENCY_CODES: Final = frozenset(
    {"EUR", "USD", "GBP", "CHF", "JPY", "SEK", "NOK", "DKK", "PLN", "CZK", "HUF", "CAD", "AUD"}
)
_SYMBOLS: Final[Mapping[str, str]] = MappingProxyType(
    {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY"}
)
_CURRENCY: Final = (
    rf"(?<![A-Za-z])(?:{'|'.join(sorted(CURRENCY_CODES))})(?![A-Za-z])|[{''.join(_SYMBOLS)}]"
)
# Grouped thousands (1,234.56 / 1.234,56 / 1'234.56 / 1 234,56 with no-break spaces) or plain
# digits with up to two decimals. A plain space is no separator: "2 100.00" is two numbers. A
# number running on into a date (2026-03-14), a fraction or a percentage is none of these.
_NUMBER: Final = (
    r"(?<![\d.,'\u2019])"
    r"(?:\d{1,3}(?:[.,'\u2019\u00a0\u202f]\d{3})+(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?)"
    r"(?!\d|[.,/-]\d|[ \u00a0]?%)"
)
_GAP: Final = r"[ \t\u00a0]{0,3}"
_CURRENCY_FIRST_RE: Final = re.compile(rf"(?P<currency>{_CURRENCY}){_GAP}(?P<number>{_NUMBER})")
_NUMBER_FIRST_RE: Final = re.compile(rf"(?P<number>{_NUMBER}){_GAP}(?P<currency>{_CURRENCY})")
_TOTAL_LINE_RE: Final = re.compile(
    r"\btotal\b|\bamount\s+due\b|\bbalance\s+due\b|gesamt|\bsumme\b|\bzu\s+zahlen\b",
    re.IGNORECASE,
)


def parse_number(raw: str) -> Decimal | None:
    """A grouped or plain number in either convention: the last separator followed by one or two
    digits is the decimal mark, every other separator groups thousands and must be one kind."""
    separators = [(index, char) for index, char in enumerate(raw) if not char.isdigit()]
    if not separators:
        return Decimal(raw)
    last_index, last = separators[-1]
    decimals = len(raw) - last_index - 1
    if last in ".," and decimals in (1, 2):
        grouping = {char for _, char in separators[:-1]}
        integer, fraction = raw[:last_index], raw[last_index + 1 :]
        if last in grouping:
            return None  # 1.234.56: no consistent reading
    else:
        grouping = {char for _, char in separators}
        integer, fraction = raw, ""
    if len(grouping) > 1:
        return None  # 1,234.567,890: mixed grouping
    digits = "".join(char for char in integer if char.isdigit())
    return Decimal(f"{digits}.{fraction}" if fraction else digits)


def _currency_of(token: str) -> str:
    return _SYMBOLS.get(token, token)


def extract_amounts(text: str) -> tuple[Amount, ...]:
    """Amounts with a currency code or symbol before or after them, in order of appearance.

    Where a currency sits between two numbers ("2 EUR 289.00", a quantity column before a price
    column), it belongs to the number after it.
    """
    matches = list(_CURRENCY_FIRST_RE.finditer(text))
    # These matches do not overlap each other, so their starts and ends are both ascending.
    starts = [match.start() for match in matches]
    ends = [match.end() for match in matches]

    def overlaps_taken(match: re.Match[str]) -> bool:
        before = bisect.bisect_left(starts, match.end())  # taken matches starting before its end
        return before > 0 and ends[before - 1] > match.start()

    matches.extend(m for m in _NUMBER_FIRST_RE.finditer(text) if not overlaps_taken(m))
    found: list[Amount] = []
    for match in sorted(matches, key=lambda m: m.start()):
        value = parse_number(match["number"])
        if value is not None:
            found.append(Amount(value=value, currency=_currency_of(match["currency"])))
    return tuple(found)


def is_total_line(line: str) -> bool:
    """Whether a line announces a total: total, amount/balance due, Gesamt..., Summe, zu zahlen."""
    return _TOTAL_LINE_RE.search(line) is not None


def find_total(text: str) -> Amount | None:
    """The document's total: the largest amount on a total line (or on the line after a total
    label that carries no amount itself, as table layouts put it).

    The largest, because a total line may also be the net sum or the tax, and the grand total is
    never below either; a tie goes to the later line.
    """
    lines = text.splitlines()
    candidates: list[Amount] = []
    for index, line in enumerate(lines):
        if not is_total_line(line):
            continue
        amounts = extract_amounts(line)
        if not amounts:
            following = next((later for later in lines[index + 1 :] if later.strip()), "")
            amounts = extract_amounts(following)
        candidates.extend(amounts)
    best: Amount | None = None
    for amount in candidates:
        if best is None or amount.value >= best.value:
            best = amount
    return best


# -- invoice number -------------------------------------------------------------------------------
_INVOICE_LABEL_RE: Final = re.compile(
    r"(?<![\w])(?:invoice|rechnung)[ \t]*(?:number|num(?![a-z])\.?|no(?![a-z])\.?|nr(?![a-z])\.?|#)"
    r"|(?<![\w])rechnungsnummer|(?<![\w])rechnungs-?nr\.?",
    re.IGNORECASE,
)
_INVOICE_VALUE_RE: Final = re.compile(r"[ \t]*[:#.]?[ \t]*(?P<value>[A-Za-z0-9](?:[\w/.-]*\w)?)")
_BARE_INVOICE_RE: Final = re.compile(r"(?<![A-Za-z0-9])INV-[A-Z0-9](?:[A-Z0-9/-]*[A-Z0-9])?")
_MAX_INVOICE_NUMBER: Final = 40


def extract_invoice_number(text: str) -> str | None:
    """The number after Invoice No / Invoice number / Invoice # (or Rechnungsnummer), else the
    first INV-... token. A candidate without a digit ("Invoice No: see below") is no number."""
    for label in _INVOICE_LABEL_RE.finditer(text):
        value = _INVOICE_VALUE_RE.match(text, label.end())
        if value is not None:
            number = value["value"]
            if any(c.isdigit() for c in number) and len(number) <= _MAX_INVOICE_NUMBER:
                return number
    for bare in _BARE_INVOICE_RE.finditer(text):
        if any(c.isdigit() for c in bare[0]) and len(bare[0]) <= _MAX_INVOICE_NUMBER:
            return bare[0]
    return None


# -- IBAN -----------------------------------------------------------------------------------------
IBAN_LENGTHS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "AD": 24, "AT": 20, "BE": 16, "BG": 22, "CH": 21, "CY": 28, "CZ": 24, "DE": 22,
        "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GI": 23, "GR": 27,
        "HR": 21, "HU": 28, "IE": 22, "IS": 26, "IT": 27, "LI": 21, "LT": 20, "LU": 20,
        "LV": 21, "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PL": 28, "PT": 25, "RO": 24,
        "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    }
)  # fmt: skip
"""ISO 13616 length per country (the SEPA countries); an IBAN of another country is not accepted,
since its length cannot be checked."""

_IBAN_SHAPE_RE: Final = re.compile(r"[A-Z]{2}\d{2}[A-Z0-9]+")
_IBAN_START_RE: Final = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}")
_IBAN_GROUP_GAPS: Final = frozenset(" \u00a0")


def _iban_char(char: str) -> bool:
    return char.isascii() and (char.isdigit() or char.isupper())


def iban_checksum_ok(iban: str) -> bool:
    """ISO 13616 mod-97 check of a compact IBAN (the rearranged number mod 97 must be 1)."""
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def normalise_iban(value: str) -> str:
    """The compact form: spaces removed, letters upper-cased."""
    return "".join(value.split()).upper()


def _well_formed(iban: str) -> bool:
    return _IBAN_SHAPE_RE.fullmatch(iban) is not None and IBAN_LENGTHS.get(iban[:2]) == len(iban)


def _check_digits_ok(iban: str) -> bool:
    # 00, 01 and 99 are never issued; 99 would otherwise pass mod 97 as an alias of 02.
    return iban[2:4] not in {"00", "01", "99"} and iban_checksum_ok(iban)


def is_valid_iban(value: str) -> bool:
    """Known country, that country's length, and correct ISO 13616 mod-97 check digits."""
    iban = normalise_iban(value)
    return _well_formed(iban) and _check_digits_ok(iban)


def _iban_candidate(text: str, start: int, length: int) -> str | None:
    """The compact IBAN of exactly length characters starting at start, read across single-space
    group gaps; None when the characters run on past that length (part of a longer token)."""
    chars: list[str] = []
    index = start
    while index < len(text):
        char = text[index]
        if _iban_char(char):
            chars.append(char)
            if len(chars) > length:
                return None
            index += 1
        elif (
            char in _IBAN_GROUP_GAPS
            and len(chars) < length
            and index + 1 < len(text)
            and _iban_char(text[index + 1])
        ):
            index += 1
        else:
            break
    return "".join(chars) if len(chars) == length else None


def find_ibans(text: str) -> IbanScan:
    """IBANs printed compact or in groups; valid ones and checksum failures, each normalised.

    A candidate must start a token, begin with a known country and its two check digits and run
    to exactly that country's length; a wrong-length string is not an IBAN, so it is not reported.
    """
    valid: list[str] = []
    invalid: list[str] = []
    for start in _IBAN_START_RE.finditer(text):
        length = IBAN_LENGTHS.get(start[0][:2])
        if length is None:
            continue
        candidate = _iban_candidate(text, start.start(), length)
        if candidate is None or not _well_formed(candidate):
            continue
        (valid if _check_digits_ok(candidate) else invalid).append(candidate)
    return IbanScan(valid=_unique(valid), invalid_checksum=_unique(invalid))


# -- VAT ids --------------------------------------------------------------------------------------
_VAT_BODIES: Final[Mapping[str, re.Pattern[str]]] = MappingProxyType(
    {
        "AT": re.compile(r"U\d{8}"),
        "BE": re.compile(r"[01]\d{9}"),
        "DE": re.compile(r"\d{9}"),
        "DK": re.compile(r"\d{8}"),
        "ES": re.compile(r"[A-Z0-9]\d{7}[A-Z0-9]"),
        "FR": re.compile(r"[0-9A-HJ-NP-Z]{2}\d{9}"),
        "GB": re.compile(r"\d{9}|\d{12}|GD[0-4]\d{2}|HA[5-9]\d{2}"),
        "IT": re.compile(r"\d{11}"),
        "LU": re.compile(r"\d{8}"),
        "NL": re.compile(r"\d{9}B\d{2}"),
        "PL": re.compile(r"\d{10}"),
    }
)
# A country prefix, an optional single space, then the compact body as one token.
_VAT_RE: Final = re.compile(
    rf"(?<![A-Za-z0-9])(?P<country>{'|'.join(_VAT_BODIES)}) ?(?P<body>[A-Z0-9]{{5,12}})"
    r"(?![A-Za-z0-9])"
)


def vat_format_ok(country: str, body: str) -> bool:
    """Whether body is a well-formed VAT number of country (format only, no register lookup)."""
    pattern = _VAT_BODIES.get(country)
    if pattern is None or pattern.fullmatch(body) is None:
        return False
    # A Spanish NIF has a letter first or last (or both), never two digits there.
    return not (country == "ES" and body[0].isdigit() and body[-1].isdigit())


def extract_vat_ids(text: str) -> tuple[VatId, ...]:
    """VAT ids of AT, BE, DE, DK, ES, FR, GB, IT, LU, NL and PL written compact (DE123456789) or
    with a space after the prefix (DE 123456789); format-validated, in order, without duplicates."""
    found = [
        VatId(country=match["country"], value=match["country"] + match["body"])
        for match in _VAT_RE.finditer(text)
        if vat_format_ok(match["country"], match["body"])
    ]
    return _unique(found)


__all__ = [
    "CURRENCY_CODES",
    "IBAN_LENGTHS",
    "Amount",
    "IbanScan",
    "VatId",
    "extract_amounts",
    "extract_dates",
    "extract_invoice_number",
    "extract_vat_ids",
    "find_ibans",
    "find_total",
    "iban_checksum_ok",
    "is_total_line",
    "is_valid_iban",
    "normalise_iban",
    "parse_number",
]
