"""Settings of the local ActiveMQ broker and the configuration files rendered from them.

Read from BOOST_BROKER_URL, the address the clients and the tests use too, and the other
BOOST_BROKER_* variables (see devtools.local_broker); validated on construction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Final
from xml.etree import ElementTree
from xml.sax.saxutils import quoteattr

from boost_tenancy.application.config import DEFAULT_URL
from boost_tenancy.application.environment import ENV_URL, routing_from_env
from boost_tenancy.envvars import refuse_renamed, secret_from_env
from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.ops.broker_routes import (
    EVERY_QUEUE,
    check_routed_at_send,
    check_shared_name,
    classic_routing_plugin,
    shared_queues,
)
from boost_tenancy.routing import Routing, Topology, check_logical_queue
from boost_tenancy.transports.registry import parse_transport_url
from boost_tenancy.transports.stomp.settings import SCHEMES, TLS_SCHEMES
from services.common.contract import ROUTED_QUEUES

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_STOMP_PORT: Final = 61613
DEFAULT_TLS_STOMP_PORT: Final = 61612
DEFAULT_OPENWIRE_PORT: Final = 61616
DEFAULT_HEAP_MB: Final = 512
MIN_HEAP_MB: Final = 128
DEFAULT_START_TIMEOUT_S: Final = 60.0

ENV_HOME: Final = "BOOST_BROKER_HOME"
ENV_OPENWIRE_PORT: Final = "BOOST_BROKER_OPENWIRE_PORT"
ENV_KEYSTORE: Final = "BOOST_BROKER_KEYSTORE"
ENV_KEYSTORE_PASSWORD: Final = "BOOST_BROKER_KEYSTORE_PASSWORD"  # noqa: S105 (a variable's name)
ENV_HEAP_MB: Final = "BOOST_BROKER_HEAP_MB"
ENV_ROUTES: Final = "BOOST_BROKER_ROUTES"
ENV_ROUTED_QUEUES: Final = "BOOST_BROKER_ROUTED_QUEUES"
NO_ROUTED_QUEUES: Final = "none"
"""BOOST_BROKER_ROUTED_QUEUES=none: the broker's tenant routing plugin is left out."""
PIPELINE_QUEUES: Final = "pipeline"
"""BOOST_BROKER_ROUTED_QUEUES=pipeline: the plugin routes the sample pipeline's queues alone, and
leaves every other queue on its shared name (what the test suite runs: its tests of the shared
topology send to shared queue names no broker declares shared)."""

# The Debian package runs the broker with log4j 1.2 (liblog4j1.2-java behind slf4j-log4j12), not
# the log4j 2 of the upstream tarball, so a log4j2.properties would be ignored and the broker
# would only warn that no appender is configured.
LOG4J_PROPERTIES: Final = """\
# Rendered by devtools.local_broker; edits are overwritten on the next start.
log4j.rootLogger=INFO, logfile
# Spring and XBean are chatty at INFO about wiring the configuration.
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.logfile=org.apache.log4j.RollingFileAppender
log4j.appender.logfile.File=${activemq.base}/logs/broker.log
log4j.appender.logfile.Append=true
log4j.appender.logfile.MaxFileSize=5MB
log4j.appender.logfile.MaxBackupIndex=3
log4j.appender.logfile.layout=org.apache.log4j.PatternLayout
log4j.appender.logfile.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
"""

# Hostnames, IPv4 and bare IPv6 literals; anything else would have to be escaped in both the
# connector URIs and the XML.
_HOST_RE: Final = re.compile(r"[A-Za-z0-9:](?:[A-Za-z0-9.:-]*[A-Za-z0-9])?")
_PLACEHOLDER_RE: Final = re.compile(r"@[A-Z_]+@")


class LocalBrokerError(BoostTenancyError):
    """The local broker could not be installed, started, stopped or inspected."""


