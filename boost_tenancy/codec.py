"""The one JSON codec of message bodies: every body the toolkit encodes or decodes goes through it.

Two backends give the same results: msgspec when it is installed (the `fast-json` extra; it
encodes and decodes several times faster, docs/benchmarks.md), the standard library otherwise.
Whatever msgspec refuses or cannot read is handed to the standard library's path, so the two
differ only in speed: the same text out (compact, UTF-8 kept as it is) and the same Python values
back (dict, list, str, int, float, bool, None).

What encodes besides JSON's own types, on either backend:

- `Decimal`: a JSON string of `str(value)` ("12.50"), every digit kept. A string, not a
  number, because that is what pydantic's JSON mode and msgspec write, and a reader in another
  language must not round it through a double on the way.
- `datetime`, `date`, `time`: ISO 8601 text; a zero UTC offset is written `Z`.
- `timedelta`: an ISO 8601 duration in days and seconds ("P1DT5.5S", "PT90S", "P0D").
- `UUID`: its canonical text. `Enum`: its value. `bytes`: base64 text.
- tuples, sets and frozensets: arrays. Dataclass instances and pydantic v2 models (their
  `model_dump(mode="json", by_alias=True)`): objects. Nested at any depth inside mappings and lists.
- a float NaN or infinity, which JSON has no number for: `null` (as msgspec and pydantic write
  it; the standard library would write `NaN`, which no other JSON reader takes).

Anything else raises MessageEncodeError naming its type and where it was ("$.items[2].price").
A float may come out as `1e100` or `1e+100` depending on the backend: the same number.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final, Protocol

from boost_tenancy.errors import ConfigError, MessageDecodeError, MessageEncodeError

try:  # the fast-json extra
    import msgspec
except ImportError:  # pragma: no cover - exercised by the stdlib backend's tests instead
    msgspec = None  # type: ignore[assignment]

MSGSPEC: Final = "msgspec"
STDLIB: Final = "stdlib"
_ZERO: Final = dt.timedelta(0)


class Codec(Protocol):
    """A JSON backend: text out, Python values back."""

    name: str

    def encode(self, value: Any) -> str: ...

    def decode(self, text: str) -> Any: ...


def _iso(value: dt.datetime | dt.time) -> str:
    text = value.isoformat()
    if value.utcoffset() == _ZERO:
        # The same spelling as msgspec and pydantic: Z, not +00:00.
        text = text.removesuffix("+00:00") + "Z"
    return text


def _duration(value: dt.timedelta) -> str:
    sign = "-" if value < _ZERO else ""
    value = abs(value)
    text = "P"
    if value.days:
        text += f"{value.days}D"
    if value.seconds or value.microseconds:
        fraction = f".{value.microseconds:06d}".rstrip("0") if value.microseconds else ""
        text += f"T{value.seconds}{fraction}S"
    return sign + (text if text != "P" else "P0D")


def _model_dump(value: object) -> Any | None:
    """A pydantic v2 model's JSON-mode dump by alias (what its model_validate reads back), or
    None when value is not one."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_fields"):
        return dump(mode="json", by_alias=True)
    return None


def _scalar(value: object) -> object:  # noqa: PLR0911
    """value as a JSON-native value, one level deep; _UNSUPPORTED when no rule applies."""
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime | dt.time):
        return _iso(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, set | frozenset):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    dumped = _model_dump(value)
    if dumped is not None:
        return dumped
    return _UNSUPPORTED


_UNSUPPORTED: Final = object()


def _default(value: object) -> object:
    """The standard library's hook for what json does not encode by itself."""
    converted = _scalar(value)
    if converted is _UNSUPPORTED:
        raise TypeError(type(value).__name__)
    return converted


def _key(value: object, path: str) -> str | int | float | bool | None:
    """A mapping key as json.dumps takes it (it writes int, float, bool and None as text)."""
    if value is None or isinstance(value, str | int | float):
        return value
    converted = _scalar(value)
    if isinstance(converted, str | int | float):
        return converted
    raise MessageEncodeError(
        f"cannot encode a {type(value).__name__} as a JSON object key at {path}"
    )


