"""Request-reply with the tenant kept, on every transport: a TenantRequester's request reaches the
tenant's processor, whose ctx.reply comes back to that tenant's caller alone; two tenants asking
at once each get their own answers; a request nobody answers times out naming what it waited for;
a message claiming another tenant in a tenant's reply queue is quarantined, never returned."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from boost_tenancy import (
    HandlerContext,
    IncomingMessage,
    ProcessorRunner,
    RequestTimeoutError,
    RunnerSettings,
    TenantProcessor,
    TenantRequester,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.resilience.dead_letter import dead_letter_queue, quarantine_queue
from boost_tenancy.resilience.error_store import ErrorStore
from boost_tenancy.transports.base import Transport
from tests.conftest import Inbox, TransportFactory, unique_queue, wait_until

TENANTS = ("org-a", "org-b")


class Quote(TenantProcessor):
    """Answers each request with its tenant and its number doubled."""

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)

    def handle(self, message: IncomingMessage, ctx: HandlerContext) -> None:
        ctx.reply({"n": message.data["n"] * 2, "answeredFor": ctx.tenant.value})


@pytest.fixture
def serving(
    transport_factory: TransportFactory, store: ErrorStore
) -> Iterator[tuple[str, ProcessorRunner]]:
    queue = unique_queue("cmd.quote")
    runner = ProcessorRunner(
        Quote(queue),
        transport_factory(),
        list(TENANTS),
        error_store=store,
        settings=RunnerSettings(workers=2, prefetch=10),
    )
    runner.start()
    yield queue, runner
    runner.stop(grace_s=5)


@pytest.fixture
def requester(transport_factory: TransportFactory) -> Iterator[tuple[TenantRequester, Transport]]:
    transport = transport_factory()
    transport.connect()
    requester = TenantRequester(transport, name=unique_queue("contract"))
    yield requester, transport
    requester.close()
    transport.close()


def test_each_tenant_gets_its_own_replies_and_only_those(
    serving: tuple[str, ProcessorRunner], requester: tuple[TenantRequester, Transport]
) -> None:
    queue, _ = serving
    asking, _ = requester
    answers: dict[str, list[Any]] = {tenant: [] for tenant in TENANTS}
    failures: list[BaseException] = []

    def ask(tenant: str) -> None:
        try:
            for n in range(5):
                reply = asking.request(queue, tenant, {"n": n}, timeout=30)
                assert reply.tenant.value == tenant
                answers[tenant].append(reply.data)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=ask, args=(tenant,)) for tenant in TENANTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    for tenant in TENANTS:
        assert answers[tenant] == [
            {"n": n * 2, "answeredFor": tenant, "tenantUUID": tenant} for n in range(5)
        ]


def test_an_async_caller_awaits_its_reply(
    serving: tuple[str, ProcessorRunner], requester: tuple[TenantRequester, Transport]
) -> None:
    queue, _ = serving
    asking, _ = requester

    async def ask() -> object:
        return (await asking.arequest(queue, "org-b", {"n": 21}, timeout=30)).data

    assert asyncio.run(ask()) == {"n": 42, "answeredFor": "org-b", "tenantUUID": "org-b"}


def test_a_request_nobody_answers_times_out_naming_what_it_waited_for(
    requester: tuple[TenantRequester, Transport],
) -> None:
    asking, _ = requester
    queue = unique_queue("cmd.nobody")
    with pytest.raises(RequestTimeoutError, match=rf"no reply from '{queue}' for tenant org-a"):
        asking.request(queue, "org-a", {"n": 1}, timeout=0.5)


def test_a_message_claiming_another_tenant_in_a_reply_queue_is_quarantined(
    requester: tuple[TenantRequester, Transport], transport_factory: TransportFactory
) -> None:
    asking, transport = requester
    queue = unique_queue("cmd.nobody")
    reply_queue = f"tenant.org-a.{asking.reply_queue}"
    quarantined = Inbox()
    reader = transport_factory()
    reader.connect()
    reader.subscribe(
        quarantine_queue(reply_queue), selector=None, prefetch=10, on_delivery=quarantined
    )
    try:
        with pytest.raises(RequestTimeoutError):
            # Opens org-a's reply queue; its request is never answered.
            asking.request(queue, "org-a", {"n": 1}, timeout=0.2)
        forged = WireMessage(
            body='{"n": 999}', properties={"tenantUUID": "org-b"}, correlation_id="x"
        )
        transport.send(reply_queue, forged)
        assert wait_until(lambda: len(quarantined) == 1, 20)
        (copy,) = quarantined.items
        assert copy.properties["tenantUUID"] == "org-b"
        assert "names tenant 'org-b', not 'org-a'" in copy.properties["boostError"]
        reader.ack(copy)
    finally:
        reader.close()
    assert dead_letter_queue(reply_queue) != quarantine_queue(reply_queue)


def test_a_reply_to_a_message_naming_no_reply_queue_dead_letters_it_with_the_reason(
    serving: tuple[str, ProcessorRunner],
    transport_factory: TransportFactory,
) -> None:
    queue, runner = serving
    dead = Inbox()
    reader = transport_factory()
    reader.connect()
    tenant_queue = runner.routing.physical(queue, "org-a")
    reader.subscribe(dead_letter_queue(tenant_queue), selector=None, prefetch=10, on_delivery=dead)
    try:
        sender = transport_factory()
        sender.connect()
        for reply_to in (None, "cmd.elsewhere"):
            properties = {"tenantUUID": "org-a"}
            if reply_to is not None:
                properties["boostReplyTo"] = reply_to
            sender.send(tenant_queue, WireMessage(body='{"n": 1}', properties=properties))
        sender.close()
        assert wait_until(lambda: len(dead) == 2, 30)
        reasons = sorted(d.properties["boostError"] for d in dead.items)
        assert "names no reply queue" in reasons[0] or "names no reply queue" in reasons[1]
        assert any("'cmd.elsewhere' is not a reply queue" in r for r in reasons)
        for delivery in dead.items:
            reader.ack(delivery)
    finally:
        reader.close()
