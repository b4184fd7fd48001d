"""Typed messages: a processor's model (pydantic v2 or a dataclass) validated on delivery, an
invalid body dead-lettered at once with its errors recorded, and models published as bodies."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, ClassVar

import pydantic
import pytest

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor, TenantProducer, codec
from boost_tenancy import models as models_module
from boost_tenancy.errors import ConfigError, ModelValidationError
from boost_tenancy.models import ModelBinding, validate
from boost_tenancy.processing.processor import check_processor
from boost_tenancy.resilience.error_store import ErrorStore, FailureOutcome
from boost_tenancy.tenancy import TenantId
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.testing.harness import RunningProcessor


class Fit(enum.Enum):
    COVER = "cover"
    CONTAIN = "contain"


@dataclasses.dataclass
class Size:
    width: int
    height: int


@dataclasses.dataclass
class ResizeCommand:
    documentUUID: uuid.UUID  # noqa: N815  # the wire's name
    sizes: list[Size]
    fit: Fit = Fit.COVER
    quality: float = 0.8
    price: Decimal | None = None
    due: dt.datetime | None = None
    day: dt.date | None = None
    labels: dict[str, str] = dataclasses.field(default_factory=dict)


class PydanticResize(pydantic.BaseModel):
    documentUUID: uuid.UUID  # noqa: N815
    sizes: list[Size]
    fit: Fit = Fit.COVER


@pytest.fixture(params=[codec.MSGSPEC, codec.STDLIB])
def json_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = codec.use_backend(request.param)
    yield request.param
    codec.use_backend(previous)


DOC = "3f2b8c1e-0000-4000-8000-000000000001"
GOOD = {"documentUUID": DOC, "sizes": [{"width": 64, "height": 48}], "tenantUUID": "org-a"}

CASES: list[tuple[dict[str, Any], Any]] = [
    (GOOD, ResizeCommand(uuid.UUID(DOC), [Size(64, 48)])),
    (
        {**GOOD, "fit": "contain", "quality": 1, "price": "12.50", "labels": {"a": "b"}},
        ResizeCommand(
            uuid.UUID(DOC), [Size(64, 48)], Fit.CONTAIN, 1.0, Decimal("12.50"), labels={"a": "b"}
        ),
    ),
    (
        {**GOOD, "price": 2.5, "due": "2026-03-01T10:00:00Z", "day": "2026-03-01"},
        ResizeCommand(
            uuid.UUID(DOC),
            [Size(64, 48)],
            price=Decimal("2.5"),
            due=dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC),
            day=dt.date(2026, 3, 1),
        ),
    ),
    ({**GOOD, "sizes": [{"width": "64", "height": 48}]}, ("sizes[0].width", "Expected `int`")),
    ({**GOOD, "sizes": [{"width": 64}]}, ("sizes[0]", "missing required field `height`")),
    ({**GOOD, "fit": "stretch"}, ("fit", "Invalid enum value 'stretch'")),
    ({**GOOD, "quality": True}, ("quality", "Expected `float`, got `bool`")),
    ({**GOOD, "price": "twelve"}, ("price", "Invalid decimal string")),
    ({**GOOD, "due": "2026-03-01"}, ("due", "Invalid RFC3339 encoded datetime")),
    ({**GOOD, "documentUUID": "nope"}, ("documentUUID", "Invalid UUID")),
    ({**GOOD, "labels": {"a": 1}}, ("labels[...]", "Expected `str`, got `int`")),
    ({"sizes": []}, ("", "missing required field `documentUUID`")),
]


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_a_dataclass_model_gives_the_same_values_and_errors_with_and_without_msgspec(
    json_backend: str, data: dict[str, Any], expected: Any
) -> None:
    if isinstance(expected, tuple):
        with pytest.raises(ModelValidationError) as raised:
            validate(ResizeCommand, data)
        ((path, message),) = raised.value.errors
        assert path == expected[0]
        assert expected[1] in message
    else:
        assert validate(ResizeCommand, data) == expected


def test_without_msgspec_dataclasses_use_the_toolkit_converter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(models_module, "msgspec", None)
    for data, expected in CASES:
        if not isinstance(expected, tuple):
            assert validate(ResizeCommand, data) == expected


def test_a_pydantic_model_reports_every_error_with_its_path() -> None:
    with pytest.raises(ModelValidationError) as raised:
        validate(PydanticResize, {"documentUUID": "x", "sizes": [{"width": 1}]})
    paths = [path for path, _ in raised.value.errors]
    assert paths == ["documentUUID", "sizes[0].height"]
    assert "sizes[0].height: Field required" in str(raised.value)


def test_the_stamped_tenant_reaches_a_model_only_when_it_declares_it() -> None:
    class Forbidding(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        n: int

    @dataclasses.dataclass
    class WithTenant:
        tenantUUID: str  # noqa: N815

    assert validate(Forbidding, {"n": 1, "tenantUUID": "org-a"}) == Forbidding(n=1)
    assert validate(WithTenant, {"tenantUUID": "org-a"}) == WithTenant("org-a")


def test_models_are_refused_at_start_up_when_they_cannot_work() -> None:
    @dataclasses.dataclass
    class Odd:
        span: tuple[int, int]

    with pytest.raises(ConfigError, match=r"Odd\.span has the type"):
        ModelBinding(Odd)
    with pytest.raises(ConfigError, match="pydantic v2 model class or a dataclass"):
        ModelBinding(dict)

    class Raw(TenantProcessor[Size]):
        queues = ("q",)
        json_body = False

        def handle(self, message: IncomingMessage[Size], ctx: HandlerContext) -> None:
            pass

    with pytest.raises(ConfigError, match="json_body = False"):
        check_processor(Raw())


class Resizer(TenantProcessor[ResizeCommand]):
    queues: ClassVar[tuple[str, ...]] = ("cmd.resize",)

    def __init__(self) -> None:
        self.seen: list[ResizeCommand] = []

    def handle(self, message: IncomingMessage[ResizeCommand], ctx: HandlerContext) -> None:
        self.seen.append(message.model)
        assert message.data["documentUUID"] == DOC  # the plain JSON stays
        ctx.publish("evt.resized", message.model)


class AsyncResizer(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("cmd.resize",)
    model = PydanticResize

    def __init__(self) -> None:
        self.seen: list[PydanticResize] = []

    async def handle(self, message: IncomingMessage[PydanticResize], ctx: HandlerContext) -> None:
        self.seen.append(message.model)
        ctx.publish("evt.resized", {"doc": message.model.documentUUID, "at": dt.date(2026, 1, 2)})


def test_the_generic_parameter_and_the_attribute_declare_the_model() -> None:
    assert Resizer.model is ResizeCommand
    assert AsyncResizer.model is PydanticResize

    class Plain(TenantProcessor):
        def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
            pass

    assert Plain.model is None


@pytest.mark.parametrize("make", [Resizer, AsyncResizer], ids=["sync", "async"])
def test_a_valid_body_reaches_the_handler_as_its_model_and_an_invalid_one_is_dead_lettered_at_once(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore, make: Any
) -> None:
    processor = make()
    producer = TenantProducer(transport)
    with RunningProcessor(processor, ["org-a"], broker=broker, error_store=store) as run:
        producer.send("cmd.resize", "org-a", ResizeCommand(uuid.UUID(DOC), [Size(64, 48)]))
        producer.send("cmd.resize", "org-a", {"documentUUID": DOC, "sizes": [{"width": "x"}]})
        assert sorted(s.outcome for s in run.wait_handled(2)) == ["dead_lettered", "processed"]
        # No retry: the invalid body was dead-lettered on its first attempt.
        assert sorted(s.outcome for s in run.settled) == ["dead_lettered", "processed"]
        (dead,) = run.dead_letters("cmd.resize", "org-a")
        (out,) = run.messages("evt.resized", "org-a")
    assert len(processor.seen) == 1
    assert str(processor.seen[0].documentUUID) == DOC
    assert dead.properties["boostDeadLetterReason"] == "invalid"
    assert dead.properties["boostAttempt"] == "1"
    assert "ModelValidationError" in dead.properties["boostErrorType"]
    assert "sizes[0].width" in dead.properties["boostError"]
    (record,) = store.failures(tenant=TenantId("org-a"))
    assert (record.outcome, record.attempt) == (FailureOutcome.DEAD_LETTER, 1)
    assert "sizes[0].width" in record.error_text
    assert "sizes[0].height" in record.error_text or make is Resizer  # pydantic lists both
    assert codec.decode(str(out.body))["tenantUUID"] == "org-a"


def test_a_body_that_is_not_json_stays_undecodable(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    with RunningProcessor(Resizer(), ["org-a"], broker=broker, error_store=store) as run:
        TenantProducer(transport).send("cmd.resize", "org-a", "not json")
        run.wait_handled(1)
        (dead,) = run.dead_letters("cmd.resize", "org-a")
    assert dead.properties["boostDeadLetterReason"] == "undecodable"


class Unencodable(TenantProcessor):
    queues: ClassVar[tuple[str, ...]] = ("cmd.resize",)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.publish("evt.out", {"when": object()})


def test_publishing_what_json_cannot_carry_dead_letters_without_retries(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    with RunningProcessor(Unencodable(), ["org-a"], broker=broker, error_store=store) as run:
        TenantProducer(transport).send("cmd.resize", "org-a", {"n": Decimal("1.5")})
        run.wait_handled(1)
        assert [s.outcome for s in run.settled] == ["dead_lettered"]
        (dead,) = run.dead_letters("cmd.resize", "org-a")
    assert dead.properties["boostDeadLetterReason"] == "permanent"
    assert "$.when" in dead.properties["boostError"]
    assert codec.decode(str(dead.body))["n"] == "1.5"


@dataclasses.dataclass
class Exiting:
    document: str

    def __post_init__(self) -> None:
        raise SystemExit("a validator that ends the process")


class ExitingModel(TenantProcessor[Exiting]):
    queues: ClassVar[tuple[str, ...]] = ("cmd.exit",)

    def handle(self, message: IncomingMessage[Exiting], ctx: HandlerContext) -> None:
        raise AssertionError("never reached: the model cannot be built")


def test_a_model_whose_own_code_raises_system_exit_is_retried_like_a_handler(
    broker: InMemoryBroker, transport: InMemoryTransport, store: ErrorStore
) -> None:
    """SystemExit from a model's code escaped the dispatcher: the delivery stayed unacknowledged,
    holding a prefetch slot, until the connection ended. Raised by a handler it is an attempt
    failed; from a model's code too."""
    with RunningProcessor(ExitingModel(), ["org-a"], broker=broker, error_store=store) as run:
        TenantProducer(transport).send("cmd.exit", "org-a", {"document": DOC})
        run.wait_handled(1)
        assert [s.outcome for s in run.settled] == ["retried", "retried", "dead_lettered"]
        (dead,) = run.dead_letters("cmd.exit", "org-a")
    assert dead.properties["boostDeadLetterReason"] == "exhausted"
    assert dead.properties["boostErrorType"] == "SystemExit"
