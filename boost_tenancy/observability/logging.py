"""structlog set-up: JSON or console rendering, with tenant, queue, message id and attempt bound.

The dispatcher binds those fields with contextvars around each delivery, so every line a handler
logs carries them without the handler passing them along.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from boost_tenancy.errors import ConfigError

Renderer = Literal["json", "console"]


def configure_logging(renderer: str = "console", level: str = "INFO") -> None:
    """Configure structlog for an entry point; call once at start-up, never at import."""
    if renderer not in ("json", "console"):
        raise ConfigError(f"log renderer must be 'json' or 'console', got {renderer!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigError(f"unknown log level {level!r}")
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    if renderer == "json":
        processors.append(structlog.processors.JSONRenderer())
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
