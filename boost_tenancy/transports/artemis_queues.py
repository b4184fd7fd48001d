"""Queue counts and listings on ActiveMQ Artemis, asked through its management address: what
`stats`, `queues list|drain|resume|delete`, the queue gauges and the backlog quota read, over
the transport's own connection (STOMP or AMQP), as Classic's statistics plugin answers them.

The broker control's listQueues(options, page, pageSize) answers a JSON text
`{"data": [...], "count": N}`, one object per queue with every value as text
(QueueView.toJson, read from Artemis 2.44's source), filtered by one field: the name EQUALS a
queue, or CONTAINS a prefix (there is no "starts with"; the prefix is checked here).
messageCount counts what is waiting, in flight and scheduled (QueueImpl.getMessageCount), so
waiting is what is left once deliveringCount and scheduledCount are taken off.
An auto-created queue is deleted once it is empty and has no consumer (the broker's default,
and the project's broker.xml): such a queue is reported missing (None), as one never made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from boost_tenancy.transports.artemis_requests import ManagementError, Operation, Runs
from boost_tenancy.transports.base import ListedQueue, QueueStats

PAGE_SIZE: Final = 1000
"""Queues asked for in one listQueues page."""


def list_queues_operation(operation: str, value: str, page: int = 1) -> Operation:
    """listQueues filtered on the queue's name (operation EQUALS or CONTAINS)."""
    options = {"field": "name", "operation": operation, "value": value}
    return Operation("listQueues", (json.dumps(options), page, PAGE_SIZE))


def _rows(result: object) -> tuple[list[Mapping[str, object]], int]:
    """The queues of one listQueues answer, and how many match in all."""
    try:
        decoded: Any = json.loads(result) if isinstance(result, str) else result
        rows, count = decoded["data"], int(decoded["count"])
    except (ValueError, TypeError, KeyError) as exc:
        raise ManagementError(f"Artemis listed queues as {str(result)[:200]!r}") from exc
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ManagementError(f"Artemis listed queues as {str(result)[:200]!r}")
    return rows, count


def _number(row: Mapping[str, object], field: str) -> int:
    try:
        return int(str(row[field]))
    except (KeyError, ValueError) as exc:
        raise ManagementError(
            f"Artemis reported queue {row.get('name')!r} without {field}"
        ) from exc


def stats_of(row: Mapping[str, object]) -> QueueStats:
    """One queue's counts from its listQueues object."""
    in_flight = _number(row, "deliveringCount")
    scheduled = _number(row, "scheduledCount")
    waiting = max(0, _number(row, "messageCount") - in_flight - scheduled)
    return QueueStats(waiting=waiting, in_flight=in_flight, scheduled=scheduled)


def queue_stats(session: Runs, queues: Sequence[str]) -> dict[str, QueueStats | None]:
    """The counts of each named queue; None for a queue the broker does not have."""
    names = list(dict.fromkeys(queues))
    results = session.run([list_queues_operation("EQUALS", name) for name in names])
    stats: dict[str, QueueStats | None] = {}
    for name, result in zip(names, results, strict=True):
        rows, _ = _rows(result)
        row = next((r for r in rows if r.get("name") == name), None)
        stats[name] = None if row is None else stats_of(row)
    return stats


def list_queues(session: Runs, prefixes: Sequence[str]) -> list[ListedQueue]:
    """Every queue whose name starts with one of the prefixes, sorted by name, with its counts
    and consumers; the broker's internal queues left out."""
    found: dict[str, ListedQueue] = {}
    for prefix in dict.fromkeys(prefixes):
        page = 1
        while True:
            rows, count = _rows(session.run([list_queues_operation("CONTAINS", prefix, page)])[0])
            for row in rows:
                name = str(row.get("name", ""))
                if name.startswith(prefix) and str(row.get("internalQueue")) != "true":
                    found[name] = ListedQueue(
                        name=name, stats=stats_of(row), consumers=_number(row, "consumerCount")
                    )
            if not rows or page * PAGE_SIZE >= count:
                break
            page += 1
    return [found[name] for name in sorted(found)]
