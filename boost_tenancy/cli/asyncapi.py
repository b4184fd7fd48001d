"""asyncapi (the AsyncAPI 3.0 document of processors: what they consume and publish, with the
tenantUUID property, the dead letters and the quarantine)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from boost_tenancy.application.config import AppSettings
from boost_tenancy.cli.catalog import help_of
from boost_tenancy.cli.common import Subparsers
from boost_tenancy.cli.messaging import import_target
from boost_tenancy.errors import ConfigError
from boost_tenancy.ops.asyncapi import AsyncApiDocument
from boost_tenancy.processing.processor import TenantProcessor


def _processor_class(spec: str) -> type[TenantProcessor]:
    target = import_target(spec)
    if isinstance(target, TenantProcessor):
        return type(target)
    if isinstance(target, type) and issubclass(target, TenantProcessor):
        return target
    raise ConfigError(
        f"{spec!r} is a {type(target).__name__}, not a TenantProcessor class: the document is "
        "read from the class (its queues, publishes and model), which is never built"
    )


def _schemas(spec: str | None) -> Mapping[str, Any]:
    if spec is None:
        return {}
    target = import_target(spec, "schemas")
    if not isinstance(target, Mapping):
        raise ConfigError(
            f"--schemas {spec!r} is a {type(target).__name__}, not a mapping of queue to a "
            "message model (dataclass or pydantic model) or a JSON schema"
        )
    return target


def asyncapi(args: argparse.Namespace, settings: AppSettings) -> int:
    document = AsyncApiDocument(
        [_processor_class(spec) for spec in args.processor],
        routing=settings.routing,
        schemas=_schemas(args.schemas),
        title=args.title,
        version=args.doc_version,
    ).build()
    text = json.dumps(document, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0


def register(sub: Subparsers) -> None:
    cmd = sub.add_parser("asyncapi", help=help_of("asyncapi"))
    cmd.add_argument(
        "processor",
        nargs="+",
        help="module:ClassName of a TenantProcessor subclass (read, never built)",
    )
    cmd.add_argument(
        "--schemas",
        metavar="MODULE:MAPPING",
        help="a mapping of queue to its message model (dataclass or pydantic model) or JSON "
        "schema, for queues no processor's model describes",
    )
    cmd.add_argument("--title", default="boost-tenancy services", help="the document's title")
    cmd.add_argument(
        "--doc-version", default="1.0.0", help="the version of the API described (1.0.0)"
    )
    cmd.add_argument("--output", metavar="FILE", help="write it there instead of stdout")
    cmd.set_defaults(handler=asyncapi)
