"""A STOMP connection of its own for a request and its replies (statistics, management), apart
from the transport's connection and subscriptions."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from boost_tenancy.transports.stomp.connection import OnMessage, StompConnection
from boost_tenancy.transports.stomp.flavour import BrokerFlavour
from boost_tenancy.transports.stomp.link import Link
from boost_tenancy.transports.stomp.settings import StompSettings


@contextlib.contextmanager
def side_connection(
    settings: StompSettings,
    on_message: OnMessage,
    flavour: BrokerFlavour,
    refused: Callable[[str | None], Exception],
) -> Iterator[tuple[StompConnection, Link]]:
    """A connection of its own, for a request and its replies (statistics, management) that
    must not share the transport's connection and subscriptions, to a broker of flavour (else
    refused(server) is raised); closed when the block ends."""
    connection = StompConnection(settings, on_open=lambda link: None, on_message=on_message)
    connection.connect()
    try:
        link = connection.current()
        if link.flavour is not flavour:
            raise refused(connection.server)
        yield connection, link
    finally:
        connection.close()
