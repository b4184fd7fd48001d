"""The AMQP 1.0 terms the in-process peer reads and answers with: descriptors, delivery states,
what a terminus asks for, how a transfer is settled and how an attach is refused."""

from __future__ import annotations

from typing import Any, Final, cast

from proton import UNDESCRIBED, Array, Condition, Data, Delivery, Terminus, symbol, ulong

_DECLARED: Final = 0x33
_TRANSACTIONAL_STATE: Final = 0x34
_ACCEPTED: Final = (ulong(0x24), symbol("amqp:accepted:list"))
_DECLARE: Final = (ulong(0x31), symbol("amqp:declare:list"))
_DISCHARGE: Final = (ulong(0x32), symbol("amqp:discharge:list"))
_SELECTOR: Final = (ulong(0x468C00000004), symbol("apache.org:selector-filter:string"))
_TERMINAL: Final = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)


def _symbols(*names: str) -> Array:
    # proton's annotations omit UNDESCRIBED, the descriptor of a plain array
    return Array(cast(Any, UNDESCRIBED), Data.SYMBOL, *map(symbol, names))


def _binary(value: object) -> bytes:
    """A binary field as bytes (proton hands them out as memoryviews)."""
    return bytes(value) if isinstance(value, bytes | memoryview) else b""


def _data_object(data: Data) -> Any:
    data.rewind()
    return data.get_object() if data.next() is not None else None


def _durable(terminus: Terminus) -> bool:
    """rabbit_amqp1_0_link_util:durable/1: a terminus durability other than none (configuration,
    unsettled-state) declares a durable queue."""
    return bool(terminus.durability != Terminus.NONDURABLE)


def _capability(terminus: Terminus) -> str | None:
    """The routing capability a terminus asks for: "topic", "queue" or None."""
    found = _data_object(terminus.capabilities)
    if isinstance(found, Array):
        found = found.elements
    names = found if isinstance(found, list) else [found]
    return next((c for c in ("topic", "queue") if symbol(c) in names), None)


class _Refusal(Exception):  # noqa: N818 - an answer to an attach, not a failure of the peer
    """An attach refused: by a detach with an error (Artemis) or by ending the session
    (RabbitMQ 3.10, measured: it never answers the attach)."""

    def __init__(self, condition: str, description: str, end_session: bool = False) -> None:
        super().__init__(description)
        self.condition = Condition(condition, description)
        self.end_session = end_session


def _settle(
    delivery: Delivery, state: int, condition: Condition | None = None, data: Any = None
) -> None:
    """Answer a transfer with an outcome, or with another delivery state and its fields."""
    if condition is not None:
        delivery.local.condition = condition
    if data is not None:
        delivery.local.data = data
    delivery.update(state)
    delivery.settle()
