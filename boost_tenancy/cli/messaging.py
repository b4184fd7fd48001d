"""publish (one tenant's messages to a queue) and run (a TenantProcessor until SIGTERM)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import traceback
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


def failure_site(exc: Exception) -> str:
    """The error, and the file and line where it was raised (a syntax error: where it is)."""
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg} at {exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def import_target(spec: str, what: str = "processor") -> object:
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
    except Exception as exc:  # the module's own code failed as it ran: say what, and where
        raise ConfigError(
            f"cannot import {what} module {module_name!r}: {failure_site(exc)}"
        ) from exc
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
    target = import_target(spec)
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
    target = import_target(spec, "middleware")
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


def _json_lines(source: str) -> list[dict[str, Any]]:
    """Every line of source (a file, or - for stdin) as a JSON object; blank lines skipped. All
    are read and checked before anything is sent: a bad line sends nothing."""
    where = "stdin" if source == "-" else source
    try:
        if source == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(source, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--json-lines {where}: cannot read it: {exc}") from exc
    bodies = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--json-lines {where}, line {number}: not valid JSON: {exc}"
            ) from exc
        if not isinstance(body, dict):
            raise ConfigError(
                f"--json-lines {where}, line {number}: a {type(body).__name__}, not a JSON object"
            )
        bodies.append(body)
    if not bodies:
        raise ConfigError(f"--json-lines {where}: no message in it (one JSON object per line)")
    return bodies


def _bodies(args: argparse.Namespace) -> list[Any]:
    if args.json_lines is not None:
        if args.count != 1:
            raise ConfigError("--count repeats --json or --text; --json-lines sends each line once")
        return list(_json_lines(args.json_lines))
    if args.json is None:
        return [args.text] * args.count
    try:
        body = json.loads(args.json)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--json is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ConfigError("--json must be a JSON object")
    return [body] * args.count


def publish(args: argparse.Namespace, settings: AppSettings) -> int:
    """Send the bodies in confirmed batches of --batch-size over one connection: each batch is
    confirmed by the broker before its messages are printed, one JSON line each."""
    tenant = TenantId.parse(args.tenant)
    bodies = _bodies(args)
    broker_queue = settings.routing.physical(args.queue, tenant)
    progress = sys.stderr.isatty() and len(bodies) > args.batch_size
    transport = connected(settings)
    try:
        ttl = settings.message_ttl if settings.message_ttl.applies else None
        producer = TenantProducer(transport, routing=settings.routing, ttl=ttl)
        for start in range(0, len(bodies), args.batch_size):
            with producer.batch() as batch:
                sent = [
                    batch.send(args.queue, tenant, body, correlation_id=args.correlation_id)
                    for body in bodies[start : start + args.batch_size]
                ]
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
            if progress:
                done = start + len(sent)
                print(f"\rsent {done:,} of {len(bodies):,}", end="", file=sys.stderr, flush=True)
    finally:
        transport.close()
    if progress:
        print(file=sys.stderr)
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
    body.add_argument(
        "--json-lines",
        metavar="FILE",
        help="one JSON object per line, each sent as a message (- reads stdin); every line is "
        "checked before the first is sent",
    )
    cmd.add_argument(
        "--correlation-id", help="the message's correlation id (default: its message id)"
    )
    cmd.add_argument(
        "--count", type=positive_int, default=1, help="times --json or --text is sent (1)"
    )
    cmd.add_argument(
        "--batch-size",
        type=positive_int,
        default=500,
        help="messages confirmed by the broker at once, over one connection (500)",
    )
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
