"""The message envelope: tenant stamped into JSON bodies and reserved properties, bodies naming
another tenant refused, reserved properties out of reach of applications, queue names checked."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boost_tenancy.errors import (
    ConfigError,
    InvalidTenantError,
    MessageDecodeError,
    TenantMismatchError,
)
from boost_tenancy.header_values import check_id, derived_id, is_valid_id, new_id, sanitized_id
from boost_tenancy.json_bodies import decode_json_body, encode_json_body
from boost_tenancy.messages import (
    ATTEMPT_PROPERTY,
    BROKER_INSTRUCTIONS,
    MESSAGE_ID_PROPERTY,
    RESERVED_PROPERTIES,
    IncomingMessage,
    Message,
    build_message,
    check_properties,
    check_queue_name,
)
from boost_tenancy.processing.processor import HandlerContext
from boost_tenancy.selectors import TENANT_PROPERTY
from boost_tenancy.tenancy import TenantId

ORG_A = TenantId("org-A")


# -- JSON bodies ----------------------------------------------------------------------------------
def test_mapping_body_becomes_json_carrying_the_tenant() -> None:
    message = build_message("org-A", {"n": 1, "text": "Zürich"})
    assert isinstance(message.body, str)
    assert json.loads(message.body) == {"n": 1, "text": "Zürich", "tenantUUID": "org-A"}
    assert "Zürich" in message.body, "non-ASCII text is kept, not escaped"
    assert message.tenant == ORG_A


@pytest.mark.parametrize("key", ["tenantUUID", "organizationId"])
def test_body_naming_the_same_tenant_is_accepted(key: str) -> None:
    data = json.loads(encode_json_body(ORG_A, {key: "org-A", "n": 1}))
    assert data[key] == "org-A"
    assert data["tenantUUID"] == "org-A"


@pytest.mark.parametrize("key", ["tenantUUID", "organizationId"])
@pytest.mark.parametrize("claimed", ["org-B", "ORG-A", "", 0, ["org-A"]])
def test_body_naming_another_tenant_is_refused(key: str, claimed: object) -> None:
    with pytest.raises(TenantMismatchError, match=f"body field {key}="):
        encode_json_body(ORG_A, {key: claimed})
    with pytest.raises(TenantMismatchError):
        build_message(ORG_A, {key: claimed})


def test_body_with_a_null_tenant_field_gets_the_message_tenant() -> None:
    assert json.loads(encode_json_body(ORG_A, {"tenantUUID": None}))["tenantUUID"] == "org-A"


def test_text_and_bytes_bodies_are_sent_as_given() -> None:
    assert build_message(ORG_A, '{"tenantUUID": "org-B"}').body == '{"tenantUUID": "org-B"}'
    assert build_message(ORG_A, b"\x00\xff").body == b"\x00\xff"


@pytest.mark.parametrize("body", [1, None, ["a"], 1.5])
def test_other_body_types_are_refused(body: object) -> None:
    with pytest.raises(TypeError, match="message body must be a mapping, a dataclass instance"):
        build_message(ORG_A, body)  # type: ignore[arg-type]


def test_build_message_validates_the_tenant() -> None:
    with pytest.raises(InvalidTenantError, match="quote"):
        build_message("org'A", {"n": 1})


def test_text_body_with_nul_is_refused() -> None:
    with pytest.raises(ConfigError, match="cannot contain NUL"):
        build_message(ORG_A, "a\x00b")


def test_bytes_body_with_nul_is_accepted() -> None:
    assert build_message(ORG_A, b"a\x00b").body == b"a\x00b"


# -- properties -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RESERVED_PROPERTIES))
def test_reserved_property_cannot_be_set_by_an_application(name: str) -> None:
    with pytest.raises(ConfigError, match=f"message property {name!r} is reserved"):
        check_properties({name: "x"})
    with pytest.raises(ConfigError, match="reserved"):
        build_message(ORG_A, {}, properties={name: "org-B"})


@pytest.mark.parametrize("name", ["transaction", "receipt", "destination", "subscription", "ack"])
def test_a_frame_header_cannot_be_an_application_property(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name!r} is a frame header of the wire protocol"):
        build_message(ORG_A, {}, properties={name: "tx-1"})


def test_reserved_names_cover_tenant_id_attempt_and_dead_letter_fields() -> None:
    assert {
        "tenantUUID",
        "boostMessageId",
        "boostAttempt",
        "boostOriginalQueue",
        "boostDeadLetterReason",
        "boostErrorType",
        "boostError",
    } <= RESERVED_PROPERTIES


@pytest.mark.parametrize("name", ["kind OR 1=1", "JMSType", "1x", "NULL", "a-b"])
def test_property_name_that_is_not_an_identifier_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid message property name"):
        build_message(ORG_A, {}, properties={name: "x"})


def test_non_string_property_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be a string, got 3"):
        check_properties({"count": 3})  # type: ignore[dict-item]


def test_application_properties_are_kept() -> None:
    message = build_message(ORG_A, {}, properties={"kind": "invoice", "region": "eu"})
    assert dict(message.properties) == {"kind": "invoice", "region": "eu"}


# -- to_wire --------------------------------------------------------------------------------------
def test_to_wire_stamps_tenant_message_id_and_attempt() -> None:
    message = build_message(ORG_A, {"n": 1}, message_id="m-1", properties={"kind": "x"})
    wire = message.to_wire()
    assert dict(wire.properties) == {
        "kind": "x",
        TENANT_PROPERTY: "org-A",
        MESSAGE_ID_PROPERTY: "m-1",
        ATTEMPT_PROPERTY: "1",
    }
    assert wire.body == message.body
    assert wire.persistent is True


def test_to_wire_reserved_properties_win_over_application_properties() -> None:
    message = Message(
        tenant=ORG_A,
        body="x",
        message_id="m-1",
        attempt=3,
        properties={TENANT_PROPERTY: "org-B", MESSAGE_ID_PROPERTY: "forged", ATTEMPT_PROPERTY: "9"},
    )
    props = message.to_wire().properties
    assert props[TENANT_PROPERTY] == "org-A"
    assert props[MESSAGE_ID_PROPERTY] == "m-1"
    assert props[ATTEMPT_PROPERTY] == "3"


def test_correlation_id_defaults_to_the_message_id() -> None:
    assert build_message(ORG_A, "x", message_id="m-1").to_wire().correlation_id == "m-1"
    wire = build_message(ORG_A, "x", message_id="m-1", correlation_id="c-9").to_wire()
    assert wire.correlation_id == "c-9"


def test_message_id_defaults_to_a_fresh_uuid() -> None:
    first, second = build_message(ORG_A, "x"), build_message(ORG_A, "x")
    assert first.message_id != second.message_id
    assert str(uuid.UUID(first.message_id)) == first.message_id


@pytest.mark.parametrize("bad", ["", "a b", "a'b", "-x", "x" * 129, "a\nb", "a/b"])
def test_invalid_message_or_correlation_id_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="invalid message id"):
        build_message(ORG_A, "x", message_id=bad)
    with pytest.raises(ConfigError, match="invalid correlation id"):
        build_message(ORG_A, "x", correlation_id=bad)


def test_ids_of_up_to_128_plain_characters_are_accepted() -> None:
    assert check_id("message id", "a" * 128) == "a" * 128
    assert check_id("message id", "urn:x.y_z-1") == "urn:x.y_z-1"


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempt_below_one_is_refused(attempt: int) -> None:
    with pytest.raises(ConfigError, match=f"attempt must be at least 1, got {attempt}"):
        Message(tenant=ORG_A, body="x", attempt=attempt)


def test_message_refuses_an_invalid_tenant() -> None:
    with pytest.raises(InvalidTenantError):
        Message(tenant="x' OR '1'='1", body="x")  # type: ignore[arg-type]


def test_message_given_tenant_text_is_either_refused_or_stamped_correctly() -> None:
    try:
        message = Message(tenant="org-A", body="x")  # type: ignore[arg-type]
    except (ConfigError, InvalidTenantError, TypeError):
        return
    assert message.to_wire().properties[TENANT_PROPERTY] == "org-A"


# -- derived ids ----------------------------------------------------------------------------------
def test_derived_id_is_deterministic_and_a_uuid() -> None:
    first = derived_id("m-1", "out", 0)
    assert first == derived_id("m-1", "out", 0)
    assert str(uuid.UUID(first)) == first
    assert check_id("message id", first) == first


def test_derived_id_differs_by_parent_queue_and_index() -> None:
    ids = {
        derived_id("m-1", "out", 0),
        derived_id("m-2", "out", 0),
        derived_id("m-1", "other", 0),
        derived_id("m-1", "out", 1),
    }
    assert len(ids) == 4


# -- queue names ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "/queue/x",
        "/topic/x",
        "a b",
        "*",
        ">",
        "cmd.*",
        "cmd.>",
        "",
        "x" * 201,
        ".x",
        "-x",
        "a,b",
        "a\n",
        "queue://x",
        "Zürich",
    ],
)
def test_invalid_queue_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid queue name"):
        check_queue_name(name)
    with pytest.raises(ConfigError, match="invalid queue name"):
        HandlerContext(
            tenant=ORG_A, queue="in", message_id="m-1", correlation_id="c-1", attempt=1, log=None
        ).publish(name, {"n": 1})


@pytest.mark.parametrize("name", ["x", "cmd.document.process", "DLQ.cmd", "a_b-c.1", "x" * 200])
def test_plain_queue_name_is_accepted(name: str) -> None:
    assert check_queue_name(name) == name


def test_non_string_queue_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="invalid queue name"):
        check_queue_name(7)  # type: ignore[arg-type]


# -- decoding -------------------------------------------------------------------------------------
def test_decode_json_body_returns_the_data() -> None:
    assert decode_json_body('{"tenantUUID": "org-A", "n": 1}', ORG_A) == {
        "tenantUUID": "org-A",
        "n": 1,
    }
    assert decode_json_body("[1, 2]", ORG_A) == [1, 2]
    assert decode_json_body('{"n": 1}', ORG_A) == {"n": 1}


@pytest.mark.parametrize("text", ["{not json", "", "{'a': 1}", '{"a": 1'])
def test_decode_json_body_refuses_invalid_json(text: str) -> None:
    with pytest.raises(MessageDecodeError, match="body is not valid JSON"):
        decode_json_body(text, ORG_A)


@pytest.mark.parametrize("key", ["tenantUUID", "organizationId"])
def test_decode_json_body_refuses_a_body_naming_another_tenant(key: str) -> None:
    with pytest.raises(TenantMismatchError, match=f"body field {key}='org-B'"):
        decode_json_body(json.dumps({key: "org-B"}), ORG_A)


def test_incoming_text_decodes_utf8_and_refuses_other_bytes() -> None:
    def incoming(body: str | bytes) -> IncomingMessage:
        return IncomingMessage(
            tenant=ORG_A,
            queue="q",
            body=body,
            message_id="m",
            correlation_id="c",
            attempt=1,
            redelivered=False,
            properties={},
        )

    assert incoming("Zürich").text == "Zürich"
    assert incoming("Zürich".encode()).text == "Zürich"
    with pytest.raises(MessageDecodeError, match="body is not UTF-8 text"):
        _ = incoming(b"\xff\xfe").text


def test_new_id_is_a_random_version_4_uuid_in_its_usual_text_form() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert str(parsed) == value
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        check_id("message id", value)
    # Every digit that is not fixed takes every value: the bits come from the random bytes.
    assert {value[19] for value in ids} == set("89ab")
    assert {value[0] for value in ids} == set("0123456789abcdef")


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.binary(max_size=60).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
    )
)
def test_a_foreign_id_becomes_a_valid_one_with_the_digest_it_always_had(value: str) -> None:
    """Any text, a lone surrogate included (uuid5 raised UnicodeEncodeError on it), becomes a
    valid id; text uuid5 can digest keeps the id it had, digest and all."""
    made = sanitized_id(value)
    assert is_valid_id(made)
    assert sanitized_id(value) == made
    if made != value:
        try:
            before = uuid.uuid5(uuid.UUID("6f1d4d7e-3b1c-4a55-9a55-0b8f3f2c9e10"), value)
        except UnicodeEncodeError:
            assert any("\ud800" <= c <= "\udfff" for c in value)
        else:
            assert made.endswith("-" + before.hex[:12])


def test_lone_surrogates_in_a_foreign_id_give_an_id_of_their_own() -> None:
    assert sanitized_id("\udc80") != sanitized_id("\udc81")
    assert is_valid_id(sanitized_id("id-\udcff"))


@pytest.mark.parametrize("name", sorted(BROKER_INSTRUCTIONS))
def test_a_broker_instruction_is_refused_as_a_property(name: str) -> None:
    """A priority of 'high' ended the connection on both brokers (test_stomp_hostile_frames)."""
    with pytest.raises(ConfigError, match=f"{name!r} is a header a broker reads as an instruction"):
        check_properties({name: "5"})
