"""Running the programs the local broker needs (apt-get, javac, jar), their failures reported."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from devtools.broker_settings import LocalBrokerError


def run_checked(
    command: Sequence[str],
    *,
    timeout_s: float,
    advice: str,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run command with its output captured. A command that cannot start, runs past timeout_s or
    exits with another code than 0 is a LocalBrokerError naming it, then advice, then the last
    20 lines of its output."""
    shown = " ".join(command)
    try:
        result = subprocess.run(
            list(command),
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalBrokerError(f"`{shown}` failed ({exc}); {advice}") from exc
    if result.returncode != 0:
        output = "\n".join(result.stdout.splitlines()[-20:])
        raise LocalBrokerError(
            f"`{shown}` failed with exit code {result.returncode}; {advice}\n{output}"
        )
