"""The boost-tenancy command: publish, run, park, dead letters and errors.

Settings come from BOOST_* environment variables and flags; every tenant given on the command
line passes the same TenantId validation as everywhere else.
"""

from __future__ import annotations

import argparse
import getpass
import importlib
import json
import os
import sys
from collections.abc import Sequence
from datetime import date
from typing import Any

from boost_tenancy.app import open_broker, run_processor
from boost_tenancy.config import AppSettings
from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.fairness.accounting import UNKNOWN_TENANT
from boost_tenancy.fairness.tiers import Tier, TierStore, open_tier_store
from boost_tenancy.fairness.usage import open_usage_store
from boost_tenancy.observability.logging import configure_logging
from boost_tenancy.ops.broker_routes import classic_destination_interceptors
from boost_tenancy.ops.dead_letters import DeadLetterAdmin
from boost_tenancy.ops.parking import ParkingSweeper
from boost_tenancy.ops.stats import TenantStats, stats_table
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.producer import TenantProducer
from boost_tenancy.quotas.policy import POLICY_FIELDS, PolicyChange, PolicyValue
from boost_tenancy.quotas.policy_store import SqlPolicyStore, check_actor, open_policy_store
from boost_tenancy.resilience.error_store import FailureOutcome, open_error_store
from boost_tenancy.routing import Topology
from boost_tenancy.tenancy import TenantId, parse_tenants


