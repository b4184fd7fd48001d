"""Hostile deliveries: the generator and the processor shared by the in-memory property suite and
the bounded run against the real broker.

Every generated message carries a test key (`hostileKey`) and the behaviour its handler is to
show (`hostileBehaviour`); where it ends (handled output, dead letter, quarantine) is read back
from the queues by that key, so a message that is lost or settled twice is seen.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from hypothesis import strategies as st

from boost_tenancy import HandlerContext, IncomingMessage, PermanentError, TenantProcessor
from boost_tenancy.header_values import parse_attempt
from boost_tenancy.messages import WireMessage

KEY: Final = "hostileKey"
BEHAVIOUR: Final = "hostileBehaviour"
TENANTS: Final = ("org-A", "org-B")

BEHAVIOURS: Final = (
    "ok",
    "raise",
    "permanent",
    "system_exit",
    "keyboard_interrupt",
    "generator_exit",
    "nul_error",
    "publish_surrogate_json",
    "publish_surrogate_text",
    "publish_bad_queue",
    "return_awaitable",
    "flaky",
    "echo",
)
"""What a handler does with a message; see HostileProcessor.handle."""
FAILS_ALWAYS: Final = frozenset(
    {
        "raise",
        "permanent",
        "system_exit",
        "keyboard_interrupt",
        "generator_exit",
        "nul_error",
        "publish_surrogate_text",
        "publish_bad_queue",
        "return_awaitable",
    }
)


def output_queue(queue: str) -> str:
    return f"{queue}.out"


async def _never_awaited() -> None:
    """What an async handler body would be: returned, never run."""


class HostileProcessor(TenantProcessor):
    """Does what each message's hostileBehaviour says; on success publishes one output that
    carries the message's key, so a handled message is found by its output."""

    queues: ClassVar[tuple[str, ...]] = ()

    def __init__(self, queue: str) -> None:
        self.queues = (queue,)
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def handle(  # noqa: PLR0912  # one branch per behaviour reads best as one match
        self, message: IncomingMessage, ctx: HandlerContext
    ) -> None:
        key = message.properties.get(KEY, "")
        behaviour = message.properties.get(BEHAVIOUR, "ok")
        with self._lock:
            self.calls[key] += 1
        out = output_queue(message.queue)
        match behaviour:
            case "raise":
                raise ValueError("handler failed")
            case "permanent":
                raise PermanentError("cannot be handled")
            case "system_exit":
                raise SystemExit(3)
            case "keyboard_interrupt":
                raise KeyboardInterrupt
            case "generator_exit":
                raise GeneratorExit
            case "nul_error":
                raise RuntimeError("a NUL \x00 here, a surrogate \ud83d there, a\r\nnew line")
            case "publish_surrogate_json":
                ctx.publish(out, {"key": key, "text": "\ud83d"}, properties={KEY: key})
                return
            case "publish_surrogate_text":
                ctx.publish(out, "lone \ud83d surrogate", properties={KEY: key})
                return
            case "publish_bad_queue":
                ctx.publish("no such/queue", {"key": key}, properties={KEY: key})
                return
            case "return_awaitable":
                return _never_awaited()  # type: ignore[return-value]  # the defect under test
            case "flaky":
                if message.attempt < 2:
                    raise ConnectionError("flaky dependency")
            case "echo" if isinstance(message.data, dict):
                # Publishes what it received: a lone surrogate decoded from a JSON escape too.
                ctx.publish(out, {**message.data, "key": key}, properties={KEY: key})
                return
        ctx.publish(out, {"key": key}, properties={KEY: key})


# -- the generator ---------------------------------------------------------------------------------
_INVALID_UTF8: Final = (b"\xff\xfe", b"\xc3\x28", b"caf\xe9", b"\xed\xa0\xbd", b"\x80abc")

# Text the brokers can carry as a STOMP text body (no NUL); surrogateescape models the body of
# a frame without content-length that is not valid UTF-8, as the STOMP transport decodes it.
_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=60)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)


def _json_body(tenant: str) -> st.SearchStrategy[str]:
    plain = st.dictionaries(_text, _json_values, max_size=5).map(
        lambda d: json.dumps({**d, "tenantUUID": tenant}, ensure_ascii=False)
    )
    return st.one_of(
        plain,
        # A "\\ud83d" escape: valid JSON whose decoded string holds a lone surrogate.
        st.just(json.dumps({"tenantUUID": tenant, "x": "\ud83d"})),
        st.just('{"organizationId": "org-Z", "n": 1}'),  # names another tenant: quarantined
    )


def _hostile_body(tenant: str) -> st.SearchStrategy[str | bytes]:
    return st.one_of(
        _json_body(tenant),
        st.sampled_from([10, 5_000, 200_000]).map(lambda n: "[" * n),  # nested too deep
        st.just("1" * 5_000),  # more digits than Python converts
        st.just('{"n": ' + "9" * 5_000 + "}"),
        st.binary(max_size=80),
        st.sampled_from(_INVALID_UTF8).map(lambda b: b.decode("utf-8", "surrogateescape")),
        _text,
    )