def find_repo_root(start: Path | None = None) -> Path:
    """The nearest directory upward from start (default: cwd) holding pyproject.toml, else start."""
    origin = (start if start is not None else Path.cwd()).resolve()
    for candidate in (origin, *origin.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return origin


def _default_home() -> Path:
    return find_repo_root() / ".broker"


def _check_host(value: str, label: str) -> None:
    if _HOST_RE.fullmatch(value) is None:
        raise ConfigError(f"{label}={value!r} is not a host name or IP address")


def _check_port(value: int, label: str) -> None:
    if not 1 <= value <= 65535:
        raise ConfigError(f"{label}={value!r} is not a TCP port (1..65535)")


def _check_heap(value: int, label: str) -> None:
    if value < MIN_HEAP_MB:
        raise ConfigError(
            f"{label}={value!r} is too small; the broker needs at least {MIN_HEAP_MB}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerKeystore:
    """The broker's own certificate and key for its stomp+ssl connector: a PKCS12 file."""

    path: Path
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.path.is_file():
            raise ConfigError(f"keystore {str(self.path)!r} does not exist")
        if not self.password:
            raise ConfigError("a keystore needs its password")
        if "${" in self.password:
            # The broker's configuration would read it as a placeholder to fill in.
            raise ConfigError("a keystore password must not contain '${'")


def _check_distinct(stomp: int, openwire: int, stomp_label: str, openwire_label: str) -> None:
    if stomp == openwire:
        raise ConfigError(
            f"{stomp_label} and {openwire_label} are both {stomp}; "
            "each connector needs its own port"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalBrokerSettings:
    """Where the local broker lives and how it listens; validated on construction."""

    home: Path = field(default_factory=_default_home)
    host: str = DEFAULT_HOST
    stomp_port: int = DEFAULT_STOMP_PORT
    openwire_port: int = DEFAULT_OPENWIRE_PORT
    heap_mb: int = DEFAULT_HEAP_MB
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    routes: Path | None = None
    """A file holding the <destinationInterceptors> element that routes tenants at send time
    (printed by `boost-tenancy broker-routes`), put into the broker's configuration as is."""
    keystore: BrokerKeystore | None = None
    """Given, the STOMP connector is stomp+ssl:// (TLS) with this certificate; else plain."""
    routed_queues: tuple[str, ...] = ROUTED_QUEUES
    """Shared queues whose messages the project's broker plugin stores per tenant at send time,
    every tenant (brokers/classic): ("*",) for every queue but shared_queues, what from_env
    gives by default; made without it, the sample pipeline's. Empty: no plugin."""
    shared_queues: tuple[str, ...] = ()
    """With routed_queues ("*",): the queues the plugin leaves alone (BOOST_ROUTING_OVERRIDES's
    shared ones), read by their shared name."""

    def __post_init__(self) -> None:
        _check_host(self.host, "host")
        _check_port(self.stomp_port, "stomp_port")
        _check_port(self.openwire_port, "openwire_port")
        _check_distinct(self.stomp_port, self.openwire_port, "stomp_port", "openwire_port")
        _check_heap(self.heap_mb, "heap_mb")
        if not (math.isfinite(self.start_timeout_s) and self.start_timeout_s > 0):
            raise ConfigError(f"start_timeout_s={self.start_timeout_s!r} must be a positive number")
        for queue in self.every_queue_or(self.routed_queues):
            check_logical_queue(queue)
        for name in self.shared_queues:
            check_shared_name(name)
        if self.shared_queues and self.routed_queues != (EVERY_QUEUE,):
            raise ConfigError("shared_queues are for routed_queues ('*',) only")

    @staticmethod
    def every_queue_or(queues: tuple[str, ...]) -> tuple[str, ...]:
        """The listed queues to check, none for ("*",)."""
        return () if queues == (EVERY_QUEUE,) else queues

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LocalBrokerSettings:
        """Read BOOST_BROKER_URL (its one address is where STOMP listens; stomp+ssl:// turns TLS
        on with BOOST_BROKER_KEYSTORE) and the other BOOST_BROKER_* variables; a ConfigError names
        the variable and its value."""
        refuse_renamed(env)
        home_raw = env.get(ENV_HOME, "")
        home = Path(home_raw).expanduser() if home_raw else _default_home()
        try:
            url = parse_transport_url(env.get(ENV_URL, "").strip() or DEFAULT_URL)
        except ConfigError as exc:
            raise ConfigError(f"{ENV_URL}: {exc}") from None
        if url.scheme not in SCHEMES:
            raise ConfigError(
                f"{ENV_URL}={url.redacted!r}: the local broker serves STOMP "
                f"({', '.join(SCHEMES)}), not {url.scheme}"
            )
        if url.path.strip("/") or url.query or url.fragment:
            raise ConfigError(
                f"{ENV_URL}={url.redacted!r}: the local broker takes no path or query"
            )
        if len(url.addresses) > 1:
            raise ConfigError(
                f"{ENV_URL}={url.redacted!r} names {len(url.addresses)} brokers; the local "
                "broker listens on one address (start each broker of a failover pair with its "
                "own BOOST_BROKER_HOME and URL)"
            )
        tls = url.scheme in TLS_SCHEMES
        host = url.host or DEFAULT_HOST
        _check_host(host, f"{ENV_URL} ({url.redacted}) host")
        stomp_port = (
            (DEFAULT_TLS_STOMP_PORT if tls else DEFAULT_STOMP_PORT)
            if url.port is None
            else url.port
        )
        _check_port(stomp_port, f"{ENV_URL} ({url.redacted}) port")
        openwire_port = _env_int(env, ENV_OPENWIRE_PORT, DEFAULT_OPENWIRE_PORT)
        _check_port(openwire_port, ENV_OPENWIRE_PORT)
        _check_distinct(stomp_port, openwire_port, ENV_URL, ENV_OPENWIRE_PORT)
        heap_mb = _env_int(env, ENV_HEAP_MB, DEFAULT_HEAP_MB)
        _check_heap(heap_mb, ENV_HEAP_MB)
        routes_raw = env.get(ENV_ROUTES, "")
        routed, shared = plugin_queues_from_env(env)
        return cls(
            routed_queues=routed,
            shared_queues=shared,
            home=home,
            host=host,
            stomp_port=stomp_port,
            openwire_port=openwire_port,
            heap_mb=heap_mb,
            routes=Path(routes_raw).expanduser() if routes_raw else None,
            keystore=_keystore_from_env(env, tls),
        )

    @property
    def stomp_url(self) -> str:
        """The URL clients reach the STOMP connector at (BOOST_BROKER_URL's form)."""
        uri_host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'stomp+ssl' if self.keystore else 'stomp'}://{uri_host}:{self.stomp_port}"

    @property
    def memory_limit_mb(self) -> int:
        """Broker memory limit: 256 MiB, but never more than half the heap."""
        return min(256, self.heap_mb // 2)


def _keystore_from_env(env: Mapping[str, str], tls: bool) -> BrokerKeystore | None:
    path = env.get(ENV_KEYSTORE, "").strip()
    password = secret_from_env(env, ENV_KEYSTORE_PASSWORD)
    if not tls:
        if path or password:
            raise ConfigError(
                f"{ENV_KEYSTORE} is set but {ENV_URL} is not stomp+ssl://: the broker would "
                "listen without TLS"
            )
        return None
    if not path or password is None:
        raise ConfigError(
            f"{ENV_URL} asks for TLS (stomp+ssl://): set {ENV_KEYSTORE} (a PKCS12 file with the "
            f"broker's certificate and key) and {ENV_KEYSTORE_PASSWORD} (or "
            f"{ENV_KEYSTORE_PASSWORD}_FILE)"
        )
    try:
        return BrokerKeystore(path=Path(path).expanduser(), password=password)
    except ConfigError as exc:
        raise ConfigError(f"{ENV_KEYSTORE}: {exc}") from None


def plugin_queues_from_env(
    env: Mapping[str, str], variable: str = ENV_ROUTED_QUEUES
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(routed, shared): the shared queues a broker's tenant plugin routes, from variable
    (BOOST_BROKER_ROUTED_QUEUES for Classic, BOOST_ARTEMIS_ROUTED_QUEUES for Artemis), and with
    "*" the queues it leaves alone, those BOOST_ROUTING_OVERRIDES makes shared (else none).

    Unset: "*", every queue but the shared ones, which is what the toolkit's own routing says, so
    a backlog sent to any queue by any client is stored per tenant and no tenant waits behind
    another's (docs/fairness.md); where BOOST_ROUTING makes every queue shared, the sample
    pipeline's queues BOOST_ROUTING_OVERRIDES routes (usually none). "pipeline": the sample
    pipeline's queues alone; "none": no queue (no tenant plugin); else a comma-separated list.
    Never a queue BOOST_ROUTING makes shared: its runners (a Java service's selector consumer)
    read the shared queue, which the plugin would leave empty; a list naming one is refused."""
    routing = routing_from_env(env)
    routed = _routed_queues(routing, env.get(variable, "").strip(), variable)
    return routed, shared_queues(routing) if routed == (EVERY_QUEUE,) else ()


def _routed_queues(routing: Routing, raw: str, variable: str) -> tuple[str, ...]:
    if not raw and routing.default is not Topology.SHARED:
        return (EVERY_QUEUE,)
    if not raw or raw == PIPELINE_QUEUES:
        return tuple(q for q in ROUTED_QUEUES if routing.topology(q) is not Topology.SHARED)
    if raw == NO_ROUTED_QUEUES:
        return ()
    if raw == EVERY_QUEUE:
        shared_queues(routing)  # refused when every queue is shared
        return (EVERY_QUEUE,)
    queues = tuple(part.strip() for part in raw.split(","))
    for queue in queues:
        try:
            check_routed_at_send(routing, queue)
        except ConfigError as exc:
            raise ConfigError(
                f"{variable}={raw!r}: {exc} (a comma-separated list of shared queues, "
                f"{EVERY_QUEUE}, {PIPELINE_QUEUES} or {NO_ROUTED_QUEUES})"
            ) from None
    return queues


_PLUGIN_QUEUES_RE: Final = re.compile(r'(?:name|key)="queues" value="([^"]*)"')


def plugin_queues_in(config: Path) -> str | None:
    """The queues property of the tenant plugin a broker's configuration file runs ("*", or a
    comma-separated list), "none" without a plugin, None without a file: what `status` reports
    of a running broker, whatever the environment of the one asking says."""
    try:
        text = config.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    found = _PLUGIN_QUEUES_RE.search(text)
    return found.group(1) if found else NO_ROUTED_QUEUES


def _routing_plugin(queues: tuple[str, ...], shared: tuple[str, ...]) -> str:
    """The <plugins> entry of the tenant routing plugin, or nothing."""
    return classic_routing_plugin(queues, shared=shared, indent="  ") if queues else ""


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    if not raw:
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def _routes_element(path: Path | None) -> str:
    """The routes file's <destinationInterceptors> element, checked, or nothing."""
    if path is None:
        return ""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LocalBrokerError(f"{ENV_ROUTES}={str(path)!r}: cannot read it: {exc}") from None
    try:
        # The operator's own file, for the operator's own broker: not untrusted input.
        root = ElementTree.fromstring(text)  # noqa: S314
    except ElementTree.ParseError as exc:
        raise LocalBrokerError(
            f"{ENV_ROUTES}={str(path)!r} is not well-formed XML: {exc}"
        ) from None
    if root.tag.rpartition("}")[2] != "destinationInterceptors":
        # Anything else inside <broker> could change far more than routing.
        raise LocalBrokerError(
            f"{ENV_ROUTES}={str(path)!r} must hold one <destinationInterceptors> element "
            f"(boost-tenancy broker-routes prints one), not <{root.tag}>"
        )
    return text.strip()


def _ssl_context(keystore: BrokerKeystore | None) -> str:
    """The <sslContext> element of a TLS connector, or nothing."""
    if keystore is None:
        return ""
    store = quoteattr(keystore.path.expanduser().resolve().as_uri())
    return (
        f'<sslContext><sslContext keyStore={store} keyStoreType="pkcs12" '
        f"keyStorePassword={quoteattr(keystore.password)}/></sslContext>"
    )


def render_config(settings: LocalBrokerSettings) -> str:
    """The project's activemq.xml with the settings filled in."""
    template = (
        resources.files("devtools").joinpath("resources/activemq.xml").read_text(encoding="utf-8")
    )
    # A bare IPv6 literal would be read as host:port in a URI.
    uri_host = f"[{settings.host}]" if ":" in settings.host else settings.host
    values = {
        "@URI_HOST@": uri_host,
        "@STOMP_SCHEME@": "stomp+ssl" if settings.keystore else "stomp",
        "@STOMP_PORT@": str(settings.stomp_port),
        "@SSL_CONTEXT@": _ssl_context(settings.keystore),
        "@OPENWIRE_PORT@": str(settings.openwire_port),
        "@MEMORY_LIMIT_MB@": str(settings.memory_limit_mb),
        "@DESTINATION_INTERCEPTORS@": _routes_element(settings.routes),
        "@ROUTING_PLUGIN@": _routing_plugin(settings.routed_queues, settings.shared_queues),
    }
    rendered = template
    for placeholder, value in values.items():
        rendered = rendered.replace(placeholder, value)
    leftover = _PLACEHOLDER_RE.search(rendered)
    if leftover is not None:
        # A template edited out of step with this module would otherwise fail inside the broker
        # with an unhelpful Spring error.
        raise LocalBrokerError(f"activemq.xml template has an unknown placeholder {leftover[0]}")
    return rendered
