"""Message models: a processor's bodies validated into a pydantic v2 model or a dataclass.

A processor declares its model as `class Resize(TenantProcessor[ResizeCommand])` or with
`model = ResizeCommand`; the dispatcher validates every decoded JSON body into it before the
handler runs (message.model) and dead-letters a body that does not fit at once, reason
"invalid", with the errors recorded (docs/typed-messages.md).

- A pydantic v2 model (the `models` extra) validates with its own `model_validate`, as pydantic
  always does (lax mode unless the model says strict); the toolkit never imports pydantic for
  anything else.
- A dataclass converts strictly, like msgspec: JSON's own types as they are (an int is taken
  where a float is expected, nothing else is coerced), ISO 8601 text for datetime, date and time
  (RFC 3339: a datetime needs its time), canonical text for UUID, a string or a number for
  Decimal, an enum's value, nested dataclasses, lists, dicts with string keys, Optional. With
  msgspec installed (the `fast-json` extra) msgspec.convert does it, else a converter of this
  module that gives the same values and the same errors.

Keys a model does not declare are ignored, so the tenantUUID the toolkit stamps into every body
reaches a model only when it declares such a field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import re
import types
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Generic, cast

from boost_tenancy import codec

try:  # the fast-json extra
    import msgspec
except ImportError:  # pragma: no cover - the stdlib converter's tests cover this path
    msgspec = None  # type: ignore[assignment]
from boost_tenancy.errors import ConfigError, ModelValidationError
from boost_tenancy.messages import M
from boost_tenancy.selectors import TENANT_PROPERTY

FieldErrors = list[tuple[str, str]]

_SCALARS: Final[dict[type, str]] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    Decimal: "decimal",
    dt.datetime: "datetime",
    dt.date: "date",
    dt.time: "time",
    uuid.UUID: "uuid",
}
_MSGSPEC_PATH: Final = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)


def is_pydantic_model(model: object) -> bool:
    """Whether model is a pydantic v2 model class (without importing pydantic)."""
    return (
        isinstance(model, type)
        and callable(getattr(model, "model_validate", None))
        and (isinstance(getattr(model, "model_fields", None), dict))
    )


def _json_type(value: object) -> str:
    """The JSON type of a decoded value, as msgspec names it in its errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return {int: "int", float: "float", str: "str"}.get(type(value), type(value).__name__)


class _Invalid(Exception):  # noqa: N818  # internal signal, turned into ModelValidationError
    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def _expected(annotation: object) -> str:  # noqa: PLR0911
    """How msgspec names an expected type in an error."""
    if annotation is type(None):
        return "null"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_expected(arg) for arg in typing.get_args(annotation))
    if origin is list:
        return "array"
    if origin is dict or dataclasses.is_dataclass(annotation):
        return "object"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_kind(annotation).__name__
    if isinstance(annotation, type):
        return _SCALARS.get(annotation, annotation.__name__)
    return str(annotation)


def _enum_kind(annotation: type[enum.Enum]) -> type:
    """str for an enum whose values are all text, else int (as msgspec decides)."""
    return str if all(isinstance(member.value, str) for member in annotation) else int


def _check_annotation(annotation: object, where: str) -> None:
    """Refuse, at start-up, a dataclass field type the converters do not both handle."""
    if annotation is Any or annotation is type(None) or annotation in _SCALARS:
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if sum(arg is not type(None) for arg in args) == 1:
            for arg in args:
                _check_annotation(arg, where)
            return
    elif origin is list and len(args) == 1:
        _check_annotation(args[0], where)
        return
    elif origin is dict and len(args) == 2 and args[0] is str:
        _check_annotation(args[1], where)
        return
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return
    elif isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        for name, hint in _hints(annotation).items():
            _check_annotation(hint, f"{where}.{name}")
        return
    raise ConfigError(
        f"message model field {where} has the type {annotation!r}; a dataclass model takes str, "
        "int, float, bool, Decimal, datetime, date, time, UUID, an Enum, a nested dataclass, "
        "list[X], dict[str, X] and X | None (use a pydantic model for anything else)"
    )


