"""Routing at send time on a real ActiveMQ Classic: the broker started with the element that
`boost-tenancy broker-routes` prints stores each listed tenant's messages, sent by plain STOMP to
the shared queue, in tenant.<tenant>.<queue> before a runner exists; what no route matches (an
unlisted tenant, no tenant) stays on the shared queue, where the runner's TenantRouter routes or
quarantines it and counts it.
"""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import TenantId
from boost_tenancy.cli import main as cli_main
from boost_tenancy.resilience.error_store import FailureOutcome
from boost_tenancy.transports.stomp import StompSettings
from tests.conftest import recorded, wait_until
from tests.integration.send_time_support import light_runner, own_broker, read_back
from tests.integration.send_time_support import raw_send as send_to

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("starts a Classic broker configured with tenant routes"),
]

QUEUE = "cmd.routes"
LISTED = ("org-light", "org-heavy")
HEAVY_COUNT = 600
LIGHT_COUNT = 20


@pytest.fixture(scope="module")
def routed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StompSettings]:
    home = tmp_path_factory.mktemp("routed-broker")
    routes = home / "routes.xml"
    routes.write_text(broker_routes("--queue", QUEUE, "--tenant", ",".join(LISTED)))
    # No tenant routing plugin: the composite queues alone route.
    with own_broker(home, routes=routes, routed_queues=()) as (settings, _):
        yield settings


def broker_routes(*args: str) -> str:
    """What `boost-tenancy broker-routes ARGS` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["broker-routes", *args]) == 0
    return out.getvalue()


def raw_send(settings: StompSettings, messages: list[tuple[str | None, int]]) -> None:
    send_to(settings, QUEUE, messages)


def test_listed_tenants_are_stored_in_their_queues_at_send_time(
    routed_broker: StompSettings,
) -> None:
    """No runner runs: the heavy backlog and the light tenant's messages are already apart."""
    light, heavy = LISTED
    raw_send(routed_broker, [(heavy, n) for n in range(HEAVY_COUNT)])
    raw_send(routed_broker, [(light, n) for n in range(LIGHT_COUNT)])
    light_frames = read_back(routed_broker, f"tenant.{light}.{QUEUE}", LIGHT_COUNT, 10)
    assert [n for _, n in light_frames] == list(range(LIGHT_COUNT))  # in the order sent
    assert {h["tenantUUID"] for h, _ in light_frames} == {light}
    heavy_frames = read_back(routed_broker, f"tenant.{heavy}.{QUEUE}", HEAVY_COUNT, 20)
    assert sorted(n for _, n in heavy_frames) == list(range(HEAVY_COUNT))
    assert {(h["tenantUUID"], h["persistent"]) for h, _ in heavy_frames} == {(heavy, "true")}
    assert read_back(routed_broker, QUEUE, 1, timeout=1.0) == []


def test_unmatched_messages_stay_on_the_shared_queue_for_the_router(
    routed_broker: StompSettings, tmp_path: Path
) -> None:
    light, heavy = LISTED
    unlisted = f"org-new-{uuid.uuid4().hex[:8]}"
    raw_send(
        routed_broker,
        [(heavy, n) for n in range(HEAVY_COUNT)]
        + [(light, n) for n in range(LIGHT_COUNT)]
        + [(unlisted, 1), (None, -1)],
    )
    with light_runner(routed_broker, QUEUE, light, tmp_path / "errors.sqlite3", LIGHT_COUNT) as (
        processor,
        router,
        store,
    ):
        assert wait_until(lambda: router.quarantined == 1)
        # The router moved the unlisted tenant's message only: the broker routed the others.
        assert wait_until(lambda: router.routed == {TenantId(unlisted): 1}), router.routed
        (record,) = recorded(store, 1, tenant=None, outcome=FailureOutcome.QUARANTINE)
    assert record.queue == QUEUE
    assert sorted(processor.seen) == list(range(LIGHT_COUNT))
    assert len(read_back(routed_broker, f"tenant.{unlisted}.{QUEUE}", 1, 10)) == 1
    assert len(read_back(routed_broker, f"tenant.{heavy}.{QUEUE}", HEAVY_COUNT, 20)) == HEAVY_COUNT
    assert read_back(routed_broker, QUEUE, 1, timeout=1.0) == []
