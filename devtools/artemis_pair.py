"""A live/backup pair of the project's Artemis on one machine, sharing one store: how a user who
outgrows one broker runs (docs/operations.md, "A live/backup Artemis pair").

    scripts/artemis-pair start        the live broker, then its backup waiting for the store
    scripts/artemis-pair kill-live    SIGKILL the live broker: the backup takes the store over
    scripts/artemis-pair start-live   the old live broker again: the backup hands the store back
    scripts/artemis-pair status|stop|restart|purge|env

The pair lives in .artemis-pair/ (live/, backup/, store/) unless BOOST_ARTEMIS_PAIR_HOME says
otherwise; its ports are the project's Artemis ports + 100 (live) and + 200 (backup), or + the
offsets given. `env` prints the clients' failover list (BOOST_BROKER_URL with both brokers).
tests/integration/test_artemis_failover.py runs a pair of its own through this module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from boost_tenancy.errors import BoostTenancyError
from devtools.broker_process import command_parser, failed, parse_command, print_exports
from devtools.broker_settings import LocalBrokerError, find_repo_root
from devtools.local_artemis import HOST, PASSWORD, USER, ArtemisSettings, LocalArtemis

CLI_NAME: Final = "scripts/artemis-pair"
ENV_HOME: Final = "BOOST_ARTEMIS_PAIR_HOME"
LIVE_OFFSET: Final = 100
BACKUP_OFFSET: Final = 200
START_TIMEOUT_S: Final = 600.0
"""A backup answers only once it is active; the live broker, coming back, once the backup has
handed the store back."""
WAITING_FOR_LOCK: Final = "AMQ221109"
"""What a shared-store backup logs once it waits for the store's lock."""
WAIT_FOR_BACKUP_S: Final = 120.0

ROLES: Final = {
    "live": "<primary><failover-on-shutdown>true</failover-on-shutdown></primary>",
    "backup": "<backup><allow-failback>true</allow-failback></backup>",
}


def pair_xml(role: str, own_core_port: int, peer_core_port: int) -> str:
    """What a broker of the pair adds to the project's broker.xml: its HA role on the shared
    store, and a cluster connection to its peer, over which a returning live broker asks the
    active backup for the store back (without one Artemis logs AMQ222308 and the live broker
    waits for the lock for ever)."""
    return f"""    <ha-policy><shared-store>{ROLES[role]}</shared-store></ha-policy>
    <connectors>
      <connector name="self">tcp://{HOST}:{own_core_port}</connector>
      <connector name="peer">tcp://{HOST}:{peer_core_port}</connector>
    </connectors>
    <cluster-user>{USER}</cluster-user>
    <cluster-password>{PASSWORD}</cluster-password>
    <cluster-connections>
      <cluster-connection name="boost-pair">
        <connector-ref>self</connector-ref>
        <static-connectors><connector-ref>peer</connector-ref></static-connectors>
      </cluster-connection>
    </cluster-connections>"""


