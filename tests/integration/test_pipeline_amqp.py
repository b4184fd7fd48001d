"""The sample document pipeline over AMQP 1.0, by changing one setting: `python -m services.demo`
(every service its own process, three tenants, the isolation checks over HTTP) with
BOOST_BROKER_URL pointing at the AMQP broker instead of the STOMP one.

RabbitMQ applies no selectors, so there the queues are per tenant (BOOST_ROUTING=per_tenant,
the one other setting docs/configuration.md names for it); a broker that applies them (Artemis)
runs with the default routing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from boost_tenancy.transports.registry import open_transport

pytestmark = [pytest.mark.amqp_broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def applies_selectors(url: str) -> bool:
    transport = open_transport(url)
    transport.connect()
    try:
        return transport.capabilities.server_side_selectors
    finally:
        transport.close()


def test_the_demo_pipeline_runs_over_amqp(amqp_url: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "BOOST_BROKER_URL": amqp_url,
        "PYTHONPATH": str(ROOT),
        "BOOST_LOG_LEVEL": "DEBUG",  # so that each service logs the AMQP connection it made
    }
    if not applies_selectors(amqp_url):
        env["BOOST_ROUTING"] = "per_tenant"
    # The demo keeps its stores and logs under var/ of its working directory.
    done = subprocess.run(
        [sys.executable, "-m", "services.demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    shown = f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown
    assert "Demo passed: every document ended as expected" in done.stdout, shown
    assert "HTTP 404" in done.stdout, "the isolation checks ran"
    logs = sorted((tmp_path / "var" / "demo").glob("*/logs/*.log"))
    assert len(logs) >= 5, logs
    for log in logs:
        assert "amqp_connected" in log.read_text(), f"{log.name}: no AMQP connection logged"
