"""Queue statistics from ActiveMQ Classic's statistics plugin, asked over a STOMP connection of
their own: one request per queue, each answered as JSON maps on a temporary queue.

The plugin (<statisticsBrokerPlugin/>) answers a message sent to
ActiveMQ.Statistics.Destination.<queue> with a reply-to by a MapMessage of the queue's counters
(size, inflightCount, enqueueCount, dequeueCount, dispatchCount, consumerCount, ...), and says
nothing for a queue it does not have. Asked for a wildcard (tenant.t.>) it answers once per
queue that matches, which lists a tenant's queues (list_queues). With END_OF_LIST appended to
the name it follows the answers with an empty map, so a missing queue is told apart without
waiting for a timeout. It looks queues up without creating them. A STOMP subscription receives
a MapMessage as JSON with the header transformation: jms-map-json, which Classic converts with
XStream and Jettison; a broker without them on its class path drops the connection instead, so
the requests never share the transport's own connection and its subscriptions.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from boost_tenancy.errors import QueueStatsUnavailableError, TransportError
from boost_tenancy.messages import check_queue_name
from boost_tenancy.transports.base import ListedQueue, QueueStats, check_queue_prefix
from boost_tenancy.transports.stomp.connection import StompConnection
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import QUEUE_PREFIX, encode_frame
from boost_tenancy.transports.stomp.link import Link
from boost_tenancy.transports.stomp.receipts import new_receipt
from boost_tenancy.transports.stomp.settings import StompSettings
from boost_tenancy.transports.stomp.side import side_connection

DESTINATION_PREFIX: Final = "ActiveMQ.Statistics.Destination."
"""The plugin answers a message sent to this prefix + a queue name with that queue's counters."""
END_OF_LIST: Final = "ActiveMQ.Statistics.Destination.List.End.With.Null"
"""Appended to the queue name: the plugin ends its answers with an empty map."""
BROKER_TOPIC: Final = "/topic/ActiveMQ.Statistics.Broker"
"""Asked first, to know whether the plugin is there. A topic, because a broker without the plugin
would store the request on a queue of that name; a topic without subscribers drops it."""
MAP_JSON: Final = "jms-map-json"
WILDCARD: Final = ">"
"""Classic's wildcard for one or more trailing segments of a dotted destination name."""
QUEUE_URI: Final = "queue://"
"""How the plugin names a queue in destinationName."""
PROBE_TIMEOUT_S: Final = 5.0
_POLL_S: Final = 0.05

_NO_PLUGIN: Final = (
    "the broker did not answer a statistics request within {timeout}s: ActiveMQ Classic "
    "answers only with <statisticsBrokerPlugin/> in the <plugins> of its configuration"
)
_DROPPED: Final = (
    "the broker closed the connection instead of sending statistics: ActiveMQ Classic converts "
    "them to JSON for STOMP with XStream and Jettison, which must be on its class path (lib/"
    "optional of its distribution; Debian's activemq package leaves them out)"
)


