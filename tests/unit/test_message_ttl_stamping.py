"""Where the toolkit sends, each message gets its tenant's absolute expiry when a time-to-live
applies: TenantProducer (send, batch, admit, a one-tenant producer), a handler's ctx.publish
inside a ProcessorRunner, and the wiring from BOOST_MESSAGE_TTL_S (run_processor, the CLI's
publish). Read back from the in-memory broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

import boost_tenancy.application.run as app_module
import boost_tenancy.cli as cli_module
import boost_tenancy.cli.common as cli_common
from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    MessageTtl,
    ProcessorRunner,
    Routing,
    RunnerSettings,
    TenantId,
    TenantProcessor,
    TenantProducer,
)
from boost_tenancy.application.config import AppSettings
from boost_tenancy.expiry import now_ms
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.routing import Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.base import Transport
from tests.conftest import unique_queue, wait_until

A, B = TenantId("org-A"), TenantId("org-B")
SHARED = Routing(Topology.SHARED)
"""One queue per name: the tests read the queues by the names they publish to."""
TTL = MessageTtl(default_s=60).for_tenant(B, 5)


class Window:
    """The expiries a time-to-live can give between this window's opening and now."""

    def __init__(self) -> None:
        self.opened = now_ms()

    def holds(self, expiry: int | None, ttl_s: float) -> bool:
        ttl_ms = round(ttl_s * 1000)
        return expiry is not None and self.opened + ttl_ms <= expiry <= now_ms() + ttl_ms


def expiries(broker: InMemoryBroker, queue: str) -> dict[str, int | None]:
    """Each message's expiry by its tenant."""
    return {m.properties["tenantUUID"]: m.expires_at_ms for m in broker.messages(queue)}


