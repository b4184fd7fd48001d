"""Observability: structured, context-bound logging."""

from boost_tenancy.observability.logging import configure_logging

__all__ = ["configure_logging"]
