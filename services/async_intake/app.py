"""The asynchronous intake: `POST /events` with a tenant's bearer token sends the JSON body to
the tenant's `events.received` queue and answers 202 once the broker confirmed it.

The send awaits on the AsyncTenantProducer's own threads, so the server's event loop keeps
serving other requests meanwhile. The tenant comes from the verified token, never the request.
Run it with any ASGI server, e.g. `uvicorn --factory services.async_intake.app:app_from_env`.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Final

from fastapi import Body, FastAPI, Header
from fastapi.responses import JSONResponse
from starlette.requests import Request

from boost_tenancy import AsyncTenantProducer, TenantProducer
from boost_tenancy.application import AppSettings, open_broker
from boost_tenancy.errors import MessageTooLargeError, PublishRefusedError, TransportError
from boost_tenancy.messages import PublishCheck
from boost_tenancy.producer import JsonBody
from boost_tenancy.quotas import PublishGuard
from boost_tenancy.routing import DEFAULT_ROUTING, Routing
from boost_tenancy.transports import Transport
from services.common.auth import AuthenticationError, JwtSettings, TenantAuthenticator

EVENTS_QUEUE: Final = "events.received"


def create_app(
    authenticator: TenantAuthenticator,
    open_transport: Callable[[], Transport],
    *,
    routing: Routing = DEFAULT_ROUTING,
    guard: PublishCheck | None = None,
    queue: str = EVENTS_QUEUE,
    send_threads: int = 4,
) -> FastAPI:
    """The intake app; its lifespan connects open_transport()'s transport and closes it.
    guard holds each tenant to its publishing limits (413 too large, 429 over a rate)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        transport = open_transport()
        # Connecting blocks (a TCP handshake, the CONNECTED frame): off the event loop.
        await asyncio.to_thread(transport.connect)
        producer = AsyncTenantProducer(
            TenantProducer(transport, routing=routing, guard=guard), max_threads=send_threads
        )
        app.state.producer = producer
        try:
            yield
        finally:
            await producer.aclose()
            await asyncio.to_thread(transport.close)

    app = FastAPI(title="boost-tenancy async intake", lifespan=lifespan)

    @app.exception_handler(AuthenticationError)
    async def unauthorized(request: Request, exc: AuthenticationError) -> JSONResponse:
        return JSONResponse(
            {"error": "unauthorized", "reason": exc.reason},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )

    @app.exception_handler(PublishRefusedError)
    async def refused(request: Request, exc: PublishRefusedError) -> JSONResponse:
        if isinstance(exc, MessageTooLargeError):
            return JSONResponse({"error": "message_too_large", "reason": exc.detail}, 413)
        return JSONResponse(
            {"error": "rate_limited", "reason": exc.detail},
            status_code=429,
            headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))},
        )

    @app.exception_handler(TransportError)
    async def unavailable(request: Request, exc: TransportError) -> JSONResponse:
        return JSONResponse({"error": "broker_unavailable"}, status_code=503)

    @app.post("/events", status_code=202)
    async def post_event(
        request: Request,
        event: Annotated[dict[str, Any], Body()],
        authorization: Annotated[str, Header()] = "",
    ) -> dict[str, str]:
        tenant = authenticator.authenticate(_bearer(authorization))
        producer: AsyncTenantProducer = request.app.state.producer
        body: JsonBody = event
        sent = await producer.send(queue, tenant, body)
        return {"messageId": sent.message_id, "tenant": tenant.value}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _bearer(header: str) -> str:
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("missing token")
    return token.strip()


def app_from_env() -> FastAPI:
    """The app the environment describes: the broker of BOOST_BROKER_URL (and BOOST_BROKER_*)
    with its routing, and tokens verified by BOOST_JWT_* (services/common/auth.py)."""
    settings = AppSettings.from_env(os.environ)
    return create_app(
        TenantAuthenticator(JwtSettings.from_env(os.environ)),
        lambda: open_broker(settings, os.environ),
        routing=settings.routing,
        guard=PublishGuard(settings.publish),
    )
