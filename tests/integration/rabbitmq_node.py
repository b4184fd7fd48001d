"""The local RabbitMQ node as a broker a test may restart or kill, like a broker of its own: a
machine service (scripts/rabbitmq), so only the tests marked local_broker touch it, and each
waits for an AMQP 1.0 handshake before it goes on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.amqp.flavour import AmqpFlavour
from boost_tenancy.transports.registry import open_transport
from tests.broker_target import amqp_handshake
from tests.conftest import wait_until

RESTART_WAIT_S = 120.0


def _alive(pids: list[str]) -> bool:
    for pid in pids:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue
        return True
    return False


def _ctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, timeout=120, capture_output=True)


class LocalRabbitMQ:
    """Restart (the application stopped and started, the node kept), kill -9 of every process
    of the node, and start; each returns once url answers an AMQP 1.0 handshake."""

    def __init__(self, url: str) -> None:
        probe = open_transport(url)
        probe.connect()
        flavour = probe.flavour if isinstance(probe, AmqpTransport) else None
        probe.close()
        if flavour is not AmqpFlavour.RABBITMQ:
            pytest.skip("restarts the local RabbitMQ; the AMQP broker under test is another")
        if shutil.which("rabbitmqctl") is None:
            pytest.skip("rabbitmqctl is not on PATH: this RabbitMQ cannot be restarted here")
        self.url = url

    def restart(self) -> None:
        _ctl("stop_app")
        _ctl("start_app")
        self.wait_until_back()

    def kill(self) -> None:
        """SIGKILL every process of the node, as a crash would."""
        pids = subprocess.run(
            ["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True, check=False
        ).stdout.split()
        assert pids, "no RabbitMQ node process found"
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        # Started again before the old node is gone, the new one finds it and exits.
        gone = wait_until(lambda: not _alive(pids), timeout=30, interval=0.2)
        assert gone, f"RabbitMQ's processes {pids} outlived SIGKILL for 30 s"

    def start(self) -> None:
        subprocess.run(
            ["rabbitmq-server", "-detached"], check=True, timeout=60, capture_output=True
        )
        self.wait_until_back()

    def wait_until_back(self) -> None:
        back = wait_until(
            lambda: amqp_handshake(self.url, 3.0) is None, timeout=RESTART_WAIT_S, interval=1.0
        )
        assert back, f"RabbitMQ did not answer within {RESTART_WAIT_S:.0f}s"
