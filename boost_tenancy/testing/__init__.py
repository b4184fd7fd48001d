"""Test support: an in-memory broker and transport that pass the same contract suite as STOMP.

Never imported by production code.
"""

from boost_tenancy.testing.memory import InMemoryBroker, InMemoryTransport

__all__ = ["InMemoryBroker", "InMemoryTransport"]
