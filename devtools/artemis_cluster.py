"""A symmetric cluster of two of the project's Artemis brokers on one machine, both running the
project's tenant plugin (brokers/artemis): how a user who runs more than one broker at a time
runs the toolkit (docs/operations.md, "A two-node Artemis cluster").

    scripts/artemis-cluster start     both nodes, clustered, the plugin routing the listed queues
    scripts/artemis-cluster status|stop|restart|purge|env

A message stays on the node it was sent to while its queue has a consumer there
(message-load-balancing OFF_WITH_REDISTRIBUTION) and moves to the other node at once when it has
none (redistribution-delay 0): a producer on node 1 reaches a tenant's runner on node 2, and a
tenant whose runners read on both nodes never puts its messages on the cluster bridge, which all
tenants share in order (docs/operations.md). The nodes live in .artemis-cluster/ (node1/, node2/)
unless BOOST_ARTEMIS_CLUSTER_HOME says otherwise; their ports are the project's Artemis ports +
500 and + 600. BOOST_ARTEMIS_CLUSTER_QUEUES names the shared queues the plugin routes as
BOOST_ARTEMIS_ROUTED_QUEUES does for scripts/artemis: unset or "*", every queue but the shared ones
(BOOST_ROUTING_OVERRIDES); "pipeline", the sample pipeline's; or a list.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from boost_tenancy.errors import BoostTenancyError
from devtools.artemis_plugin import plugin_xml
from devtools.broker_process import command_parser, failed, parse_command, print_exports
from devtools.broker_settings import LocalBrokerError, find_repo_root, plugin_queues_from_env
from devtools.local_artemis import HOST, PASSWORD, USER, ArtemisSettings, LocalArtemis

CLI_NAME: Final = "scripts/artemis-cluster"
ENV_HOME: Final = "BOOST_ARTEMIS_CLUSTER_HOME"
ENV_QUEUES: Final = "BOOST_ARTEMIS_CLUSTER_QUEUES"
OFFSETS: Final = (500, 600)
REDISTRIBUTION: Final = "        <redistribution-delay>0</redistribution-delay>"
"""A queue without consumers hands its messages to the node whose queue has some, at once."""


def cluster_xml(own_core_port: int, peer_core_port: int) -> str:
    """What a node adds to the project's broker.xml: a cluster connection to its peer; messages
    stay where they are sent while a consumer reads them there."""
    return f"""    <connectors>
      <connector name="self">tcp://{HOST}:{own_core_port}</connector>
      <connector name="peer">tcp://{HOST}:{peer_core_port}</connector>
    </connectors>
    <cluster-user>{USER}</cluster-user>
    <cluster-password>{PASSWORD}</cluster-password>
    <cluster-connections>
      <cluster-connection name="boost-cluster">
        <connector-ref>self</connector-ref>
        <message-load-balancing>OFF_WITH_REDISTRIBUTION</message-load-balancing>
        <max-hops>1</max-hops>
        <static-connectors><connector-ref>peer</connector-ref></static-connectors>
      </cluster-connection>
    </cluster-connections>"""


class ArtemisCluster:
    """Two clustered Artemis nodes under home, both running the tenant plugin for queues."""

    def __init__(
        self,
        home: Path,
        queues: Sequence[str],
        offsets: tuple[int, int] = OFFSETS,
        plugin_properties: Mapping[str, str] | None = None,
        *,
        shared: Sequence[str] = (),
    ) -> None:
        """queues: the plugin's (["*"]: every queue but shared)."""
        self.home = home.expanduser().resolve()
        self.queues = tuple(queues)
        cores = [ArtemisSettings(port_offset=offset).core_port for offset in offsets]
        self.nodes = tuple(
            LocalArtemis(
                ArtemisSettings(
                    home=self.home / f"node{index + 1}",
                    port_offset=offset,
                    extra_xml=cluster_xml(cores[index], cores[1 - index]),
                    plugins_xml=plugin_xml(self.queues, plugin_properties, shared=shared),
                    catch_all_xml=REDISTRIBUTION,
                )
            )
            for index, offset in enumerate(offsets)
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ArtemisCluster:
        home = env.get(ENV_HOME, "").strip()
        routed, shared = plugin_queues_from_env(env, ENV_QUEUES)
        if not routed:
            raise LocalBrokerError(
                f"{ENV_QUEUES}: both nodes run the tenant plugin; name its queues, or leave it "
                "unset for every queue"
            )
        return cls(
            Path(home) if home else find_repo_root() / ".artemis-cluster",
            routed,
            shared=shared,
        )

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def stop(self, timeout_s: float = 30) -> None:
        for node in self.nodes:
            node.stop(timeout_s=timeout_s)

    def purge_data(self) -> None:
        for node in self.nodes:
            node.purge_data()

    def stomp_urls(self) -> list[str]:
        return [f"stomp://{HOST}:{node.settings.stomp_port}" for node in self.nodes]

    def client_env(self, node: int = 0) -> dict[str, str]:
        """The variables that point a client at one node (the first by default)."""
        return {
            "BOOST_BROKER_URL": self.stomp_urls()[node],
            "BOOST_BROKER_USER": USER,
            "BOOST_BROKER_PASSWORD": PASSWORD,
        }

    def status(self) -> dict[str, object]:
        return {f"node{i + 1}": node.status() for i, node in enumerate(self.nodes)}


def run_cli(argv: Sequence[str]) -> int:
    """Run a cluster command; 0 on success, 2 on error (one line on stderr)."""
    parser = command_parser(
        CLI_NAME,
        "Run a two-node Artemis cluster with the project's tenant plugin.",
        "start both nodes, clustered, the plugin routing the listed shared queues",
        ("env", "print the variables that point a client at node 1"),
    )
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    try:
        cluster = ArtemisCluster.from_env(os.environ)
        if args.command in ("start", "restart"):
            if args.command == "restart":
                cluster.stop()
            cluster.start()
            print(f"Artemis cluster running: {', '.join(cluster.stomp_urls())}")
        elif args.command == "stop":
            cluster.stop(timeout_s=args.timeout)
            print(f"Artemis cluster stopped ({cluster.home})")
        elif args.command == "status":
            print(json.dumps(cluster.status(), indent=2))
        elif args.command == "purge":
            cluster.purge_data()
            print(f"Artemis cluster data deleted ({cluster.home})")
        else:
            print_exports(cluster.client_env())
    except (BoostTenancyError, OSError, subprocess.SubprocessError) as exc:
        return failed(CLI_NAME, args.command, exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(sys.argv[1:]))
