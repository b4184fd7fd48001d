"""Every command of boost-tenancy: its name, the module that defines it and its one-line help.

Light on purpose (it imports nothing of the toolkit): `boost-tenancy --help` lists the commands
from here, and a command line imports only the module of the command it names, so `--help` and
`--version` never load the broker clients, the stores or the policies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Command:
    module: str
    """The module of boost_tenancy.cli whose register() adds the command's parser."""
    help: str


COMMANDS: Final[dict[str, Command]] = {
    "publish": Command("messaging", "send a message of one tenant to a queue"),
    "run": Command("messaging", "run a TenantProcessor for a list of tenants until SIGTERM"),
    "park": Command(
        "queues", "move messages of tenants without a processor off shared queues until SIGTERM"
    ),
    "broker-routes": Command(
        "queues",
        "print the broker configuration that stores each tenant's messages of shared queues in "
        "its own queue at send time: the project's plugin element for ActiveMQ Classic or, with "
        "--broker artemis, for Artemis (every tenant), or with --tenant a Classic "
        "<destinationInterceptors> element for those tenants",
    ),
    "send-routes": Command(
        "queues",
        "list the routes the broker makes at send time (the runners' diverts on Artemis, the "
        "queues its tenant plugin routes); --add makes them for tenants ahead of their runners, "
        "--remove destroys those listed",
    ),
    "stats": Command(
        "queues",
        "a tenant's queue counts from the broker: waiting, in flight, scheduled, dead-lettered, "
        "quarantined, parked",
    ),
    "queues": Command(
        "queue_admin",
        "a tenant's queues with their depths; drain, resume or delete one (audited)",
    ),
    "dlq": Command("dead_letters", "list or re-drive a tenant's dead letters"),
    "errors": Command("dead_letters", "list a tenant's recorded failures"),
    "quarantine": Command(
        "quarantine", "list a queue's quarantined messages, or assign some to a tenant"
    ),
    "migrate": Command("migration", "move what the shared topology left to per-tenant queues"),
    "policy": Command(
        "policy",
        "show or change a tenant's run-time policy (publishing limits, TTL, tier), audited",
    ),
    "usage": Command(
        "policy", "a tenant's counts per day from the usage store (BOOST_USAGE_STORE), as JSON"
    ),
    "asyncapi": Command(
        "asyncapi",
        "print the AsyncAPI 3.0 document of processors: the queues they consume and publish "
        "to, their messages with the tenantUUID property, the dead letters and the quarantine",
    ),
}


def help_of(command: str) -> str:
    """The one-line help of a command, as `boost-tenancy --help` lists it."""
    return COMMANDS[command].help


def modules() -> list[str]:
    """The command modules, in the order their commands are listed."""
    return list(dict.fromkeys(command.module for command in COMMANDS.values()))
