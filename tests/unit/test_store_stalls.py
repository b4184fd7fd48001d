"""A PostgreSQL that accepts connections and never answers bounds every store's callers.

The tier, policy and usage stores were opened with no timeout at all: against such a server
their callers (the fairness gate's refresh threads, a runner starting, the gate's close) waited
for good. Every backend now bounds its waits by default (sql_timeouts.SqlTimeouts).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.fairness.tiers import open_tier_store
from boost_tenancy.fairness.usage import open_usage_store
from boost_tenancy.quotas.policy_store import open_policy_store

pytest.importorskip("psycopg")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A DSN of a server that takes each connection and never says a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    yield f"postgresql://user:pw@127.0.0.1:{port}/db"
    stop.set()
    thread.join(5)
    for connection in held:
        connection.close()
    listener.close()


@pytest.mark.parametrize(
    "opener",
    [open_tier_store, open_policy_store, open_usage_store],
    ids=["tiers", "policies", "usage"],
)
def test_opening_a_store_on_a_silent_server_fails_in_bounded_time(
    silent_server: str, opener: Callable[[str], object]
) -> None:
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            opener(silent_server)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=open_it, daemon=True)
    thread.start()
    thread.join(30)  # libpq's connect_timeout of 5 s, for each attempt
    assert outcome, "still waiting on a server that never answers, 30 s on"
    assert isinstance(outcome[0], BoostTenancyError), outcome[0]
