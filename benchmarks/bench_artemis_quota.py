"""What a Java producer over its tenant's quota costs the other tenants at the broker, on Artemis
with the project's tenant plugin: another tenant's send rate alone and while the Java producer is
refused over and over.

One Artemis 2.44 of its own runs the plugin for one shared queue, its policies read from a SQLite
policy store: the flooding tenant may send 20 messages/s. The flood is the Artemis JMS client over
CORE (a Java service's producer, tests/jms), restarted in a loop: each run sends until the broker
refuses it, which ends that producer. The other tenant sends over STOMP, persistent, a receipt on
the last message (the broker has stored them all when it comes); its rates alone and beside the
flood are measured in alternating rounds, and the ratio is taken within each round. What the
plugin refused and routed for the flooding tenant is read from its counters, as `boost-tenancy
stats` reads them.

    .venv/bin/python benchmarks/bench_artemis_quota.py [--messages 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from boost_tenancy import TenantId
from boost_tenancy.ops.stats import broker_counts_of
from boost_tenancy.quotas.policy_store import open_policy_store
from boost_tenancy.transports.stomp import StompSettings, StompTransport

sys.path.append(str(Path(__file__).resolve().parents[1]))  # devtools, tests: the checkout's, last
from benchmarks.bench_artemis_routing import send_round_robin
from devtools.artemis_plugin import plugin_xml
from devtools.local_artemis import (
    HOST,
    PASSWORD,
    USER,
    ArtemisSettings,
    LocalArtemis,
    ensure_client_jar,
)
from tests.jms.peer import JmsPeer, compile_peer, jms_available

OFFSET = 1550
REFRESH_S = 1
FLOOD_RATE = 20.0
"""messages/s the flooding tenant's policy allows."""


class JavaFlood:
    """The flooding tenant's Java producer, restarted each time the broker refuses it."""

    def __init__(self, peer: JmsPeer, url: str, queue: str, tenant: str) -> None:
        self._peer, self._url, self._queue, self._tenant = peer, url, queue, tenant
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.runs = 0
        self.refused_runs = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.runs += 1
            try:
                self._peer.send_each(self._url, self._queue, '{"n": 0}', [self._tenant] * 500)
            except RuntimeError as exc:
                if "refused" not in str(exc):
                    raise
                self.refused_runs += 1

    def __enter__(self) -> JavaFlood:
        self._thread.start()
        time.sleep(3.0)  # the first JVM is up and being refused
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


def flooder_report(port: int, queue: str, flooder: str, runs: int, refused_runs: int) -> str:
    """What the broker did with the flooding tenant's sends, from the plugin's counters."""
    transport = StompTransport(
        StompSettings(host=HOST, port=port, username=USER, password=PASSWORD)
    )
    transport.connect()
    try:
        counts = broker_counts_of(transport, TenantId(flooder)) or []
        stored = transport.queue_stats([f"tenant.{flooder}.{queue}"])
    finally:
        transport.close()
    by_event = {(c.event, c.reason): c.count for c in counts}
    waiting = next(iter(stored.values()))
    return (
        f"\n{flooder}: {runs} Java producer runs, {refused_runs} ended by the broker's refusal; "
        f"the plugin counted {by_event.get(('refused', 'rate'), 0)} refused (rate) and "
        f"{by_event.get(('routed', ''), 0)} routed; {waiting.waiting if waiting else 0} stored "
        "in its queue"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    reason = jms_available()
    if reason is not None:
        raise SystemExit(f"the Java producer needs the JMS peer: {reason}")
    run = uuid.uuid4().hex[:6]
    queue, flooder, other = f"bench.quota.{run}", f"org-flood-{run}", f"org-other-{run}"
    with tempfile.TemporaryDirectory(prefix="bench-artemis-quota-") as home:
        policy_db = Path(home) / "policies.sqlite3"
        policies = open_policy_store(str(policy_db))
        policies.set(TenantId(flooder), {"messages_per_s": FLOOD_RATE}, actor="benchmark")
        broker = LocalArtemis(
            ArtemisSettings(
                home=Path(home) / "broker",
                port_offset=OFFSET,
                plugins_xml=plugin_xml(
                    [queue],
                    {
                        "policy-store-url": f"jdbc:sqlite:{policy_db}",
                        "policy-refresh-seconds": str(REFRESH_S),
                    },
                ),
            )
        )
        peer = dataclasses.replace(
            compile_peer(Path(home) / "jms-peer"),
            artemis_client=ensure_client_jar(ArtemisSettings().cache),
            login=(USER, PASSWORD),
        )
        broker.start()
        try:
            port = broker.settings.stomp_port
            url = f"tcp://{HOST}:{broker.settings.core_port}"
            time.sleep(REFRESH_S * 3)  # the plugin has read the policy
            send_round_robin(port, queue, [other], 500)  # untimed: the queue made, paths warm
            print(
                f"{other} sends {args.messages} persistent messages over STOMP; {flooder}'s "
                f"Java producer (JMS over CORE) is held to {FLOOD_RATE:g} msg/s by its policy"
            )
            print(f"\n{'round':>5} {'alone msg/s':>12} {'beside flood msg/s':>19} {'ratio':>7}")
            ratios = []
            flood_runs = refused_runs = 0
            for round_no in range(1, args.rounds + 1):
                rates: dict[str, float] = {}
                order = ("alone", "flood") if round_no % 2 else ("flood", "alone")
                for mode in order:
                    if mode == "alone":
                        rates[mode] = args.messages / send_round_robin(
                            port, queue, [other], args.messages
                        )
                        continue
                    with JavaFlood(peer, url, queue, flooder) as flood:
                        rates[mode] = args.messages / send_round_robin(
                            port, queue, [other], args.messages
                        )
                    flood_runs += flood.runs
                    refused_runs += flood.refused_runs
                ratios.append(rates["flood"] / rates["alone"])
                print(
                    f"{round_no:>5} {rates['alone']:>12.0f} {rates['flood']:>19.0f} "
                    f"{ratios[-1]:>6.2f}x"
                )
            print(f"{'median':>5} {'':>12} {'':>19} {statistics.median(ratios):>6.2f}x")
            print(flooder_report(port, queue, flooder, flood_runs, refused_runs))
        finally:
            broker.stop()
            policies.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
