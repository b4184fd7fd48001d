"""Test support: an in-memory broker, modelling ActiveMQ Classic or Artemis, and its transport;
they pass the same contract suite as STOMP.

Never imported by production code.
"""

from boost_tenancy.testing.memory import InMemoryBroker
from boost_tenancy.testing.transport import InMemoryTransport
from boost_tenancy.transports.stomp.flavour import BrokerFlavour

__all__ = ["BrokerFlavour", "InMemoryBroker", "InMemoryTransport"]
