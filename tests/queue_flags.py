"""A queue's flags as its broker reports them: what the toolkit relies on for "a persistent
message outlives a restart and a consumer's departure" (tests/contract/test_transport_contract.py
asserts it on every broker and model)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import NamedTuple

from boost_tenancy.transports.artemis_queues import list_queues_operation
from boost_tenancy.transports.artemis_requests import Runs
from boost_tenancy.transports.base import Transport


class QueueFlags(NamedTuple):
    durable: bool
    """The queue and what it holds outlive a restart of the broker."""
    exclusive: bool
    """The broker gives the queue to one consumer only, or to one connection."""
    dropped_when_unused: bool
    """The broker deletes the queue, with whatever it holds, once its last consumer leaves
    (RabbitMQ's auto_delete). Artemis's autoDelete is not that: it deletes only an empty queue."""


KEPT = QueueFlags(durable=True, exclusive=False, dropped_when_unused=False)
"""What every queue the toolkit makes must be."""


def rabbitmq_queue_flags(name: str) -> QueueFlags | None:
    """The flags of a queue of the local RabbitMQ, by rabbitmqctl; None: no such queue."""
    if shutil.which("rabbitmqctl") is None:
        raise LookupError("rabbitmqctl is not on PATH: the queues of this RabbitMQ cannot be read")
    columns = ["name", "durable", "auto_delete", "exclusive"]
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", *columns, "--formatter", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for row in json.loads(listed.stdout):
        if row["name"] == name:
            return QueueFlags(row["durable"], row["exclusive"], row["auto_delete"])
    return None


def artemis_queue_flags(transport: Transport, name: str) -> QueueFlags | None:
    """The flags of a queue of Artemis, by its listQueues management operation over transport's
    own protocol; None: no such queue."""

    def ask(session: Runs) -> QueueFlags | None:
        answer = json.loads(str(session.run([list_queues_operation("EQUALS", name)])[0]))
        rows: list[dict[str, object]] = answer["data"]
        if not rows:
            return None
        row = rows[0]
        # autoDelete on Artemis removes a queue only once it is empty and has no consumer
        # (QueueManagerImpl): nothing held is ever dropped with it.
        return QueueFlags(row["durable"] == "true", row["exclusive"] == "true", False)

    return transport.management_session(ask)  # type: ignore[attr-defined, no-any-return]
