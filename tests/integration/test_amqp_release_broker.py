"""A closed AMQP transport leaves nothing behind on a real broker either (RabbitMQ, and Artemis
in scripts/test's Artemis pass): every transport connected and closed kept about 1.6 MiB for
good, on both, until the loop let go of its pending timers (tests/unit/test_amqp_release.py has
the same against the in-process peer)."""

from __future__ import annotations

import pytest

from tests.amqp_release import assert_closed_transports_are_collected

pytestmark = pytest.mark.amqp_broker


def test_a_closed_transport_is_collected_with_its_connection_and_loop(amqp_url: str) -> None:
    assert_closed_transports_are_collected(amqp_url)