class ArtemisPair:
    """A live Artemis and its backup on one store under home."""

    def __init__(
        self, home: Path, live_offset: int = LIVE_OFFSET, backup_offset: int = BACKUP_OFFSET
    ) -> None:
        self.home = home.expanduser().resolve()
        self.store = self.home / "store"
        live_core = ArtemisSettings(port_offset=live_offset).core_port
        backup_core = ArtemisSettings(port_offset=backup_offset).core_port
        self.live = self._member("live", live_offset, live_core, backup_core)
        self.backup = self._member("backup", backup_offset, backup_core, live_core)

    def _member(self, role: str, offset: int, own_core: int, peer_core: int) -> LocalArtemis:
        """One broker of the pair: its instance under home/role, its ports, its HA role."""
        return LocalArtemis(
            ArtemisSettings(
                home=self.home / role,
                port_offset=offset,
                extra_xml=pair_xml(role, own_core, peer_core),
                shared_data=self.store,
                start_timeout_s=START_TIMEOUT_S,
            )
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ArtemisPair:
        home = env.get(ENV_HOME, "").strip()
        return cls(Path(home) if home else find_repo_root() / ".artemis-pair")

    def start(self) -> None:
        """The live broker, until it answers; then the backup, until it waits for the store."""
        self.store.mkdir(parents=True, exist_ok=True)
        self.live.start()
        self.backup.start(wait=False)
        deadline = time.monotonic() + WAIT_FOR_BACKUP_S
        while WAITING_FOR_LOCK not in self.backup.log_tail(200):
            if not self.backup.is_alive():
                raise LocalBrokerError(
                    f"the backup Artemis exited during start-up (see {self.backup.log_file})\n"
                    + self.backup.log_tail()
                )
            if self.backup.is_ready():
                return  # the live broker went meanwhile: the backup is active
            if time.monotonic() >= deadline:
                raise LocalBrokerError(
                    f"the backup Artemis did not wait for the shared store within "
                    f"{WAIT_FOR_BACKUP_S:g} s (see {self.backup.log_file})\n"
                    + self.backup.log_tail()
                )
            time.sleep(0.2)

    def stop(self, timeout_s: float = 30) -> None:
        self.live.stop(timeout_s=timeout_s)
        self.backup.stop(timeout_s=timeout_s)

    def purge_data(self) -> None:
        """Delete the shared store; refused while either broker runs."""
        if self.live.is_running() or self.backup.is_running():
            raise LocalBrokerError(f"the pair in {self.home} is running; stop it first")
        for path in sorted(self.store.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()

    def stomp_addresses(self) -> list[str]:
        return [f"{HOST}:{broker.settings.stomp_port}" for broker in (self.live, self.backup)]

    def client_env(self) -> dict[str, str]:
        """The variables that give a client both brokers as its failover list."""
        return {
            "BOOST_BROKER_URL": "stomp://" + ",".join(self.stomp_addresses()),
            "BOOST_BROKER_USER": USER,
            "BOOST_BROKER_PASSWORD": PASSWORD,
        }

    def status(self) -> dict[str, object]:
        """Each broker's state; the active one is the one that answers a login."""
        return {"live": self.live.status(), "backup": self.backup.status()}


def run_cli(argv: Sequence[str]) -> int:
    """Run a pair command; 0 on success, 2 on error (one line on stderr)."""
    parser = command_parser(
        CLI_NAME,
        "Run a live/backup pair of the project's Artemis on one shared store.",
        "start the live broker, then its backup waiting for the shared store",
        ("kill-live", "SIGKILL the live broker, as a crash would: the backup takes over"),
        ("start-live", "start the live broker again: the backup hands the store back"),
        ("env", "print the variables that give a client both brokers as its failover list"),
    )
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    try:
        pair = ArtemisPair.from_env(os.environ)
        if args.command in ("start", "restart"):
            if args.command == "restart":
                pair.stop()
            pair.start()
            live, backup = pair.stomp_addresses()
            print(f"Artemis pair running: live stomp://{live}, backup stomp://{backup} (waiting)")
        elif args.command == "stop":
            pair.stop(timeout_s=args.timeout)
            print(f"Artemis pair stopped ({pair.home})")
        elif args.command == "kill-live":
            pair.live.kill()
            print("live Artemis killed; the backup takes the store over")
        elif args.command == "start-live":
            pair.live.start()
            print("live Artemis active again; the backup waits for the store")
        elif args.command == "status":
            print(json.dumps(pair.status(), indent=2))
        elif args.command == "purge":
            pair.purge_data()
            print(f"Artemis pair store deleted ({pair.store})")
        else:
            print_exports(pair.client_env())
    except (BoostTenancyError, OSError, subprocess.SubprocessError) as exc:
        return failed(CLI_NAME, args.command, exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(sys.argv[1:]))
