"""The AsyncAPI 3.0 document of processors: valid against AsyncAPI's own JSON Schema, each queue
addressed as the routing stores it, the tenantUUID header with the toolkit's grammar, payloads
from message models, and the command that prints it."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import structlog

from boost_tenancy import HandlerContext, IncomingMessage, Routing, TenantId, TenantProcessor
from boost_tenancy.cli import main
from boost_tenancy.errors import InvalidTenantError
from boost_tenancy.ops.asyncapi import AsyncApiDocument
from boost_tenancy.routing import Topology
from services.common.contract import BODIES, ROUTED_QUEUES
from services.extractor.processor import DocumentExtractor
from services.manager.processor import DocumentManager
from services.notifier.processor import Notifier
from services.professor.processor import DocumentProfessor
from services.thumbnailer.processor import Thumbnailer
from tests.conftest import unavailable

PIPELINE = [DocumentManager, DocumentExtractor, DocumentProfessor, Thumbnailer, Notifier]


@pytest.fixture(scope="module")
def validator() -> Any:
    """A validator of AsyncAPI's own 3.0.0 JSON Schema (@asyncapi/specs, fetched with npm)."""
    jsonschema = pytest.importorskip("jsonschema")
    if shutil.which("npm") is None:
        unavailable("npm fetches the AsyncAPI schema (@asyncapi/specs)")
    from devtools.asyncapi_spec import asyncapi_schema

    schema = asyncapi_schema()
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    saved: dict[str, Any] = structlog.get_config()
    yield
    structlog.configure(**saved)


def errors_of(validator: Any, document: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def test_the_sample_pipelines_document_is_valid_asyncapi_3(validator: Any) -> None:
    document = AsyncApiDocument(PIPELINE, schemas=BODIES, title="BOOST documents").build()
    assert errors_of(validator, document) == []
    assert document["asyncapi"] == "3.0.0"
    # Every queue of the pipeline, its dead letters and its quarantine.
    titles = {channel["title"] for channel in document["channels"].values()}
    assert {q for q in ROUTED_QUEUES} <= titles
    extracted = document["channels"]["evt_document_text_extracted"]
    assert extracted["address"] == "tenant.{tenant}.evt.document.text.extracted"
    assert set(extracted["parameters"]) == {"tenant"}
    operations = document["operations"]
    assert operations["DocumentExtractor_receive_cmd_document_extractText"]["action"] == "receive"
    assert operations["DocumentExtractor_send_evt_document_text_extracted"]["action"] == "send"
    assert operations["DocumentManager_receive_evt_document_text_extracted"]["action"] == "receive"
    payload = document["components"]["messages"]["evt_document_text_extracted_message"]["payload"]
    assert payload["required"] == ["documentUUID", "run", "textKey", "chars"]
    assert payload["properties"]["chars"] == {"type": "integer"}
    quarantine = document["channels"]["cmd_document_process_quarantine"]
    assert quarantine["address"] == "DLQ.cmd.document.process.quarantine"
    dead = document["channels"]["cmd_document_process_dead-letters"]
    assert dead["address"] == "DLQ.tenant.{tenant}.cmd.document.process"


@pytest.mark.parametrize("tenant", ["org-acme", "a", "9f1c2d3e-0000-4000-8000-000000000001", "x_y"])
def test_the_tenant_header_pattern_accepts_what_the_toolkit_accepts(tenant: str) -> None:
    pattern = AsyncApiDocument(PIPELINE).build()["components"]["messages"]
    header = next(iter(pattern.values()))["headers"]["properties"]["tenantUUID"]
    assert TenantId(tenant).value == tenant
    assert re.fullmatch(header["pattern"].strip("^$"), tenant)


@pytest.mark.parametrize("tenant", ["", "-a", "a b", "x' OR '1'='1", "a" * 65, "a.b"])
def test_the_tenant_header_pattern_refuses_what_the_toolkit_refuses(tenant: str) -> None:
    messages = AsyncApiDocument(PIPELINE).build()["components"]["messages"]
    header = next(iter(messages.values()))["headers"]["properties"]["tenantUUID"]
    with pytest.raises(InvalidTenantError):
        TenantId(tenant)
    matched = re.search(header["pattern"], tenant)
    assert matched is None or len(tenant) > header["maxLength"]


def test_a_shared_queue_is_addressed_by_its_name(validator: Any) -> None:
    routing = Routing(Topology.SHARED)
    document = AsyncApiDocument([Notifier], routing=routing).build()
    assert errors_of(validator, document) == []
    channel = document["channels"]["evt_document_ready"]
    assert channel["address"] == "evt.document.ready"
    assert "parameters" not in channel


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int


@dataclasses.dataclass
class Order:
    order: str
    lines: list[Line]
    note: str = ""


class Orders(TenantProcessor[Order]):
    queues: ClassVar[tuple[str, ...]] = ("orders.placed",)
    publishes: ClassVar[tuple[str, ...]] = ("orders.accepted",)

    def handle(self, message: IncomingMessage[Order], ctx: HandlerContext) -> None:
        """Not called."""


def test_a_dataclass_model_gives_the_payload_and_what_has_a_default_is_optional(
    validator: Any,
) -> None:
    document = AsyncApiDocument([Orders]).build()
    assert errors_of(validator, document) == []
    payload = document["components"]["messages"]["orders_placed_message"]["payload"]
    assert payload["required"] == ["order", "lines"]
    assert payload["properties"]["lines"] == {"type": "array"}
    # What it publishes without a schema: any object that names its tenant.
    accepted = document["components"]["messages"]["orders_accepted_message"]["payload"]
    assert accepted["type"] == "object"


def test_a_pydantic_models_schema_is_inlined(validator: Any) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Address(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        city: str

    class Customer(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        name: str
        address: Address

    document = AsyncApiDocument([Orders], schemas={"orders.accepted": Customer}).build()
    assert errors_of(validator, document) == []
    payload = document["components"]["messages"]["orders_accepted_message"]["payload"]
    assert "$defs" not in json.dumps(payload)
    assert payload["properties"]["address"]["properties"]["city"]["type"] == "string"


def test_the_command_prints_the_document_and_refuses_what_is_no_processor_class(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, validator: Any
) -> None:
    monkeypatch.setenv("BOOST_BROKER_URL", "stomp://127.0.0.1:1")  # never connected
    argv = [
        "asyncapi",
        "services.extractor.processor:DocumentExtractor",
        "--schemas",
        "services.common.contract:BODIES",
        "--title",
        "extractor",
    ]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert errors_of(validator, document) == []
    assert document["info"]["title"] == "extractor"
    assert main(["asyncapi", "services.common.contract:BODIES"]) == 2
    assert "not a TenantProcessor class" in capsys.readouterr().err
