"""Start-up shared by the pipeline services: settings from the environment, one runner.

Each service's __main__ calls run_service with a factory; configuration errors stop it at once
with the variable named, before any connection is made.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from boost_tenancy import BoostTenancyError, ConfigError, TenantId, TenantProcessor
from boost_tenancy.application import AppSettings, run_processor
from boost_tenancy.observability import configure_logging
from boost_tenancy.tenancy import parse_tenants


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSettings:
    """What the pipeline services read besides the toolkit's BOOST_* settings."""

    app: AppSettings
    tenants: tuple[TenantId, ...]
    blob_dir: Path
    document_store_url: str
    rules_dir: Path | None
    review_threshold: float

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ServiceSettings:
        """BOOST_TENANTS (required), BOOST_BLOB_DIR, BOOST_DOCUMENT_STORE, BOOST_RULES_DIR,
        BOOST_REVIEW_THRESHOLD; see docs/pipeline.md."""
        raw_tenants = env.get("BOOST_TENANTS", "")
        if not raw_tenants.strip():
            raise ConfigError("BOOST_TENANTS is required: a comma-separated list of tenant ids")
        threshold_text = env.get("BOOST_REVIEW_THRESHOLD", "0.6")
        try:
            threshold = float(threshold_text)
        except ValueError as exc:
            raise ConfigError(
                f"BOOST_REVIEW_THRESHOLD must be a number, got {threshold_text!r}"
            ) from exc
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"BOOST_REVIEW_THRESHOLD must be between 0 and 1, got {threshold}")
        rules = env.get("BOOST_RULES_DIR")
        return cls(
            app=AppSettings.from_env(env),
            tenants=parse_tenants(raw_tenants),
            blob_dir=Path(env.get("BOOST_BLOB_DIR", "var/blobs")),
            document_store_url=env.get("BOOST_DOCUMENT_STORE", "sqlite:///var/documents.sqlite3"),
            rules_dir=Path(rules) if rules else None,
            review_threshold=threshold,
        )


def run_service(factory: Callable[[ServiceSettings], TenantProcessor]) -> int:
    """Build the processor from the environment and run it until SIGTERM/SIGINT."""
    try:
        settings = ServiceSettings.from_env(os.environ)
        configure_logging(settings.app.log_format, settings.app.log_level)
        settings.blob_dir.mkdir(parents=True, exist_ok=True)
        processor = factory(settings)
        return run_processor(processor, settings.tenants, settings.app, os.environ)
    except BoostTenancyError as exc:
        print(f"{sys.argv[0]}: error: {exc}", file=sys.stderr)
        return 2