def decode_map_json(body: bytes) -> dict[str, object]:
    """The entries of a MapMessage as Classic's jms-map-json writes it (XStream's JSON):
    {"map": {"entry": [{"string": "size", "long": 3}, {"string": ["brokerName", "b"]}, ...]}},
    one entry as an object rather than a list, and {"map": ""} for an empty map."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise TransportError(f"statistics reply is not JSON: {exc}") from exc
    holder = document.get("map") if isinstance(document, dict) else None
    if holder == "":
        return {}
    raw = holder.get("entry") if isinstance(holder, dict) else None
    entries = [raw] if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise TransportError(f"statistics reply is not a JSON map: {body[:200]!r}")
    decoded: dict[str, object] = {}
    for entry in entries:
        key, value = _entry(entry)
        decoded[key] = value
    return decoded


def _entry(entry: object) -> tuple[str, object]:
    if isinstance(entry, dict):
        name = entry.get("string")
        # A string value makes the key and the value one list: {"string": [key, value]}.
        if isinstance(name, list) and len(name) == 2 and isinstance(name[0], str):
            return name[0], name[1]
        others = [value for kind, value in entry.items() if kind != "string"]
        if isinstance(name, str) and len(others) == 1:
            return name, others[0]
    raise TransportError(f"unexpected entry in a statistics reply: {entry!r}")


def classic_queue_stats(entries: Mapping[str, object]) -> QueueStats:
    """QueueStats of the plugin's counters. Classic's size counts the messages dispatched and
    not acknowledged too (inflightCount); messages its scheduler holds are in neither, and it
    does not count them per queue."""
    size = _count(entries, "size")
    in_flight = _count(entries, "inflightCount")
    # The two counters are read one after the other while consumers work: never below zero.
    return QueueStats(waiting=max(0, size - in_flight), in_flight=in_flight, scheduled=None)


def _count(entries: Mapping[str, object], name: str) -> int:
    value = entries.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TransportError(f"statistics reply has no count {name!r}: {dict(entries)!r}")
    return value


class _Replies:
    """Statistics replies by correlation id, filled on the receiving thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._maps: dict[str, list[dict[str, object]]] = {}
        self._ended: set[str] = set()
        self._error: TransportError | None = None

    def on_message(self, generation: int, headers: Mapping[str, str], body: bytes) -> None:
        correlation = headers.get("correlation-id")
        if correlation is None:
            return
        try:
            entries = decode_map_json(body)
        except TransportError as exc:
            with self._cond:
                self._error = exc
                self._cond.notify_all()
            return
        with self._cond:
            if entries:
                self._maps.setdefault(correlation, []).append(entries)
            else:
                self._ended.add(correlation)
            self._cond.notify_all()

    def maps(self, correlation: str) -> list[dict[str, object]]:
        with self._cond:
            return list(self._maps.get(correlation, ()))

    def wait(self, done: Callable[[], bool], timeout_s: float, alive: Callable[[], bool]) -> bool:
        """Wait until done() (checked under the lock) or timeout_s; False on timeout. A lost
        connection raises QueueStatsUnavailableError, a reply that cannot be read TransportError."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._error is not None:
                    raise self._error
                if done():
                    return True
                if not alive():
                    raise QueueStatsUnavailableError(_DROPPED)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, _POLL_S))

    def has_map(self, correlation: str) -> bool:
        return correlation in self._maps

    def ended(self, correlations: set[str]) -> bool:
        return correlations <= self._ended


class ClassicStatistics:
    """Asks the statistics plugin of the Classic broker settings point at, one connection per
    call: connect, subscribe a temporary queue, check that the plugin answers, ask for every
    queue at once, read the answers, disconnect (the temporary queue goes with it)."""

    def __init__(
        self, settings: StompSettings, *, probe_timeout_s: float = PROBE_TIMEOUT_S
    ) -> None:
        self._settings = settings
        self._probe_timeout_s = min(probe_timeout_s, settings.receipt_timeout_s)

    def queue_stats(self, queues: Sequence[str]) -> dict[str, QueueStats | None]:
        names = list(dict.fromkeys(check_queue_name(q) for q in queues))
        if not names:
            return {}
        answers = self._session(names)
        return {name: self._stats_of(name, maps) for name, maps in zip(names, answers, strict=True)}

    def list_queues(self, prefixes: Sequence[str]) -> list[ListedQueue]:
        """Every queue under the prefixes (QueueLister): the plugin takes a destination wildcard,
        prefix + ">", and answers once per queue it matches (seen on Classic 5.17)."""
        wildcards = [check_queue_prefix(p) + WILDCARD for p in dict.fromkeys(prefixes)]
        if not wildcards:
            return []
        found: dict[str, ListedQueue] = {}
        for maps in self._session(wildcards):
            for entries in maps:
                destination = entries.get("destinationName")
                if not (isinstance(destination, str) and destination.startswith(QUEUE_URI)):
                    continue
                name = destination[len(QUEUE_URI) :]
                found[name] = ListedQueue(
                    name=name,
                    stats=classic_queue_stats(entries),
                    consumers=_count(entries, "consumerCount"),
                )
        return [found[name] for name in sorted(found)]

    def _session(self, destinations: list[str]) -> list[list[dict[str, object]]]:
        """The plugin's maps for each destination asked (a queue name or a wildcard), in order."""
        replies = _Replies()

        def refused(server: str | None) -> QueueStatsUnavailableError:
            return QueueStatsUnavailableError(
                f"queue statistics over STOMP need ActiveMQ Classic, not {server!r}"
            )

        flavour = BrokerFlavour.CLASSIC
        with side_connection(self._settings, replies.on_message, flavour, refused) as opened:
            connection, link = opened
            return self._ask(connection, link, replies, destinations)

    def _ask(
        self, connection: StompConnection, link: Link, replies: _Replies, destinations: list[str]
    ) -> list[list[dict[str, object]]]:
        def alive() -> bool:
            live = connection.live()
            return live is not None and live.generation == link.generation

        reply_to = f"/temp-queue/boost-stats-{uuid.uuid4().hex}"
        receipt = new_receipt()
        subscribe = {
            "destination": reply_to,
            "id": "statistics",
            "ack": "auto",
            "transformation": MAP_JSON,
            "receipt": receipt,
        }
        try:
            connection.confirm(
                link, [encode_frame("SUBSCRIBE", subscribe)], receipt, "statistics subscription"
            )
        except TransportError as exc:
            # Classic without XStream fails on the transformation header already, and drops the
            # connection rather than refusing the subscription.
            if alive():
                raise
            raise QueueStatsUnavailableError(_DROPPED) from exc
        probe = "statistics-probe"
        self._request(connection, link, [(BROKER_TOPIC, probe)], reply_to)
        if not replies.wait(lambda: replies.has_map(probe), self._probe_timeout_s, alive):
            raise QueueStatsUnavailableError(_NO_PLUGIN.format(timeout=self._probe_timeout_s))
        asked = {f"statistics-{i}": name for i, name in enumerate(destinations)}
        self._request(
            connection,
            link,
            [
                (QUEUE_PREFIX + DESTINATION_PREFIX + name + END_OF_LIST, correlation)
                for correlation, name in asked.items()
            ],
            reply_to,
        )
        timeout = self._settings.receipt_timeout_s
        if not replies.wait(lambda: replies.ended(set(asked)), timeout, alive):
            raise TransportError(
                f"the broker's statistics of {len(destinations)} queue(s) took over {timeout}s"
            )
        return [replies.maps(c) for c in asked]

    @staticmethod
    def _request(
        connection: StompConnection, link: Link, requests: list[tuple[str, str]], reply_to: str
    ) -> None:
        receipt = new_receipt()
        last = len(requests) - 1
        frames = [
            encode_frame(
                "SEND",
                {"destination": destination, "reply-to": reply_to, "correlation-id": correlation}
                | ({"receipt": receipt} if i == last else {}),
            )
            for i, (destination, correlation) in enumerate(requests)
        ]
        connection.confirm(link, frames, receipt, f"{len(frames)} statistics request(s)")

    @staticmethod
    def _stats_of(name: str, maps: list[dict[str, object]]) -> QueueStats | None:
        # Queue names have no wildcard characters, so at most this queue answers; the name is
        # checked anyway rather than trusting whichever map came.
        found = [m for m in maps if m.get("destinationName") == f"{QUEUE_URI}{name}"]
        return classic_queue_stats(found[0]) if found else None
