"""The JSON codec of message bodies: the same text and values with msgspec and with the standard
library, the values beyond JSON's own types, and hostile bodies that must never crash or stall."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import msgspec
import pydantic
import pytest

from boost_tenancy import codec
from boost_tenancy.errors import MessageDecodeError, MessageEncodeError, PermanentError
from boost_tenancy.json_bodies import decode_json_body, encode_json_body
from boost_tenancy.messages import build_message
from boost_tenancy.processing.retry import RetryPolicy
from boost_tenancy.tenancy import TenantId

ORG_A = TenantId("org-a")


@pytest.fixture(params=[codec.MSGSPEC, codec.STDLIB])
def json_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = codec.use_backend(request.param)
    yield request.param
    codec.use_backend(previous)


class Colour(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    LARGE = 3


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal
    shipped: dt.date | None = None


class Order(pydantic.BaseModel):
    order_id: uuid.UUID = pydantic.Field(alias="orderUUID")
    total: Decimal
    placed: dt.datetime


PLACED = dt.datetime(2026, 3, 1, 12, 30, 5, 120, tzinfo=dt.UTC)
RICH: dict[str, Any] = {
    "amount": Decimal("12.50"),
    "precise": Decimal("0.1000000000000000000000000001"),
    "at": PLACED,
    "offset": dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "naive": dt.datetime(2026, 3, 1, 12, 0),
    "day": dt.date(2026, 3, 1),
    "clock": dt.time(8, 15, 0, 500),
    "wait": [dt.timedelta(0), dt.timedelta(hours=3), dt.timedelta(days=1, microseconds=500_000)],
    "late": dt.timedelta(seconds=-1),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "colour": Colour.RED,
    "size": Size.LARGE,
    "raw": b"\x00\xff",
    "tags": ("a", "b"),
    "one": frozenset({"x"}),
    "line": Line("s-1", Decimal("3.10")),
    "order": Order(orderUUID=uuid.UUID(int=7), total=Decimal("9.99"), placed=PLACED),
    "nested": [{"deep": [Decimal("1E+3"), None, True, 1.5, -0.0, "zürich \u2028"]}],
    "nan": float("nan"),
    "inf": float("-inf"),
    7: "int key",
    2.5: "float key",
}
EXPECTED = (
    '{"amount":"12.50","precise":"0.1000000000000000000000000001",'
    '"at":"2026-03-01T12:30:05.000120Z","offset":"2026-03-01T12:00:00+02:00",'
    '"naive":"2026-03-01T12:00:00","day":"2026-03-01","clock":"08:15:00.000500",'
    '"wait":["P0D","PT10800S","P1DT0.5S"],"late":"-PT1S",'
    '"id":"12345678-1234-5678-1234-567812345678","colour":"red","size":3,"raw":"AP8=",'
    '"tags":["a","b"],"one":["x"],"line":{"sku":"s-1","price":"3.10","shipped":null},'
    '"order":{"orderUUID":"00000000-0000-0000-0000-000000000007","total":"9.99",'
    '"placed":"2026-03-01T12:30:05.000120Z"},'
    '"nested":[{"deep":["1E+3",null,true,1.5,-0.0,"zürich \u2028"]}],"nan":null,"inf":null,'
    '"7":"int key","2.5":"float key"}'
)


def test_both_backends_write_the_same_compact_text(json_backend: str) -> None:
    assert codec.backend() == json_backend
    assert codec.encode(RICH) == EXPECTED


def test_a_decimal_is_a_string_of_every_digit_and_reads_back_exactly(json_backend: str) -> None:
    text = codec.encode({"v": Decimal("123456789012345678901234567890.000001")})
    assert text == '{"v":"123456789012345678901234567890.000001"}'
    assert Decimal(codec.decode(text)["v"]) == Decimal("123456789012345678901234567890.000001")


@pytest.mark.parametrize(
    ("body", "where", "kind"),
    [
        ({"a": [1, {"b": object()}]}, r"\$\.a\[1\]\.b", "builtins.object"),
        ({"line": Line("s", Decimal(1), shipped=object())}, r"\$\.line\.shipped", "object"),  # type: ignore[arg-type]
        ({"f": lambda: None}, r"\$\.f", "function"),
        ({(1, 2): "tuple key"}, r"\$", "tuple as a JSON object key"),
    ],
)
def test_what_json_cannot_carry_names_its_type_and_where_it_is(
    json_backend: str, body: dict[Any, Any], where: str, kind: str
) -> None:
    with pytest.raises(MessageEncodeError, match=where) as raised:
        codec.encode(body)
    assert kind in str(raised.value)
    # A handler publishing it is dead-lettered at once: the same value cannot encode later.
    assert isinstance(raised.value, PermanentError)
    assert RetryPolicy().is_permanent(raised.value)


def test_the_tenant_is_stamped_and_a_lone_surrogate_is_escaped(json_backend: str) -> None:
    assert encode_json_body(ORG_A, {"n": Decimal("1.0")}) == '{"n":"1.0","tenantUUID":"org-a"}'
    text = encode_json_body(ORG_A, {"s": "\ud83d"})
    assert text == '{"s":"\\ud83d","tenantUUID":"org-a"}'
    assert codec.decode(text)["s"] == "\ud83d"


def test_models_and_dataclasses_are_bodies_with_the_tenant_stamped(json_backend: str) -> None:
    order = Order(orderUUID=uuid.UUID(int=1), total=Decimal("5.00"), placed=PLACED)
    assert build_message(ORG_A, order).body == (
        '{"orderUUID":"00000000-0000-0000-0000-000000000001","total":"5.00",'
        '"placed":"2026-03-01T12:30:05.000120Z","tenantUUID":"org-a"}'
    )
    assert build_message(ORG_A, Line("s-1", Decimal("2"))).body == (
        '{"sku":"s-1","price":"2","shipped":null,"tenantUUID":"org-a"}'
    )
    with pytest.raises(TypeError, match="dataclass instance, a pydantic model"):
        build_message(ORG_A, 5)  # type: ignore[arg-type]


VALID_BODIES = [
    '{"a":1,"b":[true,false,null],"c":"zürich","d":1.5,"e":-0.0,"f":1e300,"g":{}}',
    '{"big":123456789012345678901234567890,"dup":1,"dup":2}',
    ' [1, 2.0, "x"] ',
    '"\\u0000 \\ud83d\\ude00"',
    "1" * 4000,
]


@pytest.mark.parametrize("text", VALID_BODIES)
def test_both_backends_decode_to_the_same_python_values(text: str) -> None:
    previous = codec.use_backend(codec.MSGSPEC)
    try:
        fast = codec.decode(text)
        codec.use_backend(codec.STDLIB)
        slow = codec.decode(text)
    finally:
        codec.use_backend(previous)
    assert fast == slow
    assert type(fast) is type(slow)
    assert repr(fast) == repr(slow)  # -0.0 and 0.0 compare equal; their text does not


HOSTILE = [
    ("not json", "not valid JSON"),
    ('{"a": 1', "not valid JSON"),
    ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ("1" * 5000, "cannot be decoded"),
    ('{"a": ' + "9" * 100_000 + "}", "cannot be decoded"),
]


@pytest.mark.parametrize(("text", "why"), HOSTILE)
def test_hostile_bodies_are_decode_errors_on_both_backends(
    json_backend: str, text: str, why: str
) -> None:
    with pytest.raises(MessageDecodeError, match=why):
        decode_json_body(text, ORG_A)


@pytest.mark.parametrize("text", ["NaN", '"\\ud83d"', "1e400", "[" * 5000 + "]" * 5000, "1" * 4301])
def test_what_msgspec_refuses_is_read_the_standard_library_way(text: str) -> None:
    # msgspec raises on each of these; the toolkit's result must not depend on it.
    with pytest.raises((msgspec.DecodeError, RecursionError)):
        msgspec.json.decode(text)
    previous = codec.use_backend(codec.MSGSPEC)
    try:
        try:
            fast: Any = codec.decode(text)
        except MessageDecodeError as exc:
            fast = type(exc)
        codec.use_backend(codec.STDLIB)
        try:
            slow: Any = codec.decode(text)
        except MessageDecodeError as exc:
            slow = type(exc)
    finally:
        codec.use_backend(previous)
    assert repr(fast) == repr(slow)


def test_without_msgspec_the_standard_library_is_the_only_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(codec, "msgspec", None)
    assert codec.available_backends() == (codec.STDLIB,)
    previous = codec.use_backend(None)
    try:
        assert codec.backend() == codec.STDLIB
        assert codec.encode(RICH) == EXPECTED
        with pytest.raises(Exception, match="needs msgspec"):
            codec.use_backend(codec.MSGSPEC)
    finally:
        monkeypatch.undo()
        codec.use_backend(previous)
    assert codec.backend() == previous


def test_the_default_backend_is_msgspec_when_it_is_installed() -> None:
    assert codec.available_backends()[0] == codec.MSGSPEC
    with pytest.raises(Exception, match="unknown JSON backend"):
        codec.use_backend("orjson")
