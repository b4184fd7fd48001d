"""Settings of the local ActiveMQ broker and the configuration files rendered from them.

Read from the BOOST_BROKER_* variables (see devtools.local_broker) and validated on construction.
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

from boost_tenancy.errors import BoostTenancyError, ConfigError

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_STOMP_PORT: Final = 61613
DEFAULT_OPENWIRE_PORT: Final = 61616
DEFAULT_HEAP_MB: Final = 512
MIN_HEAP_MB: Final = 128
DEFAULT_START_TIMEOUT_S: Final = 60.0

ENV_HOME: Final = "BOOST_BROKER_HOME"
ENV_HOST: Final = "BOOST_BROKER_HOST"
ENV_STOMP_PORT: Final = "BOOST_BROKER_STOMP_PORT"
ENV_OPENWIRE_PORT: Final = "BOOST_BROKER_OPENWIRE_PORT"
ENV_HEAP_MB: Final = "BOOST_BROKER_HEAP_MB"
ENV_ROUTES: Final = "BOOST_BROKER_ROUTES"

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

    def __post_init__(self) -> None:
        _check_host(self.host, "host")
        _check_port(self.stomp_port, "stomp_port")
        _check_port(self.openwire_port, "openwire_port")
        _check_distinct(self.stomp_port, self.openwire_port, "stomp_port", "openwire_port")
        _check_heap(self.heap_mb, "heap_mb")
        if not (math.isfinite(self.start_timeout_s) and self.start_timeout_s > 0):
            raise ConfigError(f"start_timeout_s={self.start_timeout_s!r} must be a positive number")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LocalBrokerSettings:
        """Read the BOOST_BROKER_* variables; a ConfigError names the variable and its value."""
        home_raw = env.get(ENV_HOME, "")
        home = Path(home_raw).expanduser() if home_raw else _default_home()
        host = env.get(ENV_HOST, "") or DEFAULT_HOST
        _check_host(host, ENV_HOST)
        stomp_port = _env_int(env, ENV_STOMP_PORT, DEFAULT_STOMP_PORT)
        _check_port(stomp_port, ENV_STOMP_PORT)
        openwire_port = _env_int(env, ENV_OPENWIRE_PORT, DEFAULT_OPENWIRE_PORT)
        _check_port(openwire_port, ENV_OPENWIRE_PORT)
        _check_distinct(stomp_port, openwire_port, ENV_STOMP_PORT, ENV_OPENWIRE_PORT)
        heap_mb = _env_int(env, ENV_HEAP_MB, DEFAULT_HEAP_MB)
        _check_heap(heap_mb, ENV_HEAP_MB)
        routes_raw = env.get(ENV_ROUTES, "")
        return cls(
            home=home,
            host=host,
            stomp_port=stomp_port,
            openwire_port=openwire_port,
            heap_mb=heap_mb,
            routes=Path(routes_raw).expanduser() if routes_raw else None,
        )

    @property
    def memory_limit_mb(self) -> int:
        """Broker memory limit: 256 MiB, but never more than half the heap."""
        return min(256, self.heap_mb // 2)


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


def render_config(settings: LocalBrokerSettings) -> str:
    """The project's activemq.xml with the settings filled in."""
    template = (
        resources.files("devtools").joinpath("resources/activemq.xml").read_text(encoding="utf-8")
    )
    # A bare IPv6 literal would be read as host:port in a URI.
    uri_host = f"[{settings.host}]" if ":" in settings.host else settings.host
    values = {
        "@URI_HOST@": uri_host,
        "@STOMP_PORT@": str(settings.stomp_port),
        "@OPENWIRE_PORT@": str(settings.openwire_port),
        "@MEMORY_LIMIT_MB@": str(settings.memory_limit_mb),
        "@DESTINATION_INTERCEPTORS@": _routes_element(settings.routes),
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