def load_processor(spec: str) -> TenantProcessor:
    """Import 'package.module:ClassName' and instantiate it without arguments."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise ConfigError(f"processor must be given as module:ClassName, got {spec!r}")
    if os.getcwd() not in sys.path:
        # A console script's sys.path starts at its bin folder; services live in the project.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import processor module {module_name!r}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, TenantProcessor)):
        raise ConfigError(f"{spec!r} is not a TenantProcessor subclass")
    return cls()


def _tenants(values: Sequence[str]) -> tuple[TenantId, ...]:
    return parse_tenants([part for value in values for part in value.split(",") if part != ""])


def _cmd_publish(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    body: Any
    if args.json is not None:
        try:
            body = json.loads(args.json)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--json is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ConfigError("--json must be a JSON object")
    else:
        body = args.text
    transport = open_broker(settings, os.environ)
    transport.connect()
    try:
        ttl = settings.message_ttl if settings.message_ttl.applies else None
        producer = TenantProducer(transport, routing=settings.routing, ttl=ttl)
        with producer.batch() as batch:
            sent = [
                batch.send(args.queue, tenant, body, correlation_id=args.correlation_id)
                for _ in range(args.count)
            ]
    finally:
        transport.close()
    broker_queue = settings.routing.physical(args.queue, tenant)
    for message in sent:
        print(
            json.dumps(
                {
                    "queue": args.queue,
                    "broker_queue": broker_queue,
                    "tenant": tenant.value,
                    "message_id": message.message_id,
                }
            )
        )
    return 0


def _cmd_run(args: argparse.Namespace, settings: AppSettings) -> int:
    tenants = _tenants(args.tenant)
    processor = load_processor(args.processor)
    return run_processor(processor, tenants, settings, os.environ)


def _cmd_dlq(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    store = open_error_store(settings.error_store_url)
    transport = open_broker(settings, os.environ)
    transport.connect()
    try:
        admin = DeadLetterAdmin(transport, store, routing=settings.routing)
        if args.dlq_command == "list":
            for view in admin.list(tenant, args.queue):
                print(
                    json.dumps(
                        {
                            "message_id": view.message_id,
                            "tenant": view.tenant.value,
                            "original_queue": view.original_queue,
                            "reason": view.reason,
                            "attempts": view.attempts,
                            "error_type": view.error_type,
                            "error": view.error,
                            "recorded_failures": [
                                {
                                    "attempt": f.attempt,
                                    "outcome": f.outcome.value,
                                    "error_type": f.error_type,
                                    "error": f.error_text,
                                    "at": f.occurred_at.isoformat(),
                                }
                                for f in view.failures
                            ],
                        }
                    )
                )
            return 0
        ids = admin.redrive(tenant, args.queue, message_ids=args.message_id or None)
        # A re-drive moves at most one batch; say what is left so nobody assumes it was all.
        remaining = admin.count(tenant, args.queue)
        print(json.dumps({"redriven": ids, "count": len(ids), "remaining": remaining}))
        if remaining and not args.message_id:
            print(
                f"boost-tenancy: {remaining} dead letter(s) remain; run dlq redrive again",
                file=sys.stderr,
            )
        return 0
    finally:
        transport.close()
        store.close()


def _cmd_park(args: argparse.Namespace, settings: AppSettings) -> int:
    queues = [part for value in args.queue for part in value.split(",") if part != ""]
    for queue in queues:
        topology = settings.routing.topology(queue)
        if topology is not Topology.SHARED:
            # Nothing of another tenant can wait ahead on a per-tenant queue: nothing to park.
            raise ConfigError(
                f"--queue {queue!r} is {topology.value}, stored per tenant; only shared queues "
                "park (BOOST_ROUTING, BOOST_ROUTING_OVERRIDES)"
            )
    store = open_error_store(settings.error_store_url)
    try:
        sweeper = ParkingSweeper(
            open_broker(settings, os.environ),
            queues,
            _tenants(args.active_tenant),
            error_store=store,
        )
        code = sweeper.run()
        print(
            json.dumps(
                {
                    "parked": {t.value: n for t, n in sweeper.parked.items()},
                    "quarantined": sweeper.quarantined,
                }
            )
        )
        return code
    finally:
        store.close()


def _cmd_errors(args: argparse.Namespace, settings: AppSettings) -> int:
    store = open_error_store(settings.error_store_url)
    try:
        outcome = FailureOutcome(args.outcome) if args.outcome else None
        for record in store.failures(
            tenant=TenantId.parse(args.tenant),
            queue=args.queue,
            message_id=args.message_id,
            outcome=outcome,
            limit=args.limit,
        ):
            print(
                json.dumps(
                    {
                        "tenant": record.tenant.value if record.tenant else None,
                        "queue": record.queue,
                        "message_id": record.message_id,
                        "attempt": record.attempt,
                        "outcome": record.outcome.value,
                        "error_type": record.error_type,
                        "error": record.error_text,
                        "trace": record.trace,
                        "at": record.occurred_at.isoformat(),
                    }
                )
            )
        return 0
    finally:
        store.close()


def _policy_store(settings: AppSettings) -> SqlPolicyStore:
    if not settings.policy_store_url:
        raise ConfigError(
            "no policy store: set BOOST_POLICY_STORE (or BOOST_TIER_STORE) to a sqlite:/// path "
            "or a postgresql:// URL"
        )
    return open_policy_store(settings.policy_store_url)


def _tier_store(settings: AppSettings) -> TierStore | None:
    url = settings.fairness.tier_store_url if settings.fairness is not None else ""
    return open_tier_store(url) if url else None


def _change_json(change: PolicyChange) -> dict[str, Any]:
    return {
        "at": change.at.isoformat(),
        "actor": change.actor,
        "field": change.field,
        "old": change.old,
        "new": change.new,
    }


def _cmd_policy(args: argparse.Namespace, settings: AppSettings) -> int:
    (tenant,) = _tenants([args.tenant])
    store = _policy_store(settings)
    tiers = _tier_store(settings)
    try:
        if args.policy_command == "set":
            changes: dict[str, PolicyValue] = {
                name: value for name in POLICY_FIELDS if (value := getattr(args, name)) is not None
            }
            changes.update(dict.fromkeys(args.clear or [], None))
            if not changes and args.tier is None:
                raise ConfigError("policy set: nothing to change (give a limit, --clear or --tier)")
            actor = check_actor(args.actor or os.environ.get("BOOST_ACTOR") or getpass.getuser())
            if args.tier is not None and tiers is None:
                raise ConfigError("policy set --tier needs BOOST_TIER_STORE (fairness on)")
            # set checks every value before it writes, and the tier is written after it: a bad
            # value leaves the tier untouched too.
            done = store.set(tenant, changes, actor=actor)
            if args.tier is not None and tiers is not None:
                old_tier = tiers.get(tenant)
                new_tier = Tier(args.tier)
                if old_tier is not new_tier:
                    tiers.set(tenant, new_tier)
                    done.append(
                        store.record(
                            tenant,
                            "tier",
                            None if old_tier is None else old_tier.value,
                            new_tier.value,
                            actor=actor,
                        )
                    )
            print(json.dumps({"tenant": tenant.value, "changed": [_change_json(c) for c in done]}))
            return 0
        policy = store.get(tenant)
        shown = {
            "tenant": tenant.value,
            "tier": None if tiers is None else getattr(tiers.get(tenant), "value", "free"),
            "policy": policy.overrides(),
            "effective": {
                name: getattr(policy.applied_to(settings.publish), name) for name in POLICY_FIELDS
            },
            "history": [_change_json(c) for c in store.history(tenant, limit=args.history)],
        }
        print(json.dumps(shown, indent=2))
        return 0
    finally:
        store.close()
        if tiers is not None:
            tiers.close()


def _cmd_stats(args: argparse.Namespace, settings: AppSettings) -> int:
    tenant = TenantId.parse(args.tenant)
    queues = [q for value in args.queue for q in value.split(",") if q != ""]
    transport = open_broker(settings, os.environ)
    transport.connect()
    try:
        rows = TenantStats(transport, routing=settings.routing).rows(tenant, queues)
    finally:
        transport.close()
    if args.json:
        for row in rows:
            print(json.dumps(row.as_json()))
    else:
        sys.stdout.write(stats_table(rows))
    return 0


def _cmd_usage(args: argparse.Namespace, settings: AppSettings) -> int:
    if not settings.usage_store_url:
        raise ConfigError("no usage store: set BOOST_USAGE_STORE (where runners write usage)")
    tenant = UNKNOWN_TENANT if args.tenant == UNKNOWN_TENANT else _tenants([args.tenant])[0].value
    try:
        since = date.fromisoformat(args.since) if args.since else date.min
        until = date.fromisoformat(args.until) if args.until else date.max
    except ValueError as exc:
        raise ConfigError(f"--since/--until must be dates like 2026-11-23: {exc}") from None
    store = open_usage_store(settings.usage_store_url)
    try:
        days = store.days(tenant, since=since, until=until)
    finally:
        store.close()
    totals: dict[str, int] = {}
    for counts in days.values():
        for counter, count in counts.items():
            totals[counter] = totals.get(counter, 0) + count
    print(json.dumps({"tenant": tenant, "days": days, "totals": totals}, indent=2))
    return 0


def _cmd_broker_routes(args: argparse.Namespace, settings: AppSettings) -> int:
    queues = [q for value in args.queue for q in value.split(",") if q != ""]
    for queue in queues:
        if settings.routing.topology(queue) is Topology.SHARED:
            # Its runners read the shared queue itself: forwarding would hide every message.
            raise ConfigError(
                f"queue {queue!r} is shared (BOOST_ROUTING): broker routes serve routed queues, "
                "whose runners read tenant.<tenant>.<queue>"
            )
    sys.stdout.write(classic_destination_interceptors(queues, _tenants(args.tenant)))
    return 0


def _add_policy_parsers(sub: Any) -> None:
    policy = sub.add_parser(
        "policy",
        help="show or change a tenant's run-time policy (publishing limits, tier), audited",
    )
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    show = policy_sub.add_parser("show", help="the tenant's policy, effective limits and audit")
    show.add_argument("--tenant", required=True)
    show.add_argument("--history", type=int, default=20, help="audit entries shown (newest)")
    change = policy_sub.add_parser(
        "set", help="change fields of a tenant's policy; running processes see it within a minute"
    )
    change.add_argument("--tenant", required=True)
    change.add_argument("--messages-per-s", dest="messages_per_s", type=float)
    change.add_argument("--bytes-per-s", dest="bytes_per_s", type=float)
    change.add_argument("--burst-s", dest="burst_s", type=float)
    change.add_argument("--max-message-bytes", dest="max_message_bytes", type=int)
    change.add_argument("--max-queued-messages", dest="max_queued_messages", type=int)
    change.add_argument(
        "--clear", action="append", choices=POLICY_FIELDS, help="back to the default (repeatable)"
    )
    change.add_argument("--tier", choices=[t.value for t in Tier])
    change.add_argument(
        "--actor", help="who makes the change (default: BOOST_ACTOR, else the user)"
    )


def _add_usage_parser(sub: Any) -> None:
    usage = sub.add_parser(
        "usage", help="a tenant's counts per day from the usage store (BOOST_USAGE_STORE), as JSON"
    )
    usage.add_argument("--tenant", required=True, help=f"a tenant, or {UNKNOWN_TENANT}")
    usage.add_argument("--since", help="first day, YYYY-MM-DD (UTC)")
    usage.add_argument("--until", help="last day, YYYY-MM-DD (UTC)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="boost-tenancy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    publish = sub.add_parser("publish", help="send a message of one tenant to a queue")
    publish.add_argument("--queue", required=True)
    publish.add_argument("--tenant", required=True)
    body = publish.add_mutually_exclusive_group(required=True)
    body.add_argument("--json", help="a JSON object; tenantUUID is added to it")
    body.add_argument("--text", help="a text body sent as is")
    publish.add_argument("--correlation-id")
    publish.add_argument("--count", type=int, default=1)

    run = sub.add_parser("run", help="run a TenantProcessor for a list of tenants until SIGTERM")
    run.add_argument("processor", help="module:ClassName of a TenantProcessor subclass")
    run.add_argument("--tenant", action="append", required=True, help="repeat or comma-separate")

    park = sub.add_parser(
        "park",
        help="move messages of tenants without a processor off shared queues until SIGTERM",
    )
    park.add_argument("--queue", action="append", required=True, help="repeat or comma-separate")
    park.add_argument(
        "--active-tenant",
        action="append",
        required=True,
        help="a tenant whose processor runs (its messages stay); repeat or comma-separate",
    )

    dlq = sub.add_parser("dlq", help="list or re-drive a tenant's dead letters")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    for name in ("list", "redrive"):
        cmd = dlq_sub.add_parser(name)
        cmd.add_argument("--tenant", required=True)
        cmd.add_argument("--queue", required=True, help="the source queue (not DLQ.<queue>)")
        if name == "redrive":
            cmd.add_argument("--message-id", action="append", help="only these (repeatable)")

    _add_policy_parsers(sub)
    _add_usage_parser(sub)
    routes = sub.add_parser(
        "broker-routes",
        help="print the ActiveMQ Classic <destinationInterceptors> element that stores each "
        "tenant's messages of shared queues in its own queue at send time",
    )
    routes.add_argument("--queue", action="append", required=True, help="repeat or comma-separate")
    routes.add_argument("--tenant", action="append", required=True, help="repeat or comma-separate")

    stats = sub.add_parser(
        "stats",
        help="a tenant's queue counts from the broker: waiting, in flight, scheduled, "
        "dead-lettered, quarantined, parked",
    )
    stats.add_argument("--tenant", required=True)
    stats.add_argument("--queue", action="append", required=True, help="repeat or comma-separate")
    stats.add_argument("--json", action="store_true", help="one JSON object per queue")

    errors = sub.add_parser("errors", help="list a tenant's recorded failures")
    errors.add_argument("--tenant", required=True)
    errors.add_argument("--queue")
    errors.add_argument("--message-id")
    errors.add_argument("--outcome", choices=[o.value for o in FailureOutcome])
    errors.add_argument("--limit", type=int, default=100)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)
    try:
        settings = AppSettings.from_env(os.environ)
        configure_logging(settings.log_format, settings.log_level)
        handlers = {
            "publish": _cmd_publish,
            "run": _cmd_run,
            "dlq": _cmd_dlq,
            "park": _cmd_park,
            "errors": _cmd_errors,
            "broker-routes": _cmd_broker_routes,
            "policy": _cmd_policy,
            "usage": _cmd_usage,
            "stats": _cmd_stats,
        }
        return handlers[args.command](args, settings)
    except BoostTenancyError as exc:
        print(f"boost-tenancy: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
