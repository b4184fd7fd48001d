"""JSON message bodies: a mapping, dataclass instance or pydantic model encoded with its tenant
stamped in, and a received body decoded with any tenant it names checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, cast

from boost_tenancy import codec
from boost_tenancy.errors import MessageEncodeError
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId, check_body_tenant


class DataclassInstance(Protocol):
    """Any instance of a stdlib dataclass."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


class PydanticModel(Protocol):
    """Any pydantic v2 model instance (the `models` extra); the toolkit never imports pydantic
    for it."""

    def model_dump(self, *, mode: str = ..., by_alias: bool | None = ...) -> dict[str, Any]: ...


def json_object(body: object) -> Mapping[str, Any] | None:
    """A body as the JSON object it is sent as: a mapping as it is, a pydantic model as its
    JSON-mode dump by alias (what its model_validate reads back), a dataclass instance as its
    fields; None for anything else."""
    if type(body) is dict or isinstance(body, Mapping):  # a dict without the ABC's check
        return cast(Mapping[str, Any], body)
    if dataclasses.is_dataclass(body) and not isinstance(body, type):
        return {item.name: getattr(body, item.name) for item in dataclasses.fields(body)}
    dump = getattr(body, "model_dump", None)
    if callable(dump) and hasattr(type(body), "model_fields"):
        dumped = dump(mode="json", by_alias=True)
        if isinstance(dumped, Mapping):
            return cast(Mapping[str, Any], dumped)
    return None


def encode_json_body(
    tenant: TenantId, body: Mapping[str, Any] | DataclassInstance | PydanticModel
) -> str:
    """Compact JSON text (boost_tenancy.codec) with the tenant in the body too; a body naming
    another tenant is refused, one holding what JSON cannot carry raises MessageEncodeError."""
    mapping = json_object(body)
    if mapping is None:
        raise MessageEncodeError(
            f"cannot encode a {type(body).__name__} as a JSON object: send a mapping, a "
            "dataclass instance or a pydantic model"
        )
    check_body_tenant(mapping, tenant, against="the message tenant")
    return codec.encode({**mapping, TENANT_PROPERTY: tenant.value})


def decode_json_body(text: str, tenant: TenantId) -> Any:
    """Parse a JSON body and check any tenant it names; raises MessageDecodeError or mismatch."""
    data = codec.decode(text)
    if isinstance(data, dict):
        check_body_tenant(data, tenant, against="the tenantUUID property")
    return data
