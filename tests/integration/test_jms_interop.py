"""Interoperability with the BOOST Java services through the toolkit's own API.

The peer is the real ActiveMQ JMS client (tests/jms/JmsPeer.java) over OpenWire; the toolkit
talks STOMP to the same broker. A Java producer sends to the shared queue, which the runners route
(the default topology); a queue a Java service consumes is configured shared (docs/interop.md).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from boost_tenancy import (
    DispatchSettings,
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RetryPolicy,
    Routing,
    RunnerSettings,
    TenantProcessor,
    TenantProducer,
    open_error_store,
)
from boost_tenancy.resilience.dead_letter import dead_letter_queue
from boost_tenancy.routing import DEFAULT_ROUTING, Topology
from boost_tenancy.transports.stomp import StompSettings, StompTransport
from tests.conftest import unique_queue, wait_until
from tests.jms.peer import JmsPeer

pytestmark = [pytest.mark.broker, pytest.mark.java]


class Replier(TenantProcessor):
    def __init__(self, queue: str, *, fail: bool = False) -> None:
        self.queues = (queue,)
        self.fail = fail
        self.seen: list[tuple[str, Any, str, int]] = []
        self.lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        with self.lock:
            self.seen.append((ctx.tenant.value, message.data, ctx.message_id, ctx.attempt))
        if self.fail:
            raise RuntimeError("extraction backend unavailable")
        ctx.publish(self.queues[0] + ".reply", {"documentUUID": message.data["documentUUID"]})


def run(
    processor: TenantProcessor,
    settings: StompSettings,
    tenant: str,
    tmp: Path,
    routing: Routing = DEFAULT_ROUTING,
) -> ProcessorRunner:
    runner = ProcessorRunner(
        processor,
        StompTransport(settings),
        [tenant],
        error_store=open_error_store(str(tmp / f"errors-{tenant}.sqlite3")),
        settings=RunnerSettings(
            dispatch=DispatchSettings(retry=RetryPolicy(max_attempts=2, base_delay_ms=50))
        ),
        routing=routing,
    )
    runner.start()
    return runner


def test_java_consumer_gets_a_text_message_with_the_tenant_property(
    stomp_settings: StompSettings, jms_peer: JmsPeer, openwire_url: str
) -> None:
    queue = unique_queue("cmd.document.process")
    transport = StompTransport(stomp_settings)
    transport.connect()
    try:
        # A queue a Java service consumes with its selector stays shared.
        java_consumes = Routing(overrides={queue: Topology.SHARED})
        sent = TenantProducer(transport, routing=java_consumes).send(
            queue, "org-123", {"documentUUID": "d-1", "note": "Zürich"}
        )
    finally:
        transport.close()
    [received] = jms_peer.receive(
        openwire_url, queue, selector="tenantUUID = 'org-123'", count=1, timeout_ms=10_000
    )
    assert received["class"] == "TextMessage"
    assert json.loads(received["text"]) == {
        "documentUUID": "d-1",
        "note": "Zürich",
        "tenantUUID": "org-123",
    }
    assert received["tenantUUID"] == "org-123"
    assert received["deliveryMode"] == 2, "persistent by default"
    assert received["correlationId"] == sent.message_id
    assert received["properties"]["boostMessageId"] == sent.message_id


def test_java_producer_reaches_only_the_right_tenants_processor_and_gets_a_reply(
    stomp_settings: StompSettings, jms_peer: JmsPeer, openwire_url: str, tmp_path: Path
) -> None:
    queue = unique_queue("cmd.document.process")
    mine, other = Replier(queue), Replier(queue)
    # The command queue is routed (the default); the Java service consumes the replies: shared.
    routing = Routing(overrides={queue + ".reply": Topology.SHARED})
    runners = [
        run(mine, stomp_settings, "org-B", tmp_path, routing),
        run(other, stomp_settings, "org-A", tmp_path, routing),
    ]
    try:
        body = json.dumps({"documentUUID": "d-2", "organizationId": "org-B"})
        jms_peer.send(openwire_url, queue, "org-B", body)
        assert wait_until(lambda: len(mine.seen) == 1, timeout=15)
        replies = jms_peer.receive(
            openwire_url, queue + ".reply", selector="tenantUUID = 'org-B'", timeout_ms=10_000
        )
    finally:
        for runner in runners:
            runner.stop(grace_s=5)
    assert other.seen == []
    tenant, data, message_id, attempt = mine.seen[0]
    assert (tenant, data["documentUUID"], attempt) == ("org-B", "d-2", 1)
    assert message_id, "a foreign message gets a stable toolkit id"
    [reply] = replies
    assert reply["class"] == "TextMessage"
    assert reply["tenantUUID"] == "org-B"
    assert json.loads(reply["text"]) == {"documentUUID": "d-2", "tenantUUID": "org-B"}


def test_java_message_that_keeps_failing_ends_in_the_dlq_readable_by_java(
    stomp_settings: StompSettings, jms_peer: JmsPeer, openwire_url: str, tmp_path: Path
) -> None:
    queue = unique_queue("cmd.document.extractText")
    routed = DEFAULT_ROUTING.physical(queue, "org-C")
    failing = Replier(queue, fail=True)
    runner = run(failing, stomp_settings, "org-C", tmp_path)
    try:
        jms_peer.send(openwire_url, queue, "org-C", json.dumps({"documentUUID": "d-3"}))
        # Routed: the message was handled, and dead-lettered, on the tenant's own queue.
        dead = jms_peer.receive(
            openwire_url,
            dead_letter_queue(routed),
            selector="tenantUUID = 'org-C'",
            timeout_ms=15_000,
        )
    finally:
        runner.stop(grace_s=5)
    assert [seen[3] for seen in failing.seen] == [1, 2]
    assert len({seen[2] for seen in failing.seen}) == 1, "the message id survives the retry"
    [letter] = dead
    assert letter["class"] == "TextMessage"
    assert json.loads(letter["text"]) == {"documentUUID": "d-3"}
    assert letter["properties"]["boostDeadLetterReason"] == "exhausted"
    assert letter["properties"]["boostOriginalQueue"] == routed
    assert "extraction backend unavailable" in letter["properties"]["boostError"]
