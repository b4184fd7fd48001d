"""Round trip for several tenants on the local broker: each tenant receives only its own replies.

Run with `python -m services.roundtrip` (the README's main command does it after starting the
broker). Exits 1 if any tenant misses a reply or sees another tenant's.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid

from boost_tenancy import InvalidTenantError, ProcessorRunner, TenantProducer, open_error_store
from boost_tenancy.application import stomp_settings_from_env
from boost_tenancy.observability import configure_logging
from boost_tenancy.transports import StompTransport
from services.roundtrip.processors import REQUESTS, EchoProcessor, ReplyCollector

TENANTS = ("org-acme", "org-globex", "6f9619ff-8b86-d011-b42d-00cf4fc964ff")
PER_TENANT = (3, 5, 7)
TIMEOUT_S = 30.0


def main() -> int:
    configure_logging(os.environ.get("BOOST_LOG_FORMAT", "console"), "WARNING")
    settings = stomp_settings_from_env(os.environ)
    run_id = uuid.uuid4().hex[:8]
    store = open_error_store(os.path.join(tempfile.gettempdir(), f"roundtrip-{run_id}.sqlite3"))
    echo_runners = [
        ProcessorRunner(EchoProcessor(), StompTransport(settings), [t], error_store=store)
        for t in TENANTS
    ]
    collectors = {t: ReplyCollector(run_id) for t in TENANTS}
    collector_runners = [
        ProcessorRunner(c, StompTransport(settings), [t], error_store=store)
        for t, c in collectors.items()
    ]
    runners = echo_runners + collector_runners
    for runner in runners:
        runner.start()
    producer_transport = StompTransport(settings)
    producer_transport.connect()
    producer = TenantProducer(producer_transport)
    print(f"Sending requests on {REQUESTS} for {len(TENANTS)} tenants (one shared queue)...")
    with producer.batch() as batch:
        for round_ in range(max(PER_TENANT)):
            for tenant, count in zip(TENANTS, PER_TENANT, strict=True):
                if round_ < count:
                    batch.send(REQUESTS, tenant, {"n": round_, "run": run_id})
    try:
        producer.send(REQUESTS, "org-acme' OR '1'='1", {"n": -1})
        injection = "SENT (unexpected)"
    except InvalidTenantError as exc:
        injection = f"refused before reaching the broker: {exc}"
    deadline = time.monotonic() + TIMEOUT_S
    expected = sum(PER_TENANT)
    while time.monotonic() < deadline and sum(c.total() for c in collectors.values()) < expected:
        time.sleep(0.1)
    time.sleep(0.5)  # a late foreign reply would show up here
    for runner in runners:
        runner.stop(grace_s=5)
    producer_transport.close()
    store.close()

    failed = False
    print()
    print(f"{'tenant':<40} {'sent':>5} {'own replies':>12} {'foreign':>8}  result")
    for tenant, count in zip(TENANTS, PER_TENANT, strict=True):
        counts = collectors[tenant].counts
        own = counts[(tenant, tenant)]
        foreign = sum(n for (_, body_tenant), n in counts.items() if body_tenant != tenant)
        ok = own == count and foreign == 0
        failed |= not ok
        print(f"{tenant:<40} {count:>5} {own:>12} {foreign:>8}  {'ok' if ok else 'FAILED'}")
    print()
    print(f"Crafted tenant id \"org-acme' OR '1'='1\": {injection}")
    failed |= injection.startswith("SENT")
    print(
        "Round trip", "FAILED" if failed else "passed: every tenant received only its own replies"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
