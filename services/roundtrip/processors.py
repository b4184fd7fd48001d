"""The round-trip sample's processors: an echo service and a reply collector."""

from __future__ import annotations

import threading
from collections import Counter

from boost_tenancy import HandlerContext, IncomingMessage, TenantProcessor

REQUESTS = "demo.requests"
REPLIES = "demo.replies"


class EchoProcessor(TenantProcessor):
    """Answers each request on demo.replies; the toolkit stamps the tenant and correlation id."""

    queues = (REQUESTS,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.log.info("request_handled", n=message.data.get("n"))
        reply = {"n": message.data.get("n"), "run": message.data.get("run")}
        ctx.publish(REPLIES, {**reply, "answeredFor": ctx.tenant.value})


class ReplyCollector(TenantProcessor):
    """Counts this run's replies per (subscription tenant, tenant named in the body)."""

    queues = (REPLIES,)

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        if message.data.get("run") != self.run_id:
            return  # left over from an earlier, interrupted run
        with self._lock:
            self.counts[(ctx.tenant.value, str(message.data.get("answeredFor")))] += 1

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())