# -- TenantProducer -------------------------------------------------------------------------------
def test_send_stamps_each_tenants_own_expiry(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    producer = TenantProducer(transport, routing=SHARED, ttl=TTL)
    window = Window()
    sent_a = producer.send(queue, A, {"n": 1})
    sent_b = producer.send(queue, "org-B", "text")
    stored = expiries(broker, queue)
    assert window.holds(stored["org-A"], 60)
    assert window.holds(stored["org-B"], 5)
    assert (sent_a.expires_at_ms, sent_b.expires_at_ms) == (stored["org-A"], stored["org-B"])


def test_without_a_ttl_or_with_none_applying_nothing_is_stamped(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    TenantProducer(transport, routing=SHARED).send(queue, A, {"n": 1})
    TenantProducer(transport, routing=SHARED, ttl=TTL.for_tenant(B, 0)).send(queue, B, "x")
    assert expiries(broker, queue) == {"org-A": None, "org-B": None}


def test_a_batch_and_an_admitted_send_are_stamped_too(
    broker: InMemoryBroker, transport: InMemoryTransport
) -> None:
    queue = unique_queue("cmd")
    producer = TenantProducer(transport, routing=SHARED, ttl=TTL)
    window = Window()
    with producer.batch() as batch:
        batch.send(queue, A, {"n": 1})
    admitted = producer.admit(queue, B, {"n": 2})
    assert window.holds(admitted.wire.expires_at_ms, 5), "stamped when admitted"
    producer.send_admitted(admitted)
    producer.for_tenant(B).send(queue + ".one", {"n": 3})
    stored = expiries(broker, queue)
    assert window.holds(stored["org-A"], 60)
    assert stored["org-B"] == admitted.wire.expires_at_ms
    assert window.holds(expiries(broker, queue + ".one")["org-B"], 5)


# -- a handler's publish --------------------------------------------------------------------------
def context(ttl: MessageTtl | None) -> HandlerContext:
    return HandlerContext(
        tenant=B,
        queue="cmd",
        message_id="m-1",
        correlation_id="c-1",
        attempt=1,
        log=structlog.get_logger("test"),
        ttl=ttl,
    )


def test_ctx_publish_stamps_the_tenants_expiry() -> None:
    window = Window()
    stamped, plain = context(TTL), context(None)
    stamped.publish("out", {"n": 1})
    plain.publish("out", {"n": 1})
    assert window.holds(stamped.outputs[0].message.expires_at_ms, 5)
    assert plain.outputs[0].message.expires_at_ms is None


class Publisher(TenantProcessor):
    """Publishes one output per input."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self.out = queue + ".out"

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.publish(self.out, {"n": message.data["n"]})


@pytest.fixture
def stop_runners() -> Iterator[list[ProcessorRunner]]:
    runners: list[ProcessorRunner] = []
    yield runners
    for runner in runners:
        assert runner.stop(grace_s=5)


def start_runner(
    runners: list[ProcessorRunner],
    broker: InMemoryBroker,
    store: ErrorStore,
    processor: TenantProcessor,
    message_ttl: MessageTtl | None,
) -> None:
    runner = ProcessorRunner(
        processor,
        InMemoryTransport(broker),
        [A],
        error_store=store,
        settings=RunnerSettings(workers=1, prefetch=5),
        routing=SHARED,
        message_ttl=message_ttl,
    )
    runners.append(runner)
    runner.start()


def test_a_runners_ttl_stamps_what_handlers_publish(
    broker: InMemoryBroker,
    transport: InMemoryTransport,
    store: ErrorStore,
    stop_runners: list[ProcessorRunner],
) -> None:
    queue = unique_queue("cmd")
    processor = Publisher(queue)
    start_runner(stop_runners, broker, store, processor, MessageTtl(default_s=120))
    window = Window()
    TenantProducer(transport, routing=SHARED).send(queue, A, {"n": 1})
    assert wait_until(lambda: broker.depth(processor.out) == 1)
    assert window.holds(expiries(broker, processor.out)["org-A"], 120)


def test_an_output_is_a_new_message_not_a_copy_of_the_inputs_expiry(
    broker: InMemoryBroker,
    transport: InMemoryTransport,
    store: ErrorStore,
    stop_runners: list[ProcessorRunner],
) -> None:
    queue = unique_queue("cmd")
    processor = Publisher(queue)
    start_runner(stop_runners, broker, store, processor, None)
    TenantProducer(transport, routing=SHARED, ttl=TTL).send(queue, A, {"n": 1})
    assert wait_until(lambda: broker.depth(processor.out) == 1)
    assert expiries(broker, processor.out) == {"org-A": None}


# -- wiring from the settings ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "expected"),
    [({"BOOST_MESSAGE_TTL_S": "30"}, MessageTtl(default_s=30)), ({}, None)],
)
def test_run_processor_hands_the_settings_ttl_to_the_runner(
    monkeypatch: pytest.MonkeyPatch,
    store: ErrorStore,
    env: dict[str, str],
    expected: MessageTtl | None,
) -> None:
    seen: dict[str, Any] = {}

    class FakeRunner:
        health = None  # what the metrics server would watch; these settings serve none

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.update(kwargs)

        def run(self) -> int:
            return 0

    monkeypatch.setattr(app_module, "ProcessorRunner", FakeRunner)
    settings = AppSettings.from_env({**env, "BOOST_FAIRNESS": "off"})
    assert app_module.run_processor(Publisher("cmd"), [A], settings, store=store) == 0
    assert seen["message_ttl"] == expected


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """main() configures structlog; later tests capture logs with the configuration they expect."""
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("restore_logging")
def test_the_cli_publish_stamps_boost_message_ttl_s(
    monkeypatch: pytest.MonkeyPatch, broker: InMemoryBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    def open_memory(settings: AppSettings, env: Any = None) -> Transport:
        return InMemoryTransport(broker)

    monkeypatch.setattr(cli_common, "open_broker", open_memory)
    monkeypatch.setenv("BOOST_MESSAGE_TTL_S", "45")
    monkeypatch.setenv("BOOST_ROUTING", "shared")
    queue = unique_queue("cmd")
    window = Window()
    argv = ["publish", "--queue", queue, "--tenant", "org-A", "--text", "hello"]
    assert cli_module.main(argv) == 0
    [message] = broker.messages(queue)
    assert window.holds(message.expires_at_ms, 45)
    assert json.loads(capsys.readouterr().out)["broker_queue"] == queue
