"""The rule engine: scores a text against a rule set, extracts its fields and rates its confidence.

Pure and deterministic: the same text and rules always give the same interpretation.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from services.professor.fields import (
    IbanScan,
    extract_amounts,
    extract_dates,
    extract_invoice_number,
    extract_vat_ids,
    find_ibans,
    find_total,
)
from services.professor.rules import OTHER, RuleSet

MIN_SCORE: Final = 1.5
"""Below this best score nothing matched well: the document is "other"."""
SATURATION: Final = 3.0
"""A best score at or above this is full evidence (two strong keywords, e.g. Dear + Sincerely)."""
EVIDENCE_PENALTY: Final = 0.5
"""Confidence factor when none of the best type's required fields was found."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpretation:
    """What a text is, how sure the engine is, what it found, and why a person should look."""

    document_type: str
    confidence: float
    fields: dict[str, Any]
    """JSON-ready: invoiceNumber, dates, issueDate, dueDate, total, amounts, iban, vatIds (the
    optional scalars only when found, the lists always)."""
    needs_review: bool
    reasons: tuple[str, ...]


# -- keyword matching -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    """Whole words, any whitespace between them; matched against case-folded text."""
    words = phrase.casefold().split()
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, words)) + r"(?!\w)")


def score_types(text: str, rules: RuleSet) -> dict[str, float]:
    """Each rule type's score for the text (see the module docstring), in rule order."""
    folded = text.casefold()
    scores = dict.fromkeys(rules.document_types, 0.0)
    for rule in rules.rules:
        found = sum(k.weight for k in rule.keywords if _phrase_pattern(k.phrase).search(folded))
        scores[rule.document_type] += rule.weight * found
    return scores


# -- labelled dates -------------------------------------------------------------------------------
_DUE_LABEL_RE: Final = re.compile(
    r"\bdue\b|\bpayable\b|\bpay\s+by\b|fällig|zahlbar|zahlungsziel", re.IGNORECASE
)
_ISSUE_LABEL_RE: Final = re.compile(
    r"\binvoice\s+date\b|\bissue\s+date\b|\bdate\s+of\s+issue\b|\bissued\b|rechnungsdatum",
    re.IGNORECASE,
)
_DATE_LABEL_RE: Final = re.compile(r"\bdated?\b|\bdatum\b", re.IGNORECASE)
_LABEL_FILLER: Final = " \t:.#-"


def _date_after(text: str, label: re.Match[str]) -> date | None:
    """The first date after a label on its line, or on the next non-blank line when the label
    ends its line (table layouts put the value below)."""
    line_end = text.find("\n", label.end())
    line_end = len(text) if line_end < 0 else line_end
    rest = text[label.end() : line_end]
    dates = extract_dates(rest)
    if dates:
        return dates[0]
    if rest.strip(_LABEL_FILLER):
        return None
    following = next((line for line in text[line_end:].splitlines() if line.strip()), "")
    dates = extract_dates(following)
    return dates[0] if dates else None


def due_date(text: str) -> date | None:
    """The date after the first due label (due, payable, pay by, fällig, zahlbar) that has one."""
    for label in _DUE_LABEL_RE.finditer(text):
        found = _date_after(text, label)
        if found is not None:
            return found
    return None


def issue_date(text: str, due: date | None) -> date | None:
    """The date after an issue label (invoice date, issue date...), else after a plain Date/Datum
    label that is not part of a due label, else the first date in the text other than the due
    date."""
    for label in _ISSUE_LABEL_RE.finditer(text):
        found = _date_after(text, label)
        if found is not None:
            return found
    due_spans = [(m.start(), m.end()) for m in _DUE_LABEL_RE.finditer(text)]
    for label in _DATE_LABEL_RE.finditer(text):
        # "Due date" is a due label followed by the word date, not an issue date.
        if any(start <= label.start() <= end + 2 for start, end in due_spans):
            continue
        found = _date_after(text, label)
        if found is not None:
            return found
    return next((d for d in extract_dates(text) if d != due), None)


