"""An AMQP send whose outcome comes just as its caller's wait for it ends: the outcome stands, and
a send the broker accepted is not reported unconfirmed (for the caller to send it again)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pytest

from boost_tenancy.messages import WireMessage
from boost_tenancy.testing.amqp_peer import AmqpPeer
from boost_tenancy.transports import registry
from boost_tenancy.transports.amqp import transport as amqp_transport
from boost_tenancy.transports.base import Transport


class LateFuture(Future[Any]):
    """A future whose first timed wait sees its outcome come just after the deadline: it waits
    for the outcome, then reports the timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = False

    def result(self, timeout: float | None = None) -> Any:
        if timeout and not self.waited:
            self.waited = True
            self.exception(30)  # the outcome, whichever it is, has come
            raise FutureTimeout
        return super().result(timeout)


@pytest.fixture
def transport() -> Iterator[Transport]:
    with AmqpPeer() as peer:
        opened = registry.open_transport(f"amqp://127.0.0.1:{peer.port}")
        opened.connect()
        yield opened
        opened.close()


def test_a_send_confirmed_as_its_wait_ends_is_confirmed(
    transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(amqp_transport, "Future", LateFuture)
    transport.send("tenant.org-a.deadline", WireMessage(body="once", properties={}))
