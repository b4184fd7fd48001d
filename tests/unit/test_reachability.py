"""The cause of an unreachable broker address, named in a few words."""

from __future__ import annotations

import socket

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