def _hints(model: type) -> dict[str, Any]:
    hints = typing.get_type_hints(model)
    return {item.name: hints[item.name] for item in dataclasses.fields(model) if item.init}


def _parse(annotation: type, value: str, path: str) -> object:
    """A text value as a datetime, date, time, UUID or Decimal, msgspec's way."""
    try:
        if annotation is uuid.UUID:
            if len(value) not in (32, 36):
                raise ValueError(value)
            return uuid.UUID(value)
        if annotation is Decimal:
            return Decimal(value.strip())
        if annotation is dt.datetime:
            if len(value) < 19 or value[10] not in "Tt ":
                raise ValueError(value)
            return dt.datetime.fromisoformat(value.upper())
        if annotation is dt.date:
            if len(value) != 10:
                raise ValueError(value)
            return dt.date.fromisoformat(value)
        return dt.time.fromisoformat(value.upper())
    except (ValueError, InvalidOperation):
        kind = {uuid.UUID: "UUID", Decimal: "decimal string"}.get(annotation)
        message = f"Invalid {kind}" if kind else f"Invalid RFC3339 encoded {_SCALARS[annotation]}"
        raise _Invalid(message, path) from None


def _convert(value: Any, annotation: Any, path: str) -> Any:  # noqa: PLR0911, PLR0912
    """value (decoded JSON) as annotation, or _Invalid naming where it does not fit."""
    if annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(annotation):
            return None
        (inner,) = (arg for arg in typing.get_args(annotation) if arg is not type(None))
        if value is None:
            raise _Invalid(f"Expected `{_expected(annotation)}`, got `null`", path)
        try:
            return _convert(value, inner, path)
        except _Invalid as exc:
            if exc.path == path and exc.message.startswith("Expected"):
                raise _Invalid(
                    f"Expected `{_expected(annotation)}`, got `{_json_type(value)}`", path
                ) from None
            raise
    wrong = _Invalid(f"Expected `{_expected(annotation)}`, got `{_json_type(value)}`", path)
    if annotation is type(None):
        if value is not None:
            raise wrong
        return None
    if origin is list:
        if not isinstance(value, list):
            raise wrong
        (item,) = typing.get_args(annotation)
        return [_convert(entry, item, f"{path}[{index}]") for index, entry in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise wrong
        item = typing.get_args(annotation)[1]
        return {key: _convert(entry, item, f"{path}[...]") for key, entry in value.items()}
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise wrong
        return _convert_dataclass(value, cast(type, annotation), path)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if _enum_kind(annotation) is str:
            fits = isinstance(value, str)
        else:
            fits = isinstance(value, int) and not isinstance(value, bool)
        if not fits:
            raise wrong
        try:
            return annotation(value)
        except ValueError:
            raise _Invalid(f"Invalid enum value {value!r}", path) from None
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong
        return float(value)
    if annotation is Decimal and isinstance(value, int | float) and not isinstance(value, bool):
        return Decimal(str(value))
    if annotation in (Decimal, dt.datetime, dt.date, dt.time, uuid.UUID):
        if not isinstance(value, str):
            raise wrong
        return _parse(annotation, value, path)
    if annotation in (str, int, bool):
        if type(value) is not annotation:
            raise wrong
        return value
    raise wrong  # refused at start-up by _check_annotation; never reached for a checked model


def _convert_dataclass(value: dict[str, Any], model: type, path: str) -> Any:
    fields = {item.name: item for item in dataclasses.fields(model) if item.init}
    hints = _hints(model)
    arguments: dict[str, Any] = {}
    for name, item in fields.items():
        if name in value:
            arguments[name] = _convert(value[name], hints[name], f"{path}.{name}")
        elif item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            raise _Invalid(f"Object missing required field `{name}`", path)
    try:
        return model(**arguments)
    except (TypeError, ValueError) as exc:  # __post_init__ refusing the values
        raise _Invalid(str(exc), path) from None


def _split_msgspec(text: str) -> tuple[str, str]:
    """msgspec's "<message> - at `$.path`" as (path, message)."""
    match = _MSGSPEC_PATH.match(text)
    if match is None:  # pragma: no cover - the pattern matches any text
        return "", text
    return (match.group("path") or "").removeprefix("."), match.group("message")


def _pydantic_path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path.removeprefix(".")


def _declares_tenant(model: type) -> bool:
    if is_pydantic_model(model):
        fields = cast(dict[str, Any], model.model_fields)  # type: ignore[attr-defined]
        names = set(fields) | {getattr(info, "alias", None) for info in fields.values()}
        return TENANT_PROPERTY in names
    return TENANT_PROPERTY in {item.name for item in dataclasses.fields(model)}


class ModelBinding(Generic[M]):
    """How decoded bodies become instances of one model; built once per processor."""

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.name = f"{model.__module__}.{model.__qualname__}"
        self._keeps_tenant = False
        self._validate: Callable[[Any], M]
        if is_pydantic_model(model):
            self._validate = self._pydantic
        elif isinstance(model, type) and dataclasses.is_dataclass(model):
            try:
                for name, hint in _hints(model).items():
                    _check_annotation(hint, f"{model.__qualname__}.{name}")
            except NameError as exc:
                raise ConfigError(f"message model {self.name}: {exc}") from exc
            self._validate = self._dataclass
        else:
            raise ConfigError(
                f"message model {model!r} must be a pydantic v2 model class or a dataclass"
            )
        self._keeps_tenant = _declares_tenant(model)

    def validate(self, data: Any) -> M:
        """data (a decoded JSON body) as the model, or ModelValidationError listing why not.
        The tenantUUID stamped into the body is left out unless the model declares it."""
        if isinstance(data, dict) and not self._keeps_tenant and TENANT_PROPERTY in data:
            data = {key: value for key, value in data.items() if key != TENANT_PROPERTY}
        return self._validate(data)

    def _pydantic(self, data: Any) -> M:
        validate = self.model.model_validate  # type: ignore[attr-defined]
        try:
            return cast(M, validate(data))
        except ValueError as exc:  # pydantic's ValidationError is one
            errors = getattr(exc, "errors", None)
            if not callable(errors):
                raise
            raise ModelValidationError(
                self.name,
                [(_pydantic_path(tuple(error["loc"])), str(error["msg"])) for error in errors()],
            ) from None

    def _dataclass(self, data: Any) -> M:
        if codec.backend() == codec.MSGSPEC and msgspec is not None:
            try:
                return cast(M, msgspec.convert(data, self.model))
            except msgspec.ValidationError as exc:
                raise ModelValidationError(self.name, [_split_msgspec(str(exc))]) from None
        try:
            return cast(M, _convert(data, self.model, ""))
        except _Invalid as exc:
            raise ModelValidationError(
                self.name, [(exc.path.removeprefix("."), exc.message)]
            ) from None


def binding_for(processor: object) -> ModelBinding[Any] | None:
    """The model binding of a processor that declares a model (its `model`), or None."""
    model = getattr(processor, "model", None)
    if model is None:
        return None
    if getattr(processor, "json_body", True) is not True:
        raise ConfigError(
            f"{type(processor).__name__} declares the message model {model!r} with "
            "json_body = False: a model is validated from the JSON body, so keep json_body True"
        )
    return ModelBinding(model)


def validate(model: type[M], data: Any) -> M:
    """data as model, the way a processor's bodies are validated (ModelValidationError)."""
    return ModelBinding(model).validate(data)


__all__ = ["ModelBinding", "binding_for", "is_pydantic_model", "validate"]
