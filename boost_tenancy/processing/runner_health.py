"""RunnerHealth: a runner's state at one moment, as the liveness and readiness probes check it
and as the gauges it adds to /metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerHealth:
    """A runner's state at one moment, for liveness and readiness probes and their gauges."""

    started: bool
    stopped: bool
    """stop() began: the runner takes nothing more."""
    workers: int
    """Worker threads started (none before start())."""
    workers_alive: int
    connected: bool
    """The transport's connection is up (ConnectionStatus); without it, started and not
    stopped."""
    subscriptions: int
    """What the runner should consume now: one subscription per (tenant, queue) not drained."""
    subscriptions_open: int
    """Those consuming on the current connection now."""

    def liveness(self) -> dict[str, bool]:
        """Checks that fail only when restarting the process helps: the runner stopped, or a
        worker thread ended while running (supervise() replaces it within a tick)."""
        return {
            "running": not self.stopped,
            "workers": self.stopped or self.workers_alive == self.workers,
        }

    def readiness(self) -> dict[str, bool]:
        """Checks that fail while the runner cannot take messages: not started yet, the broker
        connection down (reconnecting), a subscription not (re-)opened."""
        return {
            "started": self.started and not self.stopped,
            "connected": self.connected,
            # >=: a draining pair keeps its subscription until what it took is settled.
            "subscriptions": self.started and self.subscriptions_open >= self.subscriptions,
        }

    def prometheus(self) -> str:
        """boost_tenancy_connected, boost_tenancy_subscriptions(_open), boost_tenancy_workers."""
        gauges = (
            ("connected", "1 while the runner's broker connection is up, else 0.", self.connected),
            ("subscriptions", "Subscriptions the runner consumes.", self.subscriptions),
            (
                "subscriptions_open",
                "Subscriptions consuming on the current connection.",
                self.subscriptions_open,
            ),
            ("workers_alive", "Worker threads alive.", self.workers_alive),
        )
        lines: list[str] = []
        for name, help_text, value in gauges:
            metric = f"boost_tenancy_{name}"
            lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
            lines.append(f"{metric} {int(value)}")
        return "\n".join(lines) + "\n"
