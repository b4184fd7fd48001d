"""publish (one tenant's messages to a queue) and run (a TenantProcessor until SIGTERM)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
from typing import Any

from boost_tenancy.application.config import AppSettings
from boost_tenancy.application.run import run_processor
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import (
    LIST_HELP,
    QUEUE_HELP,
    Subparsers,
    connected,
    positive_int,
    tenants,
)
from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.processing.aio import AnyMiddleware, check_middleware
from boost_tenancy.processing.processor import TenantProcessor
from boost_tenancy.producer import TenantProducer
from boost_tenancy.resilience.failure import ErrorInfo
from boost_tenancy.tenancy import TenantId


def _import_target(spec: str, what: str = "processor") -> object:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            f"{what} must be given as module:ClassName or module:factory, got {spec!r}"
        )
    if os.getcwd() not in sys.path:
        # A console script's sys.path starts at its bin folder; services live in the project.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {what} module {module_name!r}: {exc}") from exc
    target = getattr(module, attribute, None)
    if target is None:
        raise ConfigError(f"module {module_name!r} has no {attribute!r}")
    return target


def _check_buildable(spec: str, target: object) -> None:
    """Refuse, before calling it, what cannot build a processor without arguments."""
    if isinstance(target, type):
        if not issubclass(target, TenantProcessor):
            raise ConfigError(f"{spec!r} is a class but not a TenantProcessor subclass")
        abstract = sorted(getattr(target, "__abstractmethods__", ()))
        if abstract:
            raise ConfigError(
                f"{spec!r} cannot be instantiated: it does not implement {', '.join(abstract)}"
            )
    elif not callable(target):
        raise ConfigError(
            f"{spec!r} is a {type(target).__name__}, not a TenantProcessor subclass or a factory"
        )
    _check_no_arguments(f"{spec!r}", target, "the processor")


def _check_no_arguments(named: str, target: object, what: str) -> None:
    """Refuse, before calling it, a callable that needs arguments: it is built with none."""
    try:
        inspect.signature(target).bind()  # type: ignore[arg-type]  # the callers checked it
    except TypeError as exc:
        raise ConfigError(
            f"{named} must be callable without arguments ({exc}); give a factory that builds "
            f"{what} with its settings, module:factory"
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): calling it tells


def load_processor(spec: str) -> TenantProcessor:
    """The processor 'package.module:name' names: a TenantProcessor subclass, instantiated
    without arguments, or a factory, called without arguments, that returns a TenantProcessor
    (one that reads its own settings, say). Anything else is a ConfigError saying what it got.
    """
    target = _import_target(spec)
    _check_buildable(spec, target)
    try:
        processor = target()  # type: ignore[operator]  # _check_buildable: callable
    except BoostTenancyError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"{spec!r} failed to build the processor: {ErrorInfo.of(exc).text}"
        ) from exc
    if not isinstance(processor, TenantProcessor):
        raise ConfigError(f"{spec!r} returned {type(processor).__name__}, not a TenantProcessor")
    return processor


def load_middleware(spec: str) -> AnyMiddleware:
    """The middleware 'package.module:name' names: a class or a factory, called without
    arguments, that returns a middleware (a callable of message, ctx and call_next, or an
    AsyncMiddleware). Anything else is a ConfigError saying what it got."""
    target = _import_target(spec, "middleware")
    if not callable(target):
        raise ConfigError(f"--middleware {spec!r} is a {type(target).__name__}, not a factory")
    _check_no_arguments(f"--middleware {spec!r}", target, "the middleware")
    try:
        layer: object = target()
    except BoostTenancyError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"--middleware {spec!r} failed to build the middleware: {ErrorInfo.of(exc).text}"
        ) from exc
    try:
        check_middleware(layer)
    except ConfigError as exc:
        raise ConfigError(f"--middleware {spec!r} built something else: {exc}") from None
    return layer


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
    chosen = tenants(args.tenant)  # the flags first: they are checked without importing
    processor = load_processor(args.processor)
    middleware = [load_middleware(spec) for spec in args.middleware]
    return run_processor(processor, chosen, settings, os.environ, middleware=middleware)


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("publish", help=help_of("publish"))
    cmd.add_argument("--queue", required=True, help=QUEUE_HELP)
    cmd.add_argument("--tenant", required=True, help="the tenant the message belongs to")
    body = cmd.add_mutually_exclusive_group(required=True)
    body.add_argument("--json", help="a JSON object; tenantUUID is added to it")
    body.add_argument("--text", help="a text body sent as is")
    cmd.add_argument(
        "--correlation-id", help="the message's correlation id (default: its message id)"
    )
    cmd.add_argument("--count", type=positive_int, default=1, help="messages sent (at least 1)")
    cmd.set_defaults(handler=publish)

    cmd = sub.add_parser("run", help=help_of("run"))
    cmd.add_argument(
        "processor",
        help="module:ClassName of a TenantProcessor subclass (built without arguments), or "
        "module:factory, a callable without arguments returning a TenantProcessor",
    )
    cmd.add_argument("--tenant", action="append", required=True, help=LIST_HELP)
    cmd.add_argument(
        "--middleware",
        action="append",
        default=[],
        metavar="MODULE:FACTORY",
        help="a middleware (boost_tenancy.Middleware: consume, publish or on_outcome hooks): a "
        "class or factory built without arguments (repeatable, outermost first; after the "
        "accounting and the handling metrics, before the processor's own middleware and the "
        "retries, unless its class sets before or after to a named piece: retry, trace, ttl, "
        "limits, ...)",
    )
    cmd.set_defaults(handler=run)
