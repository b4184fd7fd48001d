"""The FastAPI intake (services/async_intake): an event is sent for the token's tenant and
answered 202 once confirmed, other requests are served while a send waits for its confirmation,
and refusals map to 401, 413 and 429."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from boost_tenancy.quotas import PublishGuard, PublishLimits
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.async_intake.app import EVENTS_QUEUE, create_app
from services.common.auth import TenantAuthenticator
from tests.async_processors import HOLD_S, HeldConfirmations
from tests.unit.services.tokens import hs256_settings, hs_token

AUTH = TenantAuthenticator(hs256_settings())


def bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {hs_token(tenant)}"}


def events_of(broker: InMemoryBroker, tenant: str) -> list[dict[str, Any]]:
    queue = DEFAULT_ROUTING.physical(EVENTS_QUEUE, tenant)
    return [json.loads(str(m.body)) for m in broker.messages(queue)]


async def call(app: Any, *requests: tuple[str, str, dict[str, Any]]) -> list[httpx.Response]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://intake"
        ) as client,
    ):
        return [await client.request(m, url, **kw) for m, url, kw in requests]


def test_an_event_is_sent_for_the_tokens_tenant_and_answered_once_confirmed(
    broker: InMemoryBroker,
) -> None:
    app = create_app(AUTH, lambda: InMemoryTransport(broker))
    (response,) = asyncio.run(
        call(app, ("POST", "/events", {"json": {"kind": "signup"}, "headers": bearer("org-a")}))
    )
    assert response.status_code == 202, response.text
    assert response.json()["tenant"] == "org-a"
    (event,) = events_of(broker, "org-a")
    assert event == {"kind": "signup", "tenantUUID": "org-a"}


def test_other_requests_are_served_while_a_send_waits_for_its_confirmation(
    broker: InMemoryBroker,
) -> None:
    held = HeldConfirmations(broker)
    app = create_app(AUTH, lambda: held)

    async def scenario() -> tuple[int, list[int]]:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://intake"
            ) as client,
        ):
            posting = asyncio.create_task(
                client.post("/events", json={"n": 1}, headers=bearer("org-a"))
            )
            await asyncio.to_thread(held.waiting.wait, HOLD_S)
            served = [(await client.get("/healthz")).status_code for _ in range(3)]
            assert not posting.done(), "the event is answered only once confirmed"
            held.release.set()
            return (await posting).status_code, served

    posted, served = asyncio.run(scenario())
    assert (posted, served) == (202, [200, 200, 200])
    assert len(events_of(broker, "org-a")) == 1


def test_a_request_without_a_valid_token_is_refused_and_nothing_is_sent(
    broker: InMemoryBroker,
) -> None:
    app = create_app(AUTH, lambda: InMemoryTransport(broker))
    forged = {"Authorization": "Bearer " + hs_token("org-a", secret="x" * 40)}
    missing, bad = asyncio.run(
        call(
            app,
            ("POST", "/events", {"json": {"n": 1}}),
            ("POST", "/events", {"json": {"n": 1}, "headers": forged}),
        )
    )
    assert (missing.status_code, bad.status_code) == (401, 401)
    assert events_of(broker, "org-a") == []


def test_publishing_limits_answer_413_and_429(broker: InMemoryBroker) -> None:
    guard = PublishGuard(PublishLimits(max_message_bytes=200, messages_per_s=1, burst_s=1))
    app = create_app(AUTH, lambda: InMemoryTransport(broker), guard=guard)
    big, first, second = asyncio.run(
        call(
            app,
            ("POST", "/events", {"json": {"text": "x" * 400}, "headers": bearer("org-a")}),
            ("POST", "/events", {"json": {"n": 1}, "headers": bearer("org-a")}),
            ("POST", "/events", {"json": {"n": 2}, "headers": bearer("org-a")}),
        )
    )
    assert big.status_code == 413
    assert first.status_code == 202
    assert second.status_code == 429
    assert int(second.headers["Retry-After"]) >= 1
    assert len(events_of(broker, "org-a")) == 1
