"""A RabbitMQ outage in the middle of a stream of persistent messages loses none of them: the
local RabbitMQ is restarted (its application stopped and started) or killed (-9) and started
again while a producer and a ProcessorRunner work over AMQP 1.0 for two tenants. Both reconnect
by themselves; every confirmed message is handled. It holds only because the queues the
transport makes there are durable (the transport contract reads their flags back): before, a restart
dropped every queue and what it held."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from boost_tenancy import ProcessorRunner, RunnerSettings
from boost_tenancy.resilience.error_store import SQLiteErrorStore
from boost_tenancy.transports.registry import open_transport
from tests.conftest import unique_queue, wait_until
from tests.integration.rabbitmq_node import LocalRabbitMQ
from tests.integration.test_broker_restart import (
    OUTAGE_AFTER,
    TENANTS,
    TOTAL,
    IdRecorder,
    SteadyProducer,
)

pytestmark = [
    pytest.mark.amqp_broker,
    pytest.mark.slow,
    pytest.mark.local_broker("restarts and kills the local RabbitMQ"),
]


def _restart_app(node: LocalRabbitMQ) -> None:
    node.restart()


def _kill_and_start(node: LocalRabbitMQ) -> None:
    node.kill()
    node.start()


@pytest.mark.parametrize(
    "outage",
    [pytest.param(_restart_app, id="clean-restart"), pytest.param(_kill_and_start, id="kill-9")],
)
def test_rabbitmq_outage_mid_stream_loses_no_confirmed_message(
    amqp_url: str,
    tmp_path: Path,
    outage: Callable[[LocalRabbitMQ], None],
    figures: Callable[[str], None],
) -> None:
    node = LocalRabbitMQ(amqp_url)
    queue = unique_queue("rabbit.restart")
    processor = IdRecorder(queue)
    runner_transport = open_transport(amqp_url)
    store = SQLiteErrorStore(tmp_path / "errors.sqlite3")
    runner = ProcessorRunner(
        processor,
        runner_transport,
        TENANTS,
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10, shutdown_grace_s=5),
    )
    producer = SteadyProducer(lambda: open_transport(amqp_url), queue)
    runner.start()
    try:
        producer.start()
        assert wait_until(lambda: producer.confirmed() >= OUTAGE_AFTER, timeout=60)
        backlog = producer.confirmed() - len(processor.snapshot())
        began = time.monotonic()
        outage(node)
        outage_s = time.monotonic() - began
        producer.join(180)
        assert not producer.is_alive(), f"only {producer.confirmed()} of {TOTAL} confirmed"
        assert producer.failure is None, f"the producer gave up: {producer.failure!r}"
        expected = set(producer.sent)
        assert len(expected) == TOTAL
        all_handled = wait_until(lambda: expected <= set(processor.snapshot()), timeout=120)
        missing = expected - set(processor.snapshot())
        assert all_handled, f"{len(missing)} of {TOTAL} confirmed messages never handled"
    finally:
        runner.stop(grace_s=5)
        store.close()
    handled: Counter[str] = processor.snapshot()
    assert set(handled) == expected
    assert processor.wrong_tenant == []
    extra = sum(n - 1 for n in handled.values())
    figures(
        f"rabbitmq outage {outage_s:.1f}s with {backlog} confirmed but not yet handled: "
        f"{TOTAL} confirmed, 0 lost, {producer.resends} re-sends, {extra} extra handlings"
    )
