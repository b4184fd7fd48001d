"""How long a STOMP connection waits between reconnection attempts."""

from __future__ import annotations

import random
from collections.abc import Callable


def reconnect_delay(
    attempt: int, initial_s: float, max_s: float, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait after the attempt-th failed reconnection (1-based).

    Doubles from initial_s up to max_s, then takes a random 50-100% of that, so clients that
    lost the same broker do not come back in step and the wait never exceeds max_s.
    """
    # The exponent is capped: 2.0**1024 overflows, and a long outage counts that many attempts.
    base = min(max_s, initial_s * 2.0 ** min(attempt - 1, 60))
    return base * (0.5 + rand() / 2)
