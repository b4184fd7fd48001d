"""What routing at send time costs the broker on Artemis, with 1, 100 and 1,000 tenants: the
project's tenant plugin (one divert per shared queue, its transformer picks the tenant's queue)
against the runners' diverts (one exclusive divert with a tenantUUID filter per tenant).

One Artemis 2.44 of its own runs both: the plugin lists one shared queue per tenant count, and the
diverts are made on another shared queue per tenant count, for every tenant, as runners make
them. Each measurement sends the same messages, round robin over the tenants, over one STOMP
connection (persistent, a receipt on the last: the broker has stored them all when it comes),
and reads the broker's own CPU time (/proc/<pid>/stat) before and after. Every message is
checked in its tenant's queue afterwards; an untimed warm-up first makes every tenant's queue
(the plugin makes a tenant's queue on its first message) and warms both paths. Figures are
medians over the rounds; the ratios (plugin over diverts) are taken within each round.

    .venv/bin/python benchmarks/bench_artemis_routing.py [--tenants 1,100,1000]
                                                         [--messages 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import stomp

from boost_tenancy import TenantId
from boost_tenancy.transports.artemis_management import ManagedRoutes
from boost_tenancy.transports.base import SendRoute, send_route_installer
from boost_tenancy.transports.stomp import StompSettings, StompTransport

sys.path.append(str(Path(__file__).resolve().parents[1]))  # devtools: the checkout's, last
from devtools.artemis_plugin import plugin_xml
from devtools.local_artemis import HOST, PASSWORD, USER, ArtemisSettings, LocalArtemis

OFFSET = 1500
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def broker_cpu_s(pid: int) -> float:
    """The broker process's user and system CPU time so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass(frozen=True)
class Figure:
    rate: float
    """Messages per second into the shared address, stored."""
    cpu_us: float
    """Broker CPU time per message, microseconds."""


def send_round_robin(port: int, queue: str, tenants: Sequence[str], count: int) -> float:
    """Send count messages to queue over one connection; seconds until the broker confirmed
    the last (it handles a connection's frames in order)."""
    done = threading.Event()
    errors: list[str] = []

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            done.set()

        def on_error(self, frame: stomp.utils.Frame) -> None:
            errors.append(frame.headers.get("message", ""))
            done.set()

    connection = stomp.Connection12([(HOST, port)], heartbeats=(0, 0))
    connection.set_listener("", Listener())
    connection.connect(USER, PASSWORD, wait=True)
    body = '{"n": 0, "payload": "' + "x" * 200 + '"}'
    started = time.perf_counter()
    for n in range(count):
        headers = {"persistent": "true", "tenantUUID": tenants[n % len(tenants)]}
        if n == count - 1:
            headers["receipt"] = "last"
        connection.send(f"/queue/{queue}", body=body, headers=headers)
    if not done.wait(300) or errors:
        raise RuntimeError(f"the broker did not confirm the sends to {queue}: {errors[:1]}")
    elapsed = time.perf_counter() - started
    connection.disconnect()
    return elapsed


def stored(transport: StompTransport, queue: str, tenants: Sequence[str]) -> int:
    counts = transport.queue_stats([f"tenant.{t}.{queue}" for t in tenants])
    return sum(stats.waiting for stats in counts.values() if stats is not None)


def measure(
    broker: LocalArtemis, transport: StompTransport, queue: str, tenants: Sequence[str], count: int
) -> Figure:
    pid = broker.running_pid()
    assert pid is not None
    already = stored(transport, queue, tenants)
    before = broker_cpu_s(pid)
    elapsed = send_round_robin(broker.settings.stomp_port, queue, tenants, count)
    cpu = broker_cpu_s(pid) - before
    landed = stored(transport, queue, tenants) - already
    if landed != count:
        raise RuntimeError(f"{queue}: {landed} of {count} messages in the tenants' queues")
    return Figure(rate=count / elapsed, cpu_us=cpu / count * 1e6)


HEADER = (
    f"\n{'tenants':>8} {'round':>6} {'plugin msg/s':>13} {'diverts msg/s':>14} "
    f"{'rate ratio':>10} {'plugin CPU µs':>14} {'diverts CPU µs':>15} {'CPU ratio':>9}"
)


def row(tenants: str, round_no: str, plugin: Figure, diverts: Figure) -> str:
    return (
        f"{tenants:>8} {round_no:>6} {plugin.rate:>13.0f} {diverts.rate:>14.0f} "
        f"{plugin.rate / diverts.rate:>9.2f}x {plugin.cpu_us:>14.1f} {diverts.cpu_us:>15.1f} "
        f"{plugin.cpu_us / diverts.cpu_us:>8.2f}x"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", default="1,100,1000")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.tenants.split(",")]
    run = uuid.uuid4().hex[:6]
    plugin_queues = {n: f"bench.plugin{n}.{run}" for n in counts}
    divert_queues = {n: f"bench.diverts{n}.{run}" for n in counts}
    tenant_ids = {n: [f"t{i:04d}-{run}" for i in range(n)] for n in counts}
    with tempfile.TemporaryDirectory(prefix="bench-artemis-routing-") as home:
        broker = LocalArtemis(
            ArtemisSettings(
                home=Path(home) / "broker",
                port_offset=OFFSET,
                plugins_xml=plugin_xml(list(plugin_queues.values())),
            )
        )
        broker.start()
        try:
            settings = StompSettings(
                host=HOST, port=broker.settings.stomp_port, username=USER, password=PASSWORD
            )
            transport = StompTransport(settings)
            transport.connect()
            installer = send_route_installer(transport)
            assert isinstance(installer, ManagedRoutes)
            for n in counts:
                started = time.perf_counter()
                installer.install_send_routes(
                    [
                        SendRoute(divert_queues[n], TenantId(t), f"tenant.{t}.{divert_queues[n]}")
                        for t in tenant_ids[n]
                    ]
                )
                print(f"{n} tenants: {n} diverts made in {time.perf_counter() - started:.1f} s")
            # Untimed: every tenant's queue made, and the broker's code paths warm, for both.
            for n in counts:
                for queue in (plugin_queues[n], divert_queues[n]):
                    measure(broker, transport, queue, tenant_ids[n], max(n, 500))
            print(HEADER)
            for n in counts:
                rate_ratios, cpu_ratios = [], []
                for round_no in range(1, args.rounds + 1):
                    pair = {}
                    # Alternated, so warm-up and noise fall on both alike.
                    order = ("plugin", "diverts") if round_no % 2 else ("diverts", "plugin")
                    for mode in order:
                        queue = (plugin_queues if mode == "plugin" else divert_queues)[n]
                        pair[mode] = measure(broker, transport, queue, tenant_ids[n], args.messages)
                    plugin, diverts = pair["plugin"], pair["diverts"]
                    rate_ratios.append(plugin.rate / diverts.rate)
                    cpu_ratios.append(plugin.cpu_us / diverts.cpu_us)
                    print(row(str(n), str(round_no), plugin, diverts))
                print(
                    f"{n:>8} {'median':>6} {'':>13} {'':>14} "
                    f"{statistics.median(rate_ratios):>9.2f}x {'':>14} {'':>15} "
                    f"{statistics.median(cpu_ratios):>8.2f}x"
                )
            transport.close()
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
