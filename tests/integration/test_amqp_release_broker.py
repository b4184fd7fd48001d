"""A closed AMQP transport leaves nothing behind on a real broker either (RabbitMQ, and Artemis
in scripts/test's Artemis pass): every transport connected and closed kept about 1.6 MiB for
good, on both, until the loop let go of its pending timers (tests/unit/test_amqp_release.py has
the same against the in-process peer)."""

from __future__ import annotations

import gc
import weakref

import pytest

from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.registry import open_transport

pytestmark = pytest.mark.amqp_broker


def test_a_closed_transport_is_collected_with_its_connection_and_loop(amqp_url: str) -> None:
    engines = []
    for _ in range(3):
        transport = open_transport(amqp_url)
        assert isinstance(transport, AmqpTransport)
        transport.connect()
        engine = transport._engine  # reached into: the object proton's C side referred to
        engines.append((weakref.ref(engine), weakref.ref(engine.loop.container)))
        transport.close()
        del transport, engine
    gc.collect()
    assert [(e(), c()) for e, c in engines] == [(None, None)] * 3
