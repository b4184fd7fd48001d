"""The subset of JMS selector syntax the project renders (selectors.Selector, TenantExclusion),
parsed into a predicate a test broker can apply with JMS three-valued logic.

Anything outside the subset raises UnsupportedSelectorError, so a model refuses what it cannot
evaluate instead of delivering everything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from boost_tenancy.errors import BoostTenancyError

# JMS three-valued logic: True, False or None (UNKNOWN, e.g. a comparison with a missing property).
Truth = bool | None
Predicate = Callable[[Mapping[str, object]], Truth]

_TOKEN_RE: Final = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)"
    r"|(?P<op><>|=|\(|\)|,))"
)
_KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "IS", "NULL", "IN"})


class UnsupportedSelectorError(BoostTenancyError, ValueError):
    """A selector outside the modelled subset (or not a selector at all)."""


def parse(text: str) -> Callable[[Mapping[str, object]], bool]:
    """A predicate selecting the messages whose properties make the selector TRUE.

    Grammar: or_expr := and_expr (OR and_expr)*; and_expr := term (AND term)*;
    term := '(' or_expr ')' | name ('=' | '<>') 'literal' | name IS [NOT] NULL
    | name [NOT] IN ('literal', ...). Literals are single-quoted with '' for a quote.
    """
    predicate = _Parser(text).parse()
    return lambda properties: predicate(properties) is True


def _and(left: Truth, right: Truth) -> Truth:
    if left is False or right is False:
        return False
    return None if left is None or right is None else True


def _or(left: Truth, right: Truth) -> Truth:
    if left is True or right is True:
        return True
    return None if left is None or right is None else False


def _string(properties: Mapping[str, object], name: str) -> str | None:
    # A property of another type never equals a string literal: UNKNOWN, as for a missing one.
    value = properties.get(name)
    return value if isinstance(value, str) else None


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = self._tokenize(text)
        self._pos = 0

    def _tokenize(self, text: str) -> list[tuple[str, str]]:
        tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN_RE.match(text, pos)
            if match is None:
                raise UnsupportedSelectorError(f"unsupported selector syntax at {text[pos:]!r}")
            kind = match.lastgroup or ""
            value = match.group(kind)
            if kind == "name" and value.upper() in _KEYWORDS:
                kind, value = "keyword", value.upper()
            tokens.append((kind, value))
            pos = match.end()
        return tokens

    def _peek(self) -> tuple[str, str] | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _take(self, kind: str, value: str | None = None) -> str:
        token = self._peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            wanted = value or kind
            raise UnsupportedSelectorError(f"expected {wanted} in selector {self._text!r}")
        self._pos += 1
        return token[1]

    def _accept(self, kind: str, value: str) -> bool:
        if self._peek() == (kind, value):
            self._pos += 1
            return True
        return False

    def parse(self) -> Predicate:
        if not self._tokens:
            raise UnsupportedSelectorError("empty selector")
        predicate = self._or_expr()
        if self._peek() is not None:
            raise UnsupportedSelectorError(f"unsupported selector syntax in {self._text!r}")
        return predicate

    def _or_expr(self) -> Predicate:
        terms = [self._and_expr()]
        while self._accept("keyword", "OR"):
            terms.append(self._and_expr())
        if len(terms) == 1:
            return terms[0]

        def either(properties: Mapping[str, object]) -> Truth:
            result: Truth = False
            for term in terms:
                result = _or(result, term(properties))
            return result

        return either

    def _and_expr(self) -> Predicate:
        terms = [self._term()]
        while self._accept("keyword", "AND"):
            terms.append(self._term())
        if len(terms) == 1:
            return terms[0]

        def both(properties: Mapping[str, object]) -> Truth:
            result: Truth = True
            for term in terms:
                result = _and(result, term(properties))
            return result

        return both

    def _term(self) -> Predicate:
        if self._accept("op", "("):
            inner = self._or_expr()
            self._take("op", ")")
            return inner
        name = self._take("name")
        if self._accept("keyword", "IS"):
            negated = self._accept("keyword", "NOT")
            self._take("keyword", "NULL")
            return lambda properties: (name in properties) if negated else (name not in properties)
        negated = self._accept("keyword", "NOT")
        if self._accept("keyword", "IN"):
            self._take("op", "(")
            listed = {self._literal()}
            while self._accept("op", ","):
                listed.add(self._literal())
            self._take("op", ")")
            return lambda properties: _membership(_string(properties, name), listed, negated)
        if negated:
            raise UnsupportedSelectorError(f"unsupported use of NOT in selector {self._text!r}")
        operator = self._take("op")
        if operator not in ("=", "<>"):
            raise UnsupportedSelectorError(f"unsupported operator {operator!r} in {self._text!r}")
        literal = self._literal()
        equal = operator == "="

        def compare(properties: Mapping[str, object]) -> Truth:
            value = _string(properties, name)
            return None if value is None else (value == literal) is equal

        return compare

    def _literal(self) -> str:
        return self._take("string")[1:-1].replace("''", "'")


def _membership(value: str | None, listed: set[str], negated: bool) -> Truth:
    if value is None:
        return None
    return (value in listed) is not negated