# -- fields ---------------------------------------------------------------------------------------
def extract_fields(text: str) -> tuple[dict[str, Any], IbanScan]:
    """The JSON-ready fields of a text, and the IBAN scan (whose failures become review reasons)."""
    fields: dict[str, Any] = {}
    invoice_number = extract_invoice_number(text)
    if invoice_number is not None:
        fields["invoiceNumber"] = invoice_number
    fields["dates"] = [d.isoformat() for d in extract_dates(text)]
    due = due_date(text)
    issued = issue_date(text, due)
    if issued is not None:
        fields["issueDate"] = issued.isoformat()
    if due is not None:
        fields["dueDate"] = due.isoformat()
    total = find_total(text)
    if total is not None:
        fields["total"] = total.to_json()
    fields["amounts"] = [a.to_json() for a in dict.fromkeys(extract_amounts(text))]
    ibans = find_ibans(text)
    fields["iban"] = list(ibans.valid)
    fields["vatIds"] = [vat.value for vat in extract_vat_ids(text)]
    return fields, ibans


def _present(fields: dict[str, Any], name: str) -> bool:
    value = fields.get(name)
    return value is not None and value != []


# -- interpretation -------------------------------------------------------------------------------
def interpret(text: str, rules: RuleSet, *, threshold: float) -> Interpretation:
    """Classify text by rules, extract its fields and decide whether it needs review: when the
    confidence is below threshold, the type is "other", or an IBAN fails its checksum.

    Confidence formula (the constants are MIN_SCORE, SATURATION and EVIDENCE_PENALTY):

        score(t)   = sum over rules r of type t: r.weight * (sum of weights of r's keywords found)
        best       = the type with the highest score (a tie goes to the type defined first)
        best is "other" with confidence 0 when score(best) < MIN_SCORE; otherwise
        share      = score(best) / sum of all scores           how clearly best beats the others
        strength   = min(1, score(best) / SATURATION)          how much evidence there is at all
        evidence   = 1 if best's rules require no field or at least one of their required fields
                     was found, else EVIDENCE_PENALTY          (an invoice needs an invoice number,
                                                                an IBAN, a VAT id or a total)
        confidence = round(share * strength * evidence, 3)

    A keyword counts once however often it occurs, so repeating a word cannot inflate a score.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be between 0 and 1, got {threshold}")
    fields, ibans = extract_fields(text)
    scores = score_types(text, rules)
    reasons: list[str] = []
    best = max(scores, key=scores.__getitem__, default=OTHER)
    best_score = scores.get(best, 0.0)
    if best_score < MIN_SCORE:
        document_type, confidence = OTHER, 0.0
        reasons.append(
            "no document type matched"
            if best_score == 0
            else (
                f"no document type matched well ({best} scored {best_score:g}, "
                f"{MIN_SCORE:g} needed)"
            )
        )
    else:
        document_type = best
        share = best_score / sum(scores.values())
        strength = min(1.0, best_score / SATURATION)
        required = tuple(
            dict.fromkeys(
                name
                for rule in rules.rules
                if rule.document_type == best
                for name in rule.required_fields
            )
        )
        has_evidence = not required or any(_present(fields, name) for name in required)
        evidence = 1.0 if has_evidence else EVIDENCE_PENALTY
        confidence = round(share * strength * evidence, 3)
        if confidence < threshold:
            reasons.append(
                f"confidence {confidence:.3f} is below the review threshold {threshold:.3f}"
            )
            if not has_evidence:
                reasons.append(f"{best} without any of {', '.join(required)}")
            runner_up = max((t for t in scores if t != best), key=scores.__getitem__, default=None)
            if runner_up is not None and scores[runner_up] > 0:
                reasons.append(
                    f"{best} (score {best_score:g}) also resembles {runner_up} "
                    f"(score {scores[runner_up]:g})"
                )
            if strength < 1.0:
                reasons.append(f"little evidence for {best} (score {best_score:g})")
    reasons.extend(f"IBAN {iban} fails its checksum" for iban in ibans.invalid_checksum)
    needs_review = document_type == OTHER or confidence < threshold or bool(ibans.invalid_checksum)
    return Interpretation(
        document_type=document_type,
        confidence=confidence,
        fields=fields,
        needs_review=needs_review,
        reasons=tuple(reasons),
    )


__all__ = [
    "EVIDENCE_PENALTY",
    "MIN_SCORE",
    "SATURATION",
    "Interpretation",
    "due_date",
    "extract_fields",
    "interpret",
    "issue_date",
    "score_types",
]
