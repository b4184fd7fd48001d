"""ops.broker_plugins: the plugins a transport needs, checked on its broker at a runner's start."""

from __future__ import annotations

import structlog

from boost_tenancy.errors import TransportError
from boost_tenancy.ops.broker_plugins import missing_broker_plugins
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from boost_tenancy.transports.artemis_management import STOMP_LOSS_PLUGIN
from boost_tenancy.transports.base import BrokerPluginLister
from boost_tenancy.transports.stomp import BrokerFlavour


class Broker(InMemoryTransport):
    """The in-memory Artemis, running the plugins given (or refusing to say)."""

    def __init__(
        self, plugins: list[str] | TransportError, flavour: BrokerFlavour = BrokerFlavour.ARTEMIS
    ) -> None:
        super().__init__(InMemoryBroker(flavour=flavour))
        self.plugins = plugins

    def broker_plugins(self) -> list[str]:
        if isinstance(self.plugins, TransportError):
            raise self.plugins
        return self.plugins


def test_stomp_on_artemis_needs_the_stomp_loss_plugin_and_nothing_else_does() -> None:
    needed = BrokerFlavour.ARTEMIS.capabilities.broker_plugins_needed
    assert [plugin.class_name for plugin in needed] == [STOMP_LOSS_PLUGIN]
    assert needed[0].see.startswith("docs/interop.md#")
    assert BrokerFlavour.CLASSIC.capabilities.broker_plugins_needed == ()


def test_a_broker_without_a_needed_plugin_is_warned_of_by_name() -> None:
    with structlog.testing.capture_logs() as logs:
        assert missing_broker_plugins(Broker(["io.other.Plugin"])) == [STOMP_LOSS_PLUGIN]
    (warning,) = [e for e in logs if e["event"] == "broker_plugin_missing"]
    assert warning["log_level"] == "warning"
    assert warning["plugin"] == STOMP_LOSS_PLUGIN
    assert "restarts" in warning["without_it"]


def test_a_broker_running_it_is_not_warned_of() -> None:
    with structlog.testing.capture_logs() as logs:
        assert missing_broker_plugins(Broker(["io.other.Plugin", STOMP_LOSS_PLUGIN])) == []
    assert logs == []


def test_a_broker_that_refuses_to_say_is_reported_unchecked_not_missing() -> None:
    refused = TransportError("Artemis refused management operation: AMQ229032 no manage")
    with structlog.testing.capture_logs() as logs:
        assert missing_broker_plugins(Broker(refused)) is None
    (event,) = logs
    assert (event["event"], event["log_level"]) == ("broker_plugins_not_checked", "info")
    assert "AMQ229032" in event["error"]


def test_the_in_memory_artemis_models_a_broker_running_it() -> None:
    transport = InMemoryTransport(InMemoryBroker(flavour=BrokerFlavour.ARTEMIS))
    transport.connect()
    try:
        assert isinstance(transport, BrokerPluginLister)
        assert STOMP_LOSS_PLUGIN in transport.broker_plugins()
        assert missing_broker_plugins(transport) == []
    finally:
        transport.close()


def test_a_transport_needing_nothing_asks_nothing() -> None:
    assert BrokerFlavour.OTHER.capabilities.broker_plugins_needed == ()
    with structlog.testing.capture_logs() as logs:
        classic = Broker(TransportError("asked"), BrokerFlavour.CLASSIC)
        assert missing_broker_plugins(classic) == []
    assert logs == []
