"""The toolkit against ActiveMQ Artemis, the production broker.

Runs against the broker under test when that is Artemis, else against a container of its own
where a Docker engine answers; elsewhere (the project's development and CI machines have none)
it skips with the reason, also under CI=true, because no engine can be installed there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    RunnerSettings,
    TenantProcessor,
    TenantProducer,
    open_error_store,
)
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.selectors import tenant_selector
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.artemis_container import ArtemisContainer, docker_engine_missing
from tests.broker_target import BrokerTarget, stomp_env
from tests.conftest import Inbox, unique_queue, wait_until

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def artemis(broker_target: BrokerTarget, request: pytest.FixtureRequest) -> Iterator[StompSettings]:
    """The broker under test when it is Artemis (BOOST_TEST_BROKER_FLAVOUR=artemis or
    --artemis-container); otherwise a container of this module's own, where Docker runs."""
    if broker_target.flavour == "artemis":
        yield request.getfixturevalue("stomp_settings")
        return
    reason = docker_engine_missing()
    if reason is not None:
        pytest.skip(f"Artemis tests need a Docker engine: {reason}")
    container = ArtemisContainer()
    target = container.start()
    try:
        yield target.stomp_settings()
    finally:
        container.stop()


class FailingOrEcho(TenantProcessor):
    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.attempts: list[int] = []
        self.lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self.lock:
            self.attempts.append(ctx.attempt)
        if message.data.get("fail"):
            raise RuntimeError("fails on Artemis too")
        ctx.publish(self.queues[0] + ".out", {"ok": True})


def test_isolation_retries_and_dead_letters_on_artemis(
    artemis: StompSettings, tmp_path: Path
) -> None:
    queue = unique_queue("cmd")
    transport = StompTransport(artemis)
    transport.connect()
    assert not transport.is_classic, f"expected Artemis, got {transport.server!r}"
    processor = FailingOrEcho(queue)
    runner = ProcessorRunner(
        processor,
        StompTransport(artemis),
        ["org-A"],
        error_store=open_error_store(str(tmp_path / "errors.sqlite3")),
        settings=RunnerSettings(
            dispatch=DispatchSettings(retry=RetryPolicy(max_attempts=3, base_delay_ms=100))
        ),
    )
    runner.start()
    out, dlq = Inbox(), Inbox()
    # Where the default routing puts org-A's output and dead letters (its own queues).
    own_out = DEFAULT_ROUTING.physical(queue + ".out", "org-A")
    own_dlq = dead_letter_queue(DEFAULT_ROUTING.physical(queue, "org-A"))
    transport.subscribe(own_out, selector=None, prefetch=10, on_delivery=out)
    transport.subscribe(own_dlq, selector=tenant_selector("org-A"), prefetch=10, on_delivery=dlq)
    producer = TenantProducer(transport)
    producer.send(queue, "org-A", {"n": 1})
    producer.send(queue, "org-B", {"n": 2})
    producer.send(queue, "org-A", {"fail": True})
    try:
        assert wait_until(lambda: len(dlq) == 1 and len(out) == 1, timeout=30)
    finally:
        runner.stop(grace_s=5)
        transport.close()
    assert sorted(processor.attempts) == [1, 1, 2, 3]
    assert out.items[0].properties["tenantUUID"] == "org-A"
    assert dlq.items[0].properties["boostDeadLetterReason"] == "exhausted"


def test_document_pipeline_on_artemis_for_two_tenants(
    artemis: StompSettings, tmp_path: Path
) -> None:
    """Every pipeline service as its own process against Artemis; two tenants' invoices."""
    from services.demo.stack import FINAL_STATES, PROCESSORS, Stack, environment

    env = environment()
    env.update(stomp_env(artemis))
    stack = Stack(tmp_path / "stack", ("org-a", "org-b"), env)
    samples = Path(__file__).resolve().parents[2] / "services" / "samples"
    try:
        stack.start(*PROCESSORS, "integrations")
        owned = {
            stack.upload(tenant, samples / "invoice.pdf", "application/pdf"): tenant
            for tenant in ("org-a", "org-b")
        }
        assert wait_until(
            lambda: all(stack.status(t, d).get("state") in FINAL_STATES for d, t in owned.items()),
            timeout=120,
            interval=0.5,
        )
        for document, tenant in owned.items():
            status = stack.status(tenant, document)
            assert (status["state"], status["documentType"]) == ("ready", "invoice")
            other = "org-b" if tenant == "org-a" else "org-a"
            assert stack.call("GET", f"/documents/{document}", stack.token(other))[0] == 404
    finally:
        stack.stop()
