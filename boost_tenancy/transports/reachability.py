"""Why a broker address cannot be reached, in a few words: the cause a client library's own
error often leaves out (stomp.py's ConnectFailedException has no message; proton's event loop
fails on a host name that does not resolve)."""

from __future__ import annotations

import socket


def unresolvable(host: str) -> str | None:
    """'unknown host ...' when host does not resolve, else None."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"unknown host {host!r} ({exc.strerror})"
    except (OSError, UnicodeError) as exc:
        return f"unusable host {host!r} ({exc})"
    return None


def tcp_failure(host: str, port: int, timeout_s: float) -> str | None:
    """Why a TCP connection to host:port fails (unknown host, refused, no answer in time), or
    None when one is made (then the failure is above TCP: TLS, the protocol, the login)."""
    if (reason := unresolvable(host)) is not None:
        return reason
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return f"connection refused by {host}:{port} (nothing listens there)"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
