"""What a STOMP broker of each flavour does with frames, as measured on ActiveMQ Classic 5.17 and
Artemis 2.44: the MESSAGE headers it delivers and how it reads a SUBSCRIBE's flow control.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from boost_tenancy.errors import ConfigError
from boost_tenancy.messages import FRAME_LEVEL_HEADERS, WireMessage, wire_body
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.frames import QUEUE_PREFIX, body_headers, header_value

MODELLED: Final = (BrokerFlavour.CLASSIC, BrokerFlavour.ARTEMIS)

CLASSIC_DEFAULT_PREFETCH: Final = 1000
"""Classic's queue prefetch when a SUBSCRIBE names none."""
ARTEMIS_DEFAULT_WINDOW: Final = 10_240
"""Artemis's consumer window, in bytes, when a SUBSCRIBE names none (client acknowledgement)."""


def check_modelled(flavour: BrokerFlavour) -> BrokerFlavour:
    if flavour not in MODELLED:
        raise ConfigError(f"the in-memory broker models {MODELLED}, not {flavour}")
    return flavour


@dataclass(frozen=True, slots=True)
class Sent:
    """A message as a SEND carried it: the wire-safe message, its body bytes and the headers
    that say what the body is."""

    message: WireMessage
    body: bytes
    body_headers: Mapping[str, str]

    @property
    def size(self) -> int:
        """About what a broker counts against a consumer window: body plus properties."""
        props = self.message.properties
        return len(self.body) + sum(len(k.encode()) + len(v.encode()) for k, v in props.items())


def as_sent(message: WireMessage, *, jms: bool = False) -> Sent:
    """The message as it reaches the broker. By default as the STOMP transport sends it (headers
    made wire-safe, a text body with a text content-type; a body the wire cannot carry raises
    MessageEncodeError). jms=True: as a Java JMS producer sends it, a TextMessage (str) or a
    BytesMessage (bytes) with no content-type."""
    body = wire_body(message.body)
    correlation = message.correlation_id
    safe = WireMessage(
        body=message.body,
        properties={
            header_value(k): header_value(v)
            for k, v in message.properties.items()
            if k not in FRAME_LEVEL_HEADERS
        },
        correlation_id=None if correlation is None else header_value(correlation),
        persistent=message.persistent,
        expires_at_ms=message.expires_at_ms,
    )
    if jms:
        headers = {} if isinstance(message.body, str) else {"content-length": str(len(body))}
    else:
        headers = body_headers(message.body)
    return Sent(safe, body, headers)


@dataclass(frozen=True, slots=True)
class FlowControl:
    """How many unacknowledged messages a subscription may hold: a count, or bytes (None:
    no limit, Artemis consumer-window-size -1)."""

    messages: int | None = None
    window_bytes: int | None = None

    def has_room(self, in_flight: int, in_flight_bytes: int) -> bool:
        """Room for one more message; a subscription holding nothing always has room."""
        if self.messages is not None:
            return in_flight < self.messages
        if self.window_bytes is not None:
            return in_flight_bytes < self.window_bytes
        return True


def flow_control(flavour: BrokerFlavour, headers: Mapping[str, str]) -> FlowControl:
    """What a SUBSCRIBE's headers mean to the broker.

    Classic counts activemq.prefetchSize in messages. Artemis takes consumer-window-size, else
    activemq.prefetchSize, in bytes: measured, activemq.prefetchSize 10 let 1 of 20 through.
    """
    if flavour is BrokerFlavour.CLASSIC:
        prefetch = _int(headers, "activemq.prefetchSize", CLASSIC_DEFAULT_PREFETCH)
        return FlowControl(messages=max(1, prefetch))
    raw = headers.get("consumer-window-size", headers.get("activemq.prefetchSize"))
    window = ARTEMIS_DEFAULT_WINDOW if raw is None else int(raw)
    if window < 0:
        return FlowControl()
    return FlowControl(window_bytes=max(1, window))


def _int(headers: Mapping[str, str], name: str, default: int) -> int:
    raw = headers.get(name)
    return default if raw is None else int(raw)


