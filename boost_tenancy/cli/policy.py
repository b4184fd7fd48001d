"""policy (a tenant's run-time limits, audited) and usage (its counts per day)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date
from typing import Any

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import (
    ACTOR_HELP,
    TENANT_HELP,
    Subparsers,
    acting,
    existing_store,
    missing_store,
    tenants,
)
from boost_tenancy.errors import ConfigError
from boost_tenancy.fairness.accounting import UNKNOWN_TENANT
from boost_tenancy.fairness.tiers import Tier, TierStore, open_tier_store
from boost_tenancy.fairness.usage import open_usage_store
from boost_tenancy.quotas.policy import LIMIT_FIELDS, POLICY_FIELDS, PolicyChange, PolicyValue
from boost_tenancy.quotas.policy_store import SqlPolicyStore, open_policy_store
from boost_tenancy.quotas.ttl import PolicyTtl
from boost_tenancy.tenancy import TenantId


def _policy_store(settings: AppSettings) -> SqlPolicyStore:
    if not settings.policy_store_url:
        raise ConfigError(
            "no policy store: set BOOST_POLICY_STORE (or BOOST_TIER_STORE) to a sqlite:/// path "
            "or a postgresql:// URL"
        )
    return open_policy_store(settings.policy_store_url)


def _existing_policy_store(settings: AppSettings) -> SqlPolicyStore:
    if settings.policy_store_url:
        existing_store(settings.policy_store_url, "BOOST_POLICY_STORE", "policy store")
    return _policy_store(settings)


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


def policy_command(args: argparse.Namespace, settings: AppSettings) -> int:
    (tenant,) = tenants([args.tenant])
    store = (
        _policy_store(settings)
        if args.policy_command == "set"
        else _existing_policy_store(settings)
    )
    tiers = _tier_store(settings)
    try:
        if args.policy_command == "set":
            changes: dict[str, PolicyValue] = {
                name: value for name in POLICY_FIELDS if (value := getattr(args, name)) is not None
            }
            changes.update(dict.fromkeys(args.clear or [], None))
            if not changes and args.tier is None:
                raise ConfigError("policy set: nothing to change (give a limit, --clear or --tier)")
            who = acting(args.actor, settings)
            if args.tier is not None and tiers is None:
                raise ConfigError("policy set --tier needs BOOST_TIER_STORE (fairness on)")
            # set checks every value before it writes, and the tier is written after it: a bad
            # value leaves the tier untouched too.
            try:
                done = store.set(tenant, changes, actor=who)
            except ConfigError as exc:
                raise ConfigError(_named_by_flags(str(exc))) from None
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
                            actor=who,
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
                **{
                    name: getattr(policy.applied_to(settings.publish), name)
                    for name in LIMIT_FIELDS
                },
                "ttl_s": _ttl_s(PolicyTtl(settings.message_ttl, lambda _t: policy), tenant),
            },
            "history": [_change_json(c) for c in store.history(tenant, limit=args.history)],
        }
        print(json.dumps(shown, indent=2))
        return 0
    finally:
        store.close()
        if tiers is not None:
            tiers.close()


def _named_by_flags(text: str) -> str:
    """A policy value's error as the command's user gave it: --messages-per-s, not
    PublishLimits.messages_per_s."""
    for name in POLICY_FIELDS:
        text = re.sub(rf"\b(?:PublishLimits\.)?{name}\b", "--" + name.replace("_", "-"), text)
    return text


def _ttl_s(ttl: PolicyTtl, tenant: TenantId) -> float:
    """The tenant's effective time-to-live in seconds (0: no expiry)."""
    ttl_ms = ttl.ttl_ms_of(tenant)
    return 0.0 if ttl_ms is None else ttl_ms / 1000


def usage_command(args: argparse.Namespace, settings: AppSettings) -> int:
    if not settings.usage_store_url:
        raise ConfigError("no usage store: set BOOST_USAGE_STORE (where runners write usage)")
    tenant = UNKNOWN_TENANT if args.tenant == UNKNOWN_TENANT else tenants([args.tenant])[0].value
    try:
        since = date.fromisoformat(args.since) if args.since else date.min
        until = date.fromisoformat(args.until) if args.until else date.max
    except ValueError as exc:
        raise ConfigError(f"--since/--until must be dates like 2026-11-23: {exc}") from None
    missing = missing_store(settings.usage_store_url, "BOOST_USAGE_STORE", "usage store")
    days: dict[str, dict[str, int]] = {}
    if missing is not None:
        # Nothing recorded there yet, or a mistyped path: said, and no file made.
        print(f"boost-tenancy: no usage read: {missing}", file=sys.stderr)
    else:
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


def register(sub: Subparsers) -> None:
    policy = sub.add_parser("policy", help=help_of("policy"))
    policy.set_defaults(handler=policy_command)
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    show = policy_sub.add_parser("show", help="the tenant's policy, effective limits and audit")
    show.add_argument("--tenant", required=True, help=TENANT_HELP)
    show.add_argument("--history", type=int, default=20, help="audit entries shown (newest)")
    change = policy_sub.add_parser(
        "set", help="change fields of a tenant's policy; running processes see it within a minute"
    )
    change.add_argument("--tenant", required=True, help=TENANT_HELP)
    change.add_argument(
        "--messages-per-s",
        dest="messages_per_s",
        type=float,
        help="messages it may publish a second",
    )
    change.add_argument(
        "--bytes-per-s", dest="bytes_per_s", type=float, help="bytes it may publish a second"
    )
    change.add_argument(
        "--burst-s", dest="burst_s", type=float, help="seconds of those rates it may send at once"
    )
    change.add_argument(
        "--max-message-bytes", dest="max_message_bytes", type=int, help="its largest message"
    )
    change.add_argument(
        "--max-queued-messages",
        dest="max_queued_messages",
        type=int,
        help="the backlog its queues may hold before publishing is refused",
    )
    change.add_argument(
        "--ttl-s", dest="ttl_s", type=float, help="message time-to-live, seconds (0: no expiry)"
    )
    change.add_argument(
        "--clear", action="append", choices=POLICY_FIELDS, help="back to the default (repeatable)"
    )
    change.add_argument(
        "--tier", choices=[t.value for t in Tier], help="its scheduling tier (docs/fairness.md)"
    )
    change.add_argument("--actor", help=ACTOR_HELP)

    usage = sub.add_parser("usage", help=help_of("usage"))
    usage.add_argument("--tenant", required=True, help=f"a tenant, or {UNKNOWN_TENANT}")
    usage.add_argument("--since", help="first day, YYYY-MM-DD (UTC)")
    usage.add_argument("--until", help="last day, YYYY-MM-DD (UTC)")

    usage.set_defaults(handler=usage_command)
