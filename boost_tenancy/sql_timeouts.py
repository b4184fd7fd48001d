"""How long a SQL backend (sqlstore) lets the database keep a caller waiting."""

from __future__ import annotations

from dataclasses import dataclass

from boost_tenancy.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class SqlTimeouts:
    """How long a backend lets the database keep a caller waiting; None means without limit.

    The defaults bound every wait, generously: a PostgreSQL that accepts TCP and never answers
    once hung the tier, policy and usage stores' callers for good, their refresh threads and the
    fairness gate's close() with them. A store on a per-message path sets tighter ones (the
    error store's).
    """

    connect_s: float | None = 5.0
    """PostgreSQL: bound on opening a connection, TCP and start-up handshake included.

    Passed as libpq's connect_timeout, which counts whole seconds (rounded up, at least 2) and
    applies to each address a host name resolves to.
    """
    statement_s: float | None = 30.0
    """PostgreSQL: the server-side statement_timeout of every connection, lock waits included."""
    dead_peer_s: float | None = 30.0
    """PostgreSQL: drop a connection whose sent data stays unacknowledged this long.

    libpq's tcp_user_timeout (Linux): a network partition otherwise holds a statement for the
    kernel's retransmission limit, about 15 minutes.
    """
    busy_s: float = 30.0
    """SQLite: how long a statement waits for another connection's write lock."""
    lock_wait_s: float | None = 75.0
    """How long a caller waits for the connection while another caller's statement runs (one
    statement, a reconnect and the statement again take at most about 65 s by default)."""
    close_wait_s: float | None = 35.0
    """How long close() waits for a running statement before breaking the connection under it,
    and then again for that statement to give the connection back (more than busy_s: SQLite
    cannot interrupt a statement waiting for a write lock)."""

    def __post_init__(self) -> None:
        names = ("connect_s", "statement_s", "dead_peer_s", "busy_s", "lock_wait_s", "close_wait_s")
        for name in names:
            value = getattr(self, name)
            # "not value > 0" also refuses NaN, which would otherwise mean "no limit" to a wait.
            if value is not None and not value > 0:
                raise ConfigError(f"SqlTimeouts.{name} must be positive or None, got {value!r}")
