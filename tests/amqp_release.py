"""Whether closed AMQP transports are collected (tests/unit/test_amqp_release.py against the
in-process peer, tests/integration/test_amqp_release_broker.py against the real broker)."""

from __future__ import annotations

import gc
import weakref

from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.registry import open_transport


def assert_closed_transports_are_collected(url: str, count: int = 3) -> None:
    """Connects, sends an (empty) batch and closes count transports to url; none of their
    connections or proton containers may outlive a garbage collection."""
    engines = []
    for _ in range(count):
        transport = open_transport(url)
        assert isinstance(transport, AmqpTransport)
        transport.connect()
        transport.send_batch([], atomic=False)
        engine = transport._engine  # reached into: the object proton's C side referred to
        engines.append((weakref.ref(engine), weakref.ref(engine.loop.container)))
        transport.close()
        del transport, engine
    gc.collect()
    assert [(e(), c()) for e, c in engines] == [(None, None)] * count