_attempts = st.one_of(
    st.sampled_from(["1", "2", "0", "-1", "99999999999999999999999", "abc", "", " 2", "1e3"]),
    _text,
)
# STOMP frame headers a producer could also send; they steer the broker, not the toolkit.
_FRAME_HEADERS: Final = frozenset(
    (
        "destination",
        "subscription",
        "ack",
        "redelivered",
        "persistent",
        "expires",
        "priority",
        "timestamp",
        "type",
        "receipt",
        "transaction",
        "id",
        "selector",
        "host",
        "login",
        "passcode",
    )
)
_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: (
        not n.startswith(("JMS", "hostile", "AMQ", "activemq", "tenantUUID"))
        and n.lower() not in _FRAME_HEADERS
        and n.upper() not in {"AND", "OR", "NOT", "NULL", "TRUE", "FALSE", "IS", "IN", "LIKE"}
    )
)


@dataclass(frozen=True, slots=True)
class HostileMessage:
    """One generated delivery: its key, tenant, behaviour and what goes on the wire."""

    key: str
    tenant: str
    behaviour: str
    message: WireMessage

    @property
    def body(self) -> str | bytes:
        return self.message.body


@st.composite
def hostile_messages(draw: st.DrawFn, index: int) -> HostileMessage:
    """A message of org-A or org-B with a hostile body, toolkit headers and handler behaviour."""
    tenant = draw(st.sampled_from(TENANTS))
    behaviour = draw(st.sampled_from(BEHAVIOURS))
    key = f"k{index}"
    properties: dict[str, str] = draw(st.dictionaries(_names, _text, max_size=3))
    if draw(st.booleans()):
        properties["boostAttempt"] = draw(_attempts)
    if draw(st.booleans()):
        properties["boostMessageId"] = draw(st.one_of(_text, st.just("ok-id-1")))
    if draw(st.booleans()):
        properties["boostOriginalQueue"] = draw(
            st.sampled_from(["tenant.org-B.cmd", "parked.org-B.cmd", "DLQ.x", "../etc"])
        )
    if draw(st.booleans()):
        properties["boostDeadLetterReason"] = draw(_text)
    properties.update({"tenantUUID": tenant, KEY: key, BEHAVIOUR: behaviour})
    correlation = draw(
        st.one_of(st.none(), st.just("a b/c=d"), _text.filter(bool), st.just("c-ok"))
    )
    body = draw(_hostile_body(tenant))
    return HostileMessage(
        key=key,
        tenant=tenant,
        behaviour=behaviour,
        message=WireMessage(body=body, properties=properties, correlation_id=correlation),
    )


def hostile_batches(max_size: int = 8) -> st.SearchStrategy[list[HostileMessage]]:
    return st.integers(min_value=1, max_value=max_size).flatmap(
        lambda n: st.tuples(*(hostile_messages(i) for i in range(n))).map(list)
    )


# -- the expectation -------------------------------------------------------------------------------
def _decodes(body: str | bytes, tenant: str) -> str:
    """'ok', 'undecodable' or 'foreign-tenant', as the dispatcher decodes a JSON body."""
    try:
        text = body if isinstance(body, str) else body.decode("utf-8")
        text.encode("utf-8")  # text decoded from invalid UTF-8 is not text
        data = json.loads(text)
    except Exception:  # any failure: the toolkit calls it undecodable too
        return "undecodable"
    if isinstance(data, dict):
        for name in ("tenantUUID", "organizationId"):
            if data.get(name) is not None and data.get(name) != tenant:
                return "foreign-tenant"
    return "ok"


MAX_ATTEMPTS: Final = 3
"""The retry cap the hostile runners are given (their RetryPolicy's max_attempts)."""


def expected_end(message: HostileMessage) -> str:
    """Where a message must end: 'out', 'dlq' or 'quarantine'."""
    decoded = _decodes(message.body, message.tenant)
    if decoded == "undecodable":
        return "dlq"
    if decoded == "foreign-tenant":
        return "quarantine"
    # A valid boostAttempt past the cap is out of attempts: dead-lettered without a handler.
    claimed = parse_attempt(message.message.properties.get("boostAttempt"))
    if claimed is not None and claimed > MAX_ATTEMPTS:
        return "dlq"
    return "dlq" if message.behaviour in FAILS_ALWAYS else "out"


@dataclass
class Ends:
    """Which keys ended where, read back from the output, dead-letter and quarantine queues."""

    places: dict[str, list[str]] = field(default_factory=dict)

    def add(self, place: str, properties: Iterable[Mapping[str, str]]) -> None:
        for props in properties:
            self.places.setdefault(props.get(KEY, "?"), []).append(place)

    def check(self, sent: Iterable[HostileMessage], *, exactly_once: bool) -> list[str]:
        """Problems found: a message lost, settled twice (exactly_once), or in the wrong place."""
        problems = []
        for message in sent:
            places = self.places.get(message.key, [])
            expected = expected_end(message)
            if not places:
                problems.append(f"{message.key} ({message.behaviour}) lost: {message!r}")
            elif len(set(places)) > 1 or (exactly_once and len(places) > 1):
                problems.append(f"{message.key} settled as {places}: {message!r}")
            elif places[0] != expected:
                problems.append(f"{message.key} ended in {places[0]}, expected {expected}")
        unknown = set(self.places) - {m.key for m in sent}
        if unknown:
            problems.append(f"messages nobody sent: {sorted(unknown)}")
        return problems


Classify = Callable[[], Ends]
