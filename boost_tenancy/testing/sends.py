"""What the modelled brokers store of a STOMP SEND: its scheduled delay, and on Artemis its text
and transaction header as Artemis keeps them, or nothing for a SEND of a stale transaction or a
duplicate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from boost_tenancy.messages import DUPLICATE_ID_PROPERTY
from boost_tenancy.testing.wire import Sent


def scheduled_delay(properties: Mapping[str, str]) -> int:
    """AMQ_SCHEDULED_DELAY in ms from a property (it goes out as a SEND header); 0 if none."""
    raw = properties.get("AMQ_SCHEDULED_DELAY")
    if raw is None or not raw.isdigit():
        return 0
    return int(raw)


def artemis_stores(
    items: Sequence[tuple[str, Sent, int]],
    transaction: str | None,
    seen_ids: set[tuple[str, str]],
) -> tuple[list[tuple[str, Sent, int]], int, int]:
    """What Artemis makes of SENDs, and how many it dropped although it confirmed them, for a
    stale transaction and as duplicates: a text body (no content-length) that is not valid UTF-8
    with its bad bytes as U+FFFD; the `transaction` header of SENDs made in the transaction
    named transaction kept as a property; a SEND outside a transaction carrying such a header
    lost (shared BROKERS.md, 2026-11-28); a SEND whose _AMQ_DUPL_ID its address has seen
    (seen_ids: the address and id of each stored one, kept by the caller) dropped."""
    header = {"transaction": transaction} if transaction is not None else {}
    stored = []
    lost = duplicates = 0
    for queue, sent, delay in items:
        if transaction is None and "transaction" in sent.message.properties:
            lost += 1
            continue
        duplicate_id = sent.message.properties.get(DUPLICATE_ID_PROPERTY)
        if duplicate_id is not None:
            if (queue, duplicate_id) in seen_ids:
                duplicates += 1
                continue
            seen_ids.add((queue, duplicate_id))
        message, body = sent.message, sent.body
        if "content-length" not in sent.body_headers:
            text = body.decode("utf-8", "replace")
            message, body = replace(message, body=text), text.encode()
        properties = {**message.properties, **header}
        message = replace(message, properties=properties)
        stored.append((queue, replace(sent, message=message, body=body), delay))
    return stored, lost, duplicates
