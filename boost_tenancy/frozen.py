"""Frozen values made at a plain class's cost: the toolkit's per-message dataclasses (a
delivery, its message and handler context, its trace context, its outcome) are frozen, so no
handler or middleware can change what the next one reads.

A frozen dataclass stores each field through object.__setattr__, about three times the cost of
a plain one's assignment: a microsecond for ten fields, several on every message consumed.
`fast_init` gives a frozen slots dataclass an __init__ that stores through the fields' own slot
descriptors instead, as fast as a plain class, with the same signature, defaults, factories
and __post_init__; the instance stays frozen (setting a field afterwards still raises).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Final, TypeVar

T = TypeVar("T")

_NO_DEFAULT: Final[Any] = dataclasses.MISSING


def fast_init(cls: type[T]) -> type[T]:
    """Replace the __init__ of a frozen dataclass with slots (decorate it, above @dataclass)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init wants a frozen dataclass with slots, got {cls.__name__}")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # a dataclass, checked above
    taken = {name for name in inspect.signature(cls.__init__).parameters if name != "self"}
    if taken != {field.name for field in fields if field.init}:
        # An InitVar is a parameter of __init__ but no field: nothing here would pass it on.
        raise TypeError(f"fast_init does not take init-only variables ({cls.__name__})")
    names: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for index, field in enumerate(fields):
        setter = f"_set{index}"
        names[setter] = getattr(cls, field.name).__set__
        value = field.name
        if field.default is not _NO_DEFAULT:
            names[f"_default{index}"] = field.default
            param = f"{field.name}=_default{index}"
        elif field.default_factory is not _NO_DEFAULT:
            # As dataclasses do: a sentinel default, the factory called when it is left.
            names[f"_factory{index}"] = field.default_factory
            param = f"{field.name}=_LEFT"
            value = f"_factory{index}() if {field.name} is _LEFT else {field.name}"
        else:
            param = field.name
        if not field.init:
            if field.default_factory is not _NO_DEFAULT:
                body.append(f"    {setter}(self, _factory{index}())")
            elif field.default is not _NO_DEFAULT:
                body.append(f"    {setter}(self, _default{index})")
            continue
        (keyword if field.kw_only else positional).append(param)
        body.append(f"    {setter}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    params_text = ", ".join(
        ["self", *positional, *(["*", *keyword] if keyword else [])],
    )
    source = f"def __init__({params_text}) -> None:\n" + ("\n".join(body) or "    pass") + "\n"
    names["_LEFT"] = object()
    exec(source, names)  # noqa: S102  # made from the class's own field names, nothing else
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


__all__ = ["fast_init"]
