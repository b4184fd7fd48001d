"""publish (one tenant's messages to a queue) and run (a TenantProcessor until SIGTERM)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any

from boost_tenancy.app import run_processor
from boost_tenancy.cli.common import LIST_HELP, Subparsers, connected, tenants
from boost_tenancy.config import AppSettings
from boost_tenancy.errors import ConfigError
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.producer import TenantProducer
from boost_tenancy.tenancy import TenantId


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


def publish(args: argparse.Namespace, settings: AppSettings) -> int:
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
    transport = connected(settings)
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


def run(args: argparse.Namespace, settings: AppSettings) -> int:
    processor = load_processor(args.processor)
    return run_processor(processor, tenants(args.tenant), settings, os.environ)


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("publish", help="send a message of one tenant to a queue")
    cmd.add_argument("--queue", required=True)
    cmd.add_argument("--tenant", required=True)
    body = cmd.add_mutually_exclusive_group(required=True)
    body.add_argument("--json", help="a JSON object; tenantUUID is added to it")
    body.add_argument("--text", help="a text body sent as is")
    cmd.add_argument("--correlation-id")
    cmd.add_argument("--count", type=int, default=1)
    cmd.set_defaults(handler=publish)

    cmd = sub.add_parser("run", help="run a TenantProcessor for a list of tenants until SIGTERM")
    cmd.add_argument("processor", help="module:ClassName of a TenantProcessor subclass")
    cmd.add_argument("--tenant", action="append", required=True, help=LIST_HELP)
    cmd.set_defaults(handler=run)
