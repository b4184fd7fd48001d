"""Resilience: redelivery strategies, dead-letter and quarantine queues, and the error store
where every failure is recorded."""

from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import (
    PostgresErrorStore,
    SQLiteErrorStore,
    open_error_store,
)
from boost_tenancy.resilience.records import ErrorStore, FailureOutcome, FailureRecord

__all__ = [
    "ErrorStore",
    "FailureOutcome",
    "FailureRecord",
    "PostgresErrorStore",
    "SQLiteErrorStore",
    "dead_letter_queue",
    "open_error_store",
    "quarantine_queue",
]