class MessageIds:
    """message-id and ack values in each broker's style: Artemis's pair of consumer and message
    numbers, Classic's message id and a separate ack per delivery."""

    def __init__(self, flavour: BrokerFlavour) -> None:
        self._flavour = flavour
        self._deliveries = itertools.count(87_061)

    def next(self, seq: int, consumer: int) -> tuple[str, str]:
        """(message-id, ack) of the next delivery of message seq to the consumer numbered so."""
        delivery = next(self._deliveries)
        if self._flavour is BrokerFlavour.ARTEMIS:
            # Artemis 2.44 sends '<consumer id>,<message id>' as both (87061,87067); 2.19 sent
            # plain numbers. The consumer id is new for each subscription.
            pair = f"{consumer},{seq}"
            return pair, pair
        # Classic's ack names the delivery, not the message.
        return f"ID:memory-broker-1:1:1:1:{seq}", f"ID:memory-broker-2:{delivery}"


def message_headers(
    flavour: BrokerFlavour,
    sent: Sent,
    *,
    queue: str,
    subscription_id: str,
    ids: tuple[str, str],
    redelivered: bool,
) -> dict[str, str]:
    """The headers of the MESSAGE frame the broker delivers for sent.

    Both brokers turn custom SEND headers into properties and return them, and both return the
    SEND's content-type. Classic adds content-length only to a BytesMessage (a SEND that had
    one); Artemis adds it to every MESSAGE, text or bytes. Both send `expires` on every MESSAGE:
    the absolute expiry, 0 for none (seen on Classic 5.17; Artemis's StompUtils).
    """
    headers = dict(sent.message.properties)
    headers.update(sent.body_headers)
    if flavour is BrokerFlavour.ARTEMIS:
        headers["content-length"] = str(len(sent.body))
    headers["destination"] = QUEUE_PREFIX + queue
    headers["subscription"] = subscription_id
    headers["message-id"], headers["ack"] = ids
    if sent.message.persistent:
        headers["persistent"] = "true"
    if sent.message.correlation_id is not None:
        headers["correlation-id"] = sent.message.correlation_id
    if redelivered:
        headers["redelivered"] = "true"
    headers["expires"] = str(sent.message.expires_at_ms or 0)
    return headers


def diverted_copy(sent: Sent, *, address: str, divert: str, message_id: str) -> Sent:
    """The copy an Artemis divert routes to its forwarding address (DivertImpl.route: a new
    message referencing the original), its properties, body and expiry the original's."""
    return _artemis_copy(sent, address=address, queue=divert, message_id=message_id, expires=True)


def broker_dead_letter(sent: Sent, *, queue: str, message_id: str) -> Sent:
    """The copy Artemis moves to its dead-letter address after max-delivery-attempts; without
    an expiry, as Artemis resets it on every copy it moves (QueueImpl.makeCopy)."""
    return _artemis_copy(sent, address=queue, queue=queue, message_id=message_id, expires=False)


ORIGINAL_DESTINATION: Final = "original-destination"
"""The header Classic adds to a message it stored elsewhere than where it was sent: the
destination it was sent to (an expired message in ActiveMQ.DLQ, a tenant's routed message)."""


def readdressed(sent: Sent, queue: str) -> Sent:
    """The message Classic's tenant routing plugin stores in a tenant's queue: itself, with the
    queue it was sent to as original-destination unless it carries one already."""
    properties = sent.message.properties
    if ORIGINAL_DESTINATION in properties:
        return sent
    message = replace(
        sent.message, properties={**properties, ORIGINAL_DESTINATION: QUEUE_PREFIX + queue}
    )
    return Sent(message, sent.body, sent.body_headers)


def _artemis_copy(sent: Sent, *, address: str, queue: str, message_id: str, expires: bool) -> Sent:
    """A copy Artemis makes of a message (Message.referenceOriginalMessage): the original's
    address, queue and id as _AMQ_ORIG_* properties."""
    properties = {
        **sent.message.properties,
        "_AMQ_ORIG_QUEUE": queue,
        "_AMQ_ORIG_ADDRESS": address,
        "_AMQ_ORIG_MESSAGE_ID": message_id,
    }
    message = WireMessage(
        body=sent.message.body,
        properties=properties,
        correlation_id=sent.message.correlation_id,
        persistent=sent.message.persistent,
        expires_at_ms=sent.message.expires_at_ms if expires else None,
    )
    return Sent(message, sent.body, sent.body_headers)
