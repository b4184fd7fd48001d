"""The IntegrationsServer's per-tenant request budgets (in flight, per minute; 429 with
Retry-After) and GET /v1/fairness, the caller's own view of its limits and accounting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from boost_tenancy import (
    ConfigError,
    MessageTooLargeError,
    PublishGuard,
    PublishLimits,
    TenantId,
    TenantProducer,
)
from boost_tenancy.messages import WireMessage
from boost_tenancy.quotas.limits import UNLIMITED_PUBLISHING
from boost_tenancy.quotas.policy import NO_POLICY, TenantPolicy
from boost_tenancy.quotas.ttl import MessageTtl, effective_ttl
from boost_tenancy.routing import Routing, Topology
from boost_tenancy.testing import InMemoryBroker, InMemoryTransport
from services.common.auth import TenantAuthenticator
from services.common.blobs import LocalBlobStore
from services.common.documents import DocumentStore, open_document_store
from services.integrations import create_app
from services.integrations.budget import RequestBudget, RequestBudgets
from tests.conftest import ManualClock
from tests.unit.services.tokens import hs256_settings, hs_token

A = TenantId("org-a")
B = TenantId("org-b")


# -- the budget on its own ------------------------------------------------------------------------
def test_budgets_from_env_default_and_refuse_negatives() -> None:
    assert RequestBudgets.from_env({}) == RequestBudgets(in_flight=8, per_minute=600)
    assert RequestBudgets.from_env(
        {"BOOST_HTTP_TENANT_IN_FLIGHT": "0", "BOOST_HTTP_TENANT_REQUESTS_PER_MIN": "30"}
    ) == RequestBudgets(in_flight=0, per_minute=30)
    for variable in ("BOOST_HTTP_TENANT_IN_FLIGHT", "BOOST_HTTP_TENANT_REQUESTS_PER_MIN"):
        with pytest.raises(ConfigError, match=variable):
            RequestBudgets.from_env({variable: "-1"})
    assert not RequestBudgets(in_flight=0, per_minute=0).enforcing


def test_in_flight_is_per_tenant_and_given_back_on_leave() -> None:
    budget = RequestBudget(RequestBudgets(in_flight=2, per_minute=0))
    assert budget.enter(A) is None
    assert budget.enter(A) is None
    refused = budget.enter(A)
    assert refused is not None
    assert (refused.reason, refused.retry_after_header) == ("in_flight", "1")
    assert budget.enter(B) is None  # another tenant is not held back
    budget.leave(A)
    assert budget.enter(A) is None
    assert budget.usage(A) == {
        "inFlight": 2,
        "admitted": 3,
        "refusedInFlight": 1,
        "refusedPerMinute": 0,
    }


def test_per_minute_refills_over_the_minute() -> None:
    clock = ManualClock()
    budget = RequestBudget(RequestBudgets(in_flight=0, per_minute=3), clock=clock)
    for _ in range(3):
        assert budget.enter(A) is None
        budget.leave(A)
    refused = budget.enter(A)
    assert refused is not None
    assert refused.reason == "per_minute"
    assert refused.retry_after_header == "20"  # one request every 20 s
    assert budget.usage(A)["inFlight"] == 0  # a refusal holds no slot
    clock.advance(20)
    assert budget.enter(A) is None


# -- over HTTP ------------------------------------------------------------------------------------
@dataclass
class Server:
    client: FlaskClient
    budget: RequestBudget
    guard: PublishGuard
    clock: ManualClock
    store: DocumentStore
    policies: dict[TenantId, TenantPolicy]

    def get(self, path: str, tenant: str | None = "org-a") -> TestResponse:
        headers = {} if tenant is None else {"Authorization": f"Bearer {hs_token(tenant)}"}
        return self.client.get(path, headers=headers)


def build(tmp_path: Path, budgets: RequestBudgets, limits: PublishLimits) -> Server:
    broker = InMemoryBroker()
    transport = InMemoryTransport(broker)
    transport.connect()
    clock = ManualClock()
    policies: dict[TenantId, TenantPolicy] = {}
    guard = PublishGuard(
        limits, clock=clock, policy_of=lambda tenant: policies.get(tenant, NO_POLICY)
    )
    budget = RequestBudget(budgets, clock=clock)
    store = open_document_store(f"sqlite:///{tmp_path / 'documents.sqlite3'}")
    (tmp_path / "blobs").mkdir()
    app = create_app(
        authenticator=TenantAuthenticator(hs256_settings()),
        documents=store,
        blobs=LocalBlobStore(tmp_path / "blobs"),
        producer=TenantProducer(
            transport,
            routing=Routing(Topology.SHARED),
            guard=guard,
            ttl=effective_ttl(MessageTtl(), lambda tenant: policies.get(tenant, NO_POLICY)),
        ),
        guard=guard,
        budget=budget,
    )
    return Server(app.test_client(), budget, guard, clock, store, policies)


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    built: list[Server] = []

    def factory(budgets: RequestBudgets, limits: PublishLimits = UNLIMITED_PUBLISHING) -> Server:
        folder = tmp_path / f"s{len(built)}"
        folder.mkdir()
        server = build(folder, budgets, limits)
        built.append(server)
        return server

    yield factory
    for server in built:
        server.store.close()


def test_a_tenant_over_its_requests_in_flight_gets_429_before_any_work(make: Any) -> None:
    server: Server = make(RequestBudgets(in_flight=1, per_minute=0))
    assert server.budget.enter(A) is None  # one of org-a's requests is being served
    response = server.get("/documents")
    assert response.status_code == 429
    assert response.get_json()["error"] == "rate_limited"
    assert "in flight" in response.get_json()["reason"]
    assert response.headers["Retry-After"] == "1"
    assert server.get("/documents", "org-b").status_code == 200
    server.budget.leave(A)
    assert server.get("/documents").status_code == 200
    # Every request gave its slot back, a 404 included.
    assert server.get("/documents/0b9d5c52-6f1e-4c1a-9a53-3c8f7e2b1d40").status_code == 404
    assert server.budget.usage(A)["inFlight"] == 0


def test_a_tenant_over_its_requests_a_minute_gets_429_until_the_budget_refills(
    make: Any,
) -> None:
    server: Server = make(RequestBudgets(in_flight=0, per_minute=2))
    assert server.get("/documents").status_code == 200
    assert server.get("/documents").status_code == 200
    response = server.get("/documents")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "30"
    assert server.get("/documents", "org-b").status_code == 200
    server.clock.advance(30)
    assert server.get("/documents").status_code == 200


def test_an_unauthenticated_request_spends_no_budget(make: Any) -> None:
    server: Server = make(RequestBudgets(in_flight=0, per_minute=1))
    assert server.get("/documents", None).status_code == 401
    assert server.get("/documents").status_code == 200


def test_fairness_shows_the_callers_limits_and_accounting_only(make: Any) -> None:
    server: Server = make(
        RequestBudgets(in_flight=4, per_minute=100),
        PublishLimits(messages_per_s=1, burst_s=1, max_message_bytes=1_000),
    )
    server.policies[A] = TenantPolicy(max_message_bytes=64)
    with pytest.raises(MessageTooLargeError, match="over the limit of 64 bytes"):
        server.guard.check(A, "cmd.x", [WireMessage(body="x" * 100, properties={})])
    view = server.get("/v1/fairness").get_json()
    assert view == {
        "tenant": "org-a",
        "enforcing": True,
        "publishing": {
            "messagesPerS": 1,
            "bytesPerS": 0.0,
            "burstS": 1,
            "maxMessageBytes": 64,
            "maxQueuedMessages": 0,
        },
        "messageTtlS": 0.0,
        "requests": {"inFlight": 4, "perMinute": 100},
        "accounting": {
            "requests": {
                "inFlight": 1,  # this request
                "admitted": 1,
                "refusedInFlight": 0,
                "refusedPerMinute": 0,
            },
            "publishRefused": {"rate": 0, "size": 1, "backlog": 0},
        },
    }
    server.policies[TenantId("org-b")] = TenantPolicy(ttl_s=30)
    other = server.get("/v1/fairness", "org-b").get_json()
    assert other["tenant"] == "org-b"
    assert other["messageTtlS"] == 30.0, "its policy's time-to-live"
    assert other["publishing"]["maxMessageBytes"] == 1_000
    assert other["accounting"]["publishRefused"] == {"rate": 0, "size": 0, "backlog": 0}
    assert other["accounting"]["requests"]["admitted"] == 1
    assert server.get("/v1/fairness", None).status_code == 401


def test_fairness_without_limits_says_nothing_is_enforced(make: Any) -> None:
    server: Server = make(RequestBudgets(in_flight=0, per_minute=0))
    view = server.get("/v1/fairness").get_json()
    assert view["enforcing"] is False
    assert view["publishing"]["messagesPerS"] == 0.0


def test_openapi_describes_the_view_and_429_on_every_authenticated_route(make: Any) -> None:
    server: Server = make(RequestBudgets())
    document = server.get("/openapi.json").get_json()
    assert "Fairness" in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for operation in operations.values():
            if operation.get("security") == []:
                continue  # public: no budget
            assert operation["responses"]["429"] == {
                "$ref": "#/components/responses/RateLimited"
            }, path