def to_json_value(value: object, path: str = "$") -> Any:
    """value with every part made a JSON-native value (dict, list, str, int, finite float, bool,
    None), or MessageEncodeError naming the first part that cannot be and where it is."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {
            _key(key, path): to_json_value(item, f"{path}.{key}") for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [to_json_value(item, f"{path}[{index}]") for index, item in enumerate(value)]
    converted = _scalar(value)
    if converted is _UNSUPPORTED:
        raise MessageEncodeError(
            f"cannot encode a {type(value).__module__}.{type(value).__qualname__} as JSON at "
            f"{path}: send JSON types, Decimal, datetime, date, time, timedelta, UUID, Enum, "
            "bytes, a dataclass or a pydantic model"
        )
    return to_json_value(converted, path)


def _dumps(value: Any, *, ensure_ascii: bool, allow_nan: bool = False) -> str:
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        allow_nan=allow_nan,
        separators=(",", ":"),
        default=_default,
    )


def _stdlib_encode(value: Any) -> str:
    try:
        text = _dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        # A type no rule covers (reported with where it is), a key json takes only after
        # conversion, a NaN: the walk decides, then json writes what it gave.
        text = _dumps(_walk(value), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (decoded from a "\\ud83d" escape) has no UTF-8 form; the escaped
            # JSON text carries the same value and every JSON parser reads it back.
            text = _dumps(_walk(value), ensure_ascii=True)
    return text


def _walk(value: Any) -> Any:
    try:
        return to_json_value(value)
    except RecursionError as exc:
        raise MessageEncodeError("cannot encode a body nested too deeply as JSON") from exc


def _stdlib_decode(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageDecodeError(f"body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise MessageDecodeError("body is JSON nested too deeply to decode") from exc
    except (ValueError, TypeError, MemoryError) as exc:
        # e.g. an integer of more digits than Python converts (sys.set_int_max_str_digits).
        raise MessageDecodeError(f"body is JSON that cannot be decoded: {exc}") from exc


class StdlibCodec:
    """The standard library's json, with the rules above."""

    name = STDLIB

    def encode(self, value: Any) -> str:
        return _stdlib_encode(value)

    def decode(self, text: str) -> Any:
        return _stdlib_decode(text)


def _msgspec_hook(value: Any) -> Any:
    dumped = _model_dump(value)
    if dumped is None:
        raise TypeError(type(value).__name__)
    return dumped


class MsgspecCodec:
    """msgspec's JSON for what it reads and writes the standard library's way; whatever it
    refuses (an unsupported type, a lone surrogate, a key it does not take, a NaN, JSON it does
    not accept or nests too deeply) goes the standard library's way, which decides the outcome."""

    name = MSGSPEC

    def __init__(self) -> None:
        if msgspec is None:
            raise ConfigError("the msgspec JSON backend needs msgspec: pip install msgspec")
        self._encoder = msgspec.json.Encoder(enc_hook=_msgspec_hook)
        self._decode: Callable[[str], Any] = msgspec.json.Decoder().decode

    def encode(self, value: Any) -> str:
        try:
            raw = self._encoder.encode(value)
        except Exception:  # the standard library's path decides, and names what failed where
            return _stdlib_encode(value)
        return raw.decode("utf-8")

    def decode(self, text: str) -> Any:
        try:
            return self._decode(text)
        except Exception:  # NaN, a lone surrogate escape, deep nesting, huge numbers: the
            # standard library reads them, or raises the MessageDecodeError it always raised
            return _stdlib_decode(text)


_BACKENDS: Final[dict[str, Callable[[], Codec]]] = {STDLIB: StdlibCodec, MSGSPEC: MsgspecCodec}


def available_backends() -> tuple[str, ...]:
    """The backends this installation can use, the default first."""
    return (MSGSPEC, STDLIB) if msgspec is not None else (STDLIB,)


_current: Codec = MsgspecCodec() if msgspec is not None else StdlibCodec()


def backend() -> str:
    """The backend in use: "msgspec" or "stdlib"."""
    return _current.name


def use_backend(name: str | None = None) -> str:
    """Switch every encode and decode to the named backend (None: the default, msgspec when
    installed); returns the backend used before. For tests and benchmarks: the two give the
    same results, so an application has no reason to call it."""
    global _current  # noqa: PLW0603  # one process-wide choice, switched by tests and benchmarks
    previous = _current.name
    chosen = available_backends()[0] if name is None else name
    factory = _BACKENDS.get(chosen)
    if factory is None:
        raise ConfigError(f"unknown JSON backend {chosen!r}: expected one of {sorted(_BACKENDS)}")
    _current = factory()
    return previous


def encode(value: Any) -> str:
    """value as compact JSON text, by the rules of this module; MessageEncodeError otherwise."""
    return _current.encode(value)


def decode(text: str) -> Any:
    """JSON text as Python values; MessageDecodeError for anything that is not JSON or that
    would cost too much to read (nesting too deep, integers of thousands of digits)."""
    return _current.decode(text)


__all__ = [
    "MSGSPEC",
    "STDLIB",
    "Codec",
    "MsgspecCodec",
    "StdlibCodec",
    "available_backends",
    "backend",
    "decode",
    "encode",
    "to_json_value",
    "use_backend",
]
