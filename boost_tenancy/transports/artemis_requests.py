"""Artemis's management messages: an operation of its broker control (or of a plugin's
resource) sent to activemq.management, and the reply read back by correlation id.

- A request is a message to `activemq.management` with the properties _AMQ_ResourceName and
  _AMQ_OperationName, a text body holding the JSON array of the operation's parameters, and a
  reply-to; without a reply-to no reply is sent (ServerSessionImpl.handleManagementMessage).
- The reply carries _AMQ_OperationSucceeded and a JSON array of one item, the result or the
  error's text; an operation that returns nothing has no body.

The transports send them (stomp/management.py, amqp/management.py); what they ask is
artemis_management.py's (diverts, queues, the project's plugins) and artemis_queues.py's.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from boost_tenancy.errors import TransportError

MANAGEMENT_ADDRESS: Final = "activemq.management"
RESOURCE_PROPERTY: Final = "_AMQ_ResourceName"
OPERATION_PROPERTY: Final = "_AMQ_OperationName"
SUCCEEDED_PROPERTY: Final = "_AMQ_OperationSucceeded"
BROKER_RESOURCE: Final = "broker"
REPLY_PREFIX: Final = "boost.management.reply."
"""The queue a management session reads its replies from (one per session)."""


class ManagementError(TransportError):
    """The broker refused a management operation or answered with something unreadable."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of Artemis's broker control (ActiveMQServerControl) and its parameters."""

    name: str
    params: tuple[object, ...] = ()
    resource: str = BROKER_RESOURCE
    """The management resource asked: the broker's control, or the tenant plugin's."""

    @property
    def properties(self) -> dict[str, str]:
        return {RESOURCE_PROPERTY: self.resource, OPERATION_PROPERTY: self.name}

    @property
    def body(self) -> str:
        return json.dumps(list(self.params), separators=(",", ":"))


class Runs(Protocol):
    """A management session: sends operations together and gives their results in order, or
    raises ManagementError at the first one refused (TransportError when the broker is gone)."""

    def run(self, ops: Sequence[Operation]) -> list[object]: ...


class Replies:
    """The replies of a management session by correlation id, put on the transport's receiving
    thread and taken, read, by the thread that sent the requests."""

    _POLL_S: Final = 0.05

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._replies: dict[str, tuple[Mapping[str, str], str | None]] = {}

    @staticmethod
    def correlations(ops: Sequence[Operation]) -> list[str]:
        """A new correlation id for each operation, for its request and its reply."""
        return [f"management-{uuid.uuid4().hex}" for _ in ops]

    def put(self, correlation: str | None, properties: Mapping[str, str], body: str | None) -> None:
        """A reply arrived; one without a correlation id answers nothing asked here."""
        if correlation is None:
            return
        with self._cond:
            self._replies[correlation] = (properties, body or None)
            self._cond.notify_all()

    def results(
        self,
        ops: Sequence[Operation],
        correlations: Sequence[str],
        timeout_s: float,
        alive: Callable[[], bool] = lambda: True,
    ) -> list[object]:
        """The results of ops, in order, once every reply came (read_reply: the first refused
        one raises ManagementError); TransportError when they do not all come within timeout_s
        or alive() turns false (the connection they would come on is gone)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not all(c in self._replies for c in correlations):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not alive():
                    raise TransportError(
                        f"Artemis answered {len(ops)} management request(s) only in part within "
                        f"{timeout_s}s (the user needs the manage permission on "
                        f"{MANAGEMENT_ADDRESS})"
                    )
                self._cond.wait(min(remaining, self._POLL_S))
            replies = [self._replies.pop(c) for c in correlations]
        return [read_reply(op, *reply) for op, reply in zip(ops, replies, strict=True)]


def read_reply(operation: Operation, properties: Mapping[str, str], body: str | None) -> object:
    """The result of operation from its reply (None for an operation that returns nothing);
    ManagementError with the broker's text when it failed."""
    succeeded = str(properties.get(SUCCEEDED_PROPERTY, "")).lower()
    result: object = None
    if body:
        try:
            decoded = json.loads(body)
        except ValueError as exc:
            raise ManagementError(
                f"Artemis management reply to {operation.name} is not JSON: {body[:200]!r}"
            ) from exc
        result = decoded[0] if isinstance(decoded, list) and decoded else decoded
    if succeeded != "true":
        raise ManagementError(f"Artemis refused management operation {operation.name}: {result}")
    return result


__all__ = [
    "BROKER_RESOURCE",
    "MANAGEMENT_ADDRESS",
    "OPERATION_PROPERTY",
    "REPLY_PREFIX",
    "RESOURCE_PROPERTY",
    "SUCCEEDED_PROPERTY",
    "ManagementError",
    "Operation",
    "Replies",
    "Runs",
    "read_reply",
]
