"""Artemis's exclusive diverts and the management operations that make them, as its source has
them (transports/artemis_management.py names where): one model for both in-process brokers,
the in-memory one (memory.py, STOMP's view) and the AMQP peer (amqp_peer/).

- createQueue (its JSON configuration and ignoreIfExists) makes the queue where missing.
- createDivert does nothing, and answers success all the same, where a queue or divert already
  has its name or its address has no queue (ActiveMQServerImpl.deployDivert).
- getDivertNames lists every divert; destroyDivert removes one (AMQ229012 for a name no
  divert has); getBrokerPluginClassNames names the StompLossPlugin, as these brokers give back
  everything a lost connection held; any other operation is refused as Artemis refuses an
  operation it does not have (AMQ229069).
- listQueues(options, page, pageSize) answers a JSON text {"data": [...], "count": N} of the
  queues whose name EQUALS or CONTAINS the options' value, every value as text, messageCount
  counting waiting, in-flight and scheduled messages (QueueView, QueueImpl.getMessageCount).
- A message sent to an address is stored, as a copy, in the target of every exclusive divert
  whose filter matches, and then on none of the address's queues
  (BindingsImpl.routeToExclusiveBindings); a copy whose target has no queue is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from boost_tenancy.testing import jms_selector
from boost_tenancy.transports.artemis_management import STOMP_LOSS_PLUGIN
from boost_tenancy.transports.artemis_requests import BROKER_RESOURCE, ManagementError

Matches = Callable[[Mapping[str, object]], bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueCount:
    """One queue of a model broker as Artemis's listQueues reports it."""

    name: str
    waiting: int
    in_flight: int
    scheduled: int
    consumers: int


def list_queues_answer(params: Sequence[object], counts: Iterable[QueueCount]) -> str:
    """listQueues's answer over counts, for the name filter in params[0] and the page asked."""
    options = json.loads(str(params[0]))
    page, size = int(str(params[1])), int(str(params[2]))
    field, operation, value = options["field"], options["operation"], str(options["value"])
    if field != "name" or operation not in ("EQUALS", "CONTAINS"):
        raise ManagementError(f"the model filters queues by name only, not {options}")
    matching = sorted(
        (c for c in counts if (c.name == value if operation == "EQUALS" else value in c.name)),
        key=lambda c: c.name,
    )
    data = [
        {
            "name": c.name,
            "messageCount": str(c.waiting + c.in_flight + c.scheduled),
            "deliveringCount": str(c.in_flight),
            "scheduledCount": str(c.scheduled),
            "consumerCount": str(c.consumers),
            "internalQueue": "false",
        }
        for c in matching[(page - 1) * size : page * size]
    ]
    return json.dumps({"data": data, "count": len(matching)})


class DivertModel:
    """The diverts of one broker; has_queue and make_queue are the broker's own (called with
    the broker's lock held, as every method here is)."""

    def __init__(
        self,
        has_queue: Callable[[str], bool],
        make_queue: Callable[[str], None],
        queue_counts: Callable[[], Iterable[QueueCount]] = tuple,
    ) -> None:
        self._has_queue = has_queue
        self._make_queue = make_queue
        self._queue_counts = queue_counts
        self._by_address: dict[str, dict[str, tuple[Matches, str]]] = {}

    def operate(
        self, operation: str, params: Sequence[object], resource: str = BROKER_RESOURCE
    ) -> object:
        """One management operation on the broker control ("broker" resource). The model runs
        no plugin: another resource (the tenant plugin's) is not found, as on Artemis."""
        if resource != BROKER_RESOURCE:
            raise ManagementError(f"AMQ229067: Cannot find resource with name {resource}")
        names = {name for diverts in self._by_address.values() for name in diverts}
        if operation == "getDivertNames" and not params:
            return sorted(names)
        if operation == "getBrokerPluginClassNames" and not params:
            # A lost connection here gives back all it held, as Artemis does with this plugin.
            return [STOMP_LOSS_PLUGIN]
        if operation == "listQueues" and len(params) == 3:
            return list_queues_answer(params, self._queue_counts())
        if operation == "createQueue" and len(params) == 2:
            self._make_queue(json.loads(str(params[0]))["name"])
            return params[0]
        if operation == "createDivert" and len(params) == 1:
            config = json.loads(str(params[0]))
            name, address = config["name"], config["address"]
            if name not in names and not self._has_queue(name) and self._has_queue(address):
                self._by_address.setdefault(address, {})[name] = (
                    jms_selector.parse(config["filter-string"]),
                    config["forwarding-address"],
                )
            return None
        if operation == "destroyDivert" and len(params) == 1:
            for diverts in self._by_address.values():
                if diverts.pop(str(params[0]), None) is not None:
                    return None
            raise ManagementError(f"AMQ229012: No binding for divert {params[0]}")
        raise ManagementError(f"AMQ229069: no operation {operation}/{len(params)}")

    def route(self, address: str, properties: Mapping[str, object]) -> list[tuple[str, str]] | None:
        """Where a message sent to address goes: None when no exclusive divert takes it (the
        address's queues get it), else (divert name, target queue) of every divert whose filter
        matches, the targets without a queue left out (their copies are dropped)."""
        matched = [
            (name, target)
            for name, (matches, target) in self._by_address.get(address, {}).items()
            if matches(properties)
        ]
        if not matched:
            return None
        return [(name, target) for name, target in matched if self._has_queue(target)]

    def of(self, address: str) -> dict[str, str]:
        """The diverts on address: target queue by divert name."""
        return {name: target for name, (_, target) in self._by_address.get(address, {}).items()}


__all__ = ["DivertModel"]
