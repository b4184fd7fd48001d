"""The cause of an unreachable broker address, named in a few words."""

from __future__ import annotations

import logging
import socket

import pytest

from boost_tenancy import open_transport
from boost_tenancy.errors import TransportError
from boost_tenancy.transports.reachability import tcp_failure, unresolvable


def test_an_unknown_host_is_named() -> None:
    assert unresolvable("no-such-host.invalid") is not None
    assert "unknown host 'no-such-host.invalid'" in (
        tcp_failure("no-such-host.invalid", 1, 1) or ""
    )
    assert unresolvable("127.0.0.1") is None


def test_a_refused_port_is_named_and_a_listening_one_is_no_failure() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert tcp_failure("127.0.0.1", port, 1) is None
    assert tcp_failure("127.0.0.1", port, 1) == (
        f"connection refused by 127.0.0.1:{port} (nothing listens there)"
    )


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return int(server.getsockname()[1])


@pytest.mark.parametrize("scheme", ["stomp", "amqp"])
def test_a_transport_to_a_closed_port_says_it_was_refused_in_one_line(
    scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The error names the address and the cause; no line of the client library's own comes
    before it (stomp.py's 'could not connect to host', proton's 'Connection refused to all
    addresses')."""
    port = free_port()
    transport = open_transport(
        f"{scheme}://127.0.0.1:{port}", {"BOOST_BROKER_CONNECT_TIMEOUT_S": "3"}
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(TransportError) as failure:
        transport.connect()
    transport.close()
    assert f"connection refused by 127.0.0.1:{port} (nothing listens there)" in str(failure.value)
    assert "\n" not in str(failure.value)
    assert not [r for r in caplog.records if "could not connect to host" in r.getMessage()]
