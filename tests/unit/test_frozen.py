"""fast_init: a frozen slots dataclass built through its slot descriptors behaves as the
dataclass's own __init__ does: signature, defaults, factories, __post_init__, frozen after."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from boost_tenancy.fairness.rates import Admission
from boost_tenancy.frozen import fast_init
from boost_tenancy.messages import IncomingMessage, Message, WireMessage
from boost_tenancy.observability.trace_context import TraceContext
from boost_tenancy.processing.inbound import Adopted
from boost_tenancy.processing.outcomes import Ack
from boost_tenancy.processing.processor import HandlerContext
from boost_tenancy.publishing import AdmittedSend
from boost_tenancy.transports.amqp.receiving import DeliveryToken
from boost_tenancy.transports.base import Delivery


def _twin() -> tuple[type[Any], type[Any]]:
    """The same class twice: with the dataclass's own __init__, and with fast_init's."""

    def make() -> type[Any]:
        @dataclass(frozen=True, slots=True)
        class Value:
            first: int
            third: float = field(default=3.0, kw_only=True)  # after the positional ones
            second: str = "two"
            items: list[int] = field(default_factory=list)
            derived: int = field(default=0, init=False)
            named: str = field(default_factory=lambda: "made", kw_only=True)

            def __post_init__(self) -> None:
                if self.first < 0:
                    raise ValueError(f"first must not be negative, got {self.first}")
                object.__setattr__(self, "derived", self.first * 2)

        return Value

    return make(), fast_init(make())


def test_the_fast_init_takes_the_same_arguments_and_makes_equal_values() -> None:
    plain, fast = _twin()
    assert [p.name for p in inspect.signature(fast.__init__).parameters.values()] == [
        p.name for p in inspect.signature(plain.__init__).parameters.values()
    ]
    for args, kwargs in [((1,), {}), ((2, "x", [5]), {"third": 4.5, "named": "n"})]:
        assert dataclasses.astuple(fast(*args, **kwargs)) == dataclasses.astuple(
            plain(*args, **kwargs)
        )
    assert fast(1).items is not fast(1).items  # each instance its own factory's list
    assert fast(4).derived == 8  # __post_init__ ran


def test_the_fast_init_refuses_what_the_dataclass_refuses() -> None:
    plain, fast = _twin()
    for cls in (plain, fast):
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(TypeError):
            cls(1, "x", [], 4.0)  # third is keyword-only
        with pytest.raises(TypeError):
            cls(1, derived=3)  # not an argument of __init__
        with pytest.raises(ValueError, match="first must not be negative"):
            cls(-1)


def test_a_value_made_by_the_fast_init_stays_frozen() -> None:
    _, fast = _twin()
    value = fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.first = 2
    assert dataclasses.replace(value, first=5).derived == 10


@pytest.mark.parametrize(
    "cls",
    [
        Delivery,
        DeliveryToken,
        WireMessage,
        Message,
        AdmittedSend,
        IncomingMessage,
        TraceContext,
        Adopted,
        Ack,
        HandlerContext,
        Admission,
    ],
    ids=lambda cls: cls.__name__,
)
def test_each_per_message_value_keeps_its_dataclass_signature(cls: type[Any]) -> None:
    parameters = [
        p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"
    ]
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, spec in zip(parameters, fields, strict=True):
        keyword_only = parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert keyword_only == spec.kw_only, spec.name
        has_default = (
            spec.default is not dataclasses.MISSING
            or spec.default_factory is not dataclasses.MISSING
        )
        assert (parameter.default is not inspect.Parameter.empty) == has_default, spec.name
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"


def test_only_a_frozen_dataclass_with_slots_and_no_init_only_variable_is_taken() -> None:
    @dataclass(slots=True)
    class Plain:
        value: int

    @dataclass(frozen=True)
    class NoSlots:
        value: int

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        value: int
        scale: InitVar[int] = 1

    class NoDataclass:
        pass

    for cls in (Plain, NoSlots, NoDataclass):
        with pytest.raises(TypeError, match="frozen dataclass with slots"):
            fast_init(cls)
    with pytest.raises(TypeError, match="init-only"):
        fast_init(WithInitVar)
