"""The brokers the in-process AMQP peer can behave as, and what each says about itself on the
wire: its container id, open-frame properties and capabilities, SASL mechanisms and credit."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


class PeerFlavour(enum.Enum):
    """Which broker the peer behaves as."""

    ARTEMIS = "artemis"
    RABBITMQ = "rabbitmq"


@dataclass(frozen=True, slots=True)
class _Profile:
    """What a broker says about itself on the wire."""

    container_id: str
    properties: Mapping[str, str]
    capabilities: tuple[str, ...]
    mechanisms: tuple[str, ...]
    credit: int  # granted to a client's sender link


_PROFILES: Final = {
    PeerFlavour.ARTEMIS: _Profile(
        container_id="",  # Artemis sends its node id, a UUID: one per peer
        properties={"product": "apache-activemq-artemis", "version": "2.44.0"},
        capabilities=("DELAYED_DELIVERY", "ANONYMOUS-RELAY", "SHARED-SUBS"),
        mechanisms=("PLAIN", "ANONYMOUS"),
        credit=1000,  # Artemis's amqpCredits default
    ),
    PeerFlavour.RABBITMQ: _Profile(  # RabbitMQ 3.10.8's open frame and SASL offer, as seen here
        container_id="rabbit@vm",
        properties={
            "cluster_name": "rabbit@vm",
            "copyright": "Copyright (c) 2007-2022 VMware, Inc. or its affiliates.",
            "information": "Licensed under the MPL 2.0. Website: https://rabbitmq.com",
            "platform": "Erlang/OTP 25.2.3",
            "product": "RabbitMQ",
            "version": "3.10.8",
        },
        capabilities=(),
        mechanisms=("ANONYMOUS", "PLAIN", "AMQPLAIN"),
        credit=65536,
    ),
}
