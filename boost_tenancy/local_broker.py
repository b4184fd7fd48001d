"""A local ActiveMQ Classic 5.17 broker for development, tests and demos.

Commands (also available as ``boost-tenancy broker COMMAND``)::

    python -m boost_tenancy.local_broker start    # installs ActiveMQ if missing, waits for STOMP
    python -m boost_tenancy.local_broker status   # JSON: running, ready, pid, host, ports, home
    python -m boost_tenancy.local_broker stop     # SIGTERM, then SIGKILL after --timeout seconds
    python -m boost_tenancy.local_broker restart
    python -m boost_tenancy.local_broker purge    # deletes stored messages (broker stopped)

Settings come from the environment (an empty variable counts as unset):

=============================  =========================================================
BOOST_BROKER_HOME              instance directory; default ``<repo root>/.broker``, where the
                               repo root is the nearest directory upward from the working
                               directory holding pyproject.toml (else the working directory)
BOOST_BROKER_HOST              address the connectors bind to; default ``127.0.0.1``
BOOST_BROKER_STOMP_PORT        default 61613
BOOST_BROKER_OPENWIRE_PORT     default 61616
BOOST_BROKER_HEAP_MB           maximum JVM heap in MiB; default 512, at least 128
=============================  =========================================================

The broker runs from the Debian package ``activemq`` (``/usr/share/activemq``) with the project's
configuration (``boost_tenancy/resources/activemq.xml``). Everything it writes stays in the
instance directory: ``conf/`` (rendered activemq.xml and log4j.properties), ``data/`` (KahaDB and
scheduler store), ``logs/broker.log`` (broker log), ``logs/broker.out`` (JVM console output of the
latest start) and ``broker.pid``.

When the package is missing, ``start`` installs it with apt-get: directly as root, through
``sudo -n`` otherwise. The package depends on a JRE, so that also brings Java.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Final

from boost_tenancy.errors import BoostTenancyError, ConfigError

ACTIVEMQ_HOME: Final = Path("/usr/share/activemq")
"""Where the Debian package ``activemq`` installs ActiveMQ Classic."""

ACTIVEMQ_JAR: Final = ACTIVEMQ_HOME / "bin" / "activemq.jar"
"""The broker's launcher; its presence is what 'ActiveMQ is installed' means here."""

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_STOMP_PORT: Final = 61613
DEFAULT_OPENWIRE_PORT: Final = 61616
DEFAULT_HEAP_MB: Final = 512
MIN_HEAP_MB: Final = 128
DEFAULT_START_TIMEOUT_S: Final = 60.0

JAVA_MISSING_MESSAGE: Final = (
    "Java is missing: install a JRE 11+ (Debian: apt-get install default-jre-headless)"
)

LOG_TAIL_LINES: Final = 30

ENV_HOME: Final = "BOOST_BROKER_HOME"
ENV_HOST: Final = "BOOST_BROKER_HOST"
ENV_STOMP_PORT: Final = "BOOST_BROKER_STOMP_PORT"
ENV_OPENWIRE_PORT: Final = "BOOST_BROKER_OPENWIRE_PORT"
ENV_HEAP_MB: Final = "BOOST_BROKER_HEAP_MB"

# The Debian package runs the broker with log4j 1.2 (liblog4j1.2-java behind slf4j-log4j12), not
# the log4j 2 of the upstream tarball, so a log4j2.properties would be ignored and the broker
# would only warn that no appender is configured.
LOG4J_PROPERTIES: Final = """\
# Rendered by boost_tenancy.local_broker; edits are overwritten on the next start.
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

_STOMP_CONNECT: Final = b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"
# Asking for a receipt lets the broker close the connection itself, so every readiness probe does
# not leave a "transport failed" warning in the broker log.
_STOMP_DISCONNECT: Final = b"DISCONNECT\nreceipt:probe\n\n\x00"
_PROBE_TIMEOUT_S: Final = 2.0
_POLL_INTERVAL_S: Final = 0.2
_KILL_WAIT_S: Final = 10.0
_APT_TIMEOUT_S: Final = 1800.0


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
        return cls(
            home=home,
            host=host,
            stomp_port=stomp_port,
            openwire_port=openwire_port,
            heap_mb=heap_mb,
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


def render_config(settings: LocalBrokerSettings) -> str:
    """The project's activemq.xml with the settings filled in."""
    template = (
        resources.files("boost_tenancy")
        .joinpath("resources/activemq.xml")
        .read_text(encoding="utf-8")
    )
    # A bare IPv6 literal would be read as host:port in a URI.
    uri_host = f"[{settings.host}]" if ":" in settings.host else settings.host
    values = {
        "@URI_HOST@": uri_host,
        "@STOMP_PORT@": str(settings.stomp_port),
        "@OPENWIRE_PORT@": str(settings.openwire_port),
        "@MEMORY_LIMIT_MB@": str(settings.memory_limit_mb),
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


def stomp_handshake(host: str, port: int, timeout_s: float = _PROBE_TIMEOUT_S) -> bool:
    """True when a STOMP CONNECT on host:port is answered with CONNECTED."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_STOMP_CONNECT)
            reply = _read_frame(sock)
            if not reply.lstrip(b"\r\n").startswith(b"CONNECTED"):
                return False
            with contextlib.suppress(OSError):
                sock.sendall(_STOMP_DISCONNECT)
                _read_frame(sock)
            return True
    except OSError:
        return False


def _read_frame(sock: socket.socket) -> bytes:
    data = b""
    while b"\x00" not in data and len(data) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (binding is refused)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR, connections of a just-stopped broker in TIME_WAIT would count as
        # a listener; the broker's own sockets reuse the address the same way.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise LocalBrokerError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    return False


def _tail(path: Path, lines: int) -> list[str]:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
    except FileNotFoundError:
        return []


def _run_apt(command: list[str], env: Mapping[str, str]) -> None:
    try:
        result = subprocess.run(
            command,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_APT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalBrokerError(
            f"`{' '.join(command)}` failed ({exc}); install it yourself: apt-get install activemq"
        ) from exc
    if result.returncode != 0:
        output = "\n".join(result.stdout.splitlines()[-20:])
        raise LocalBrokerError(
            f"`{' '.join(command)}` failed with exit code {result.returncode}; install it "
            f"yourself: apt-get install activemq\n{output}"
        )


def install_activemq() -> None:
    """Install the Debian package activemq with apt-get, as root or through passwordless sudo."""
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise LocalBrokerError(
            f"ActiveMQ is not installed ({ACTIVEMQ_JAR} is missing) and apt-get is not available: "
            "install ActiveMQ Classic 5.17 (Debian: apt-get install activemq)"
        )
    env = dict(os.environ)
    if os.geteuid() == 0:
        prefix: list[str] = []
        env["DEBIAN_FRONTEND"] = "noninteractive"
    elif shutil.which("sudo") is not None:
        # -n fails at once instead of waiting for a password nobody will type; sudo drops the
        # caller's environment, so the front end is passed on its command line.
        prefix = ["sudo", "-n", "DEBIAN_FRONTEND=noninteractive"]
    else:
        raise LocalBrokerError(
            f"ActiveMQ is not installed ({ACTIVEMQ_JAR} is missing) and installing it needs root: "
            "run `apt-get install activemq` as root"
        )
    # A fresh machine (or container) has empty package lists, so install alone would not find it.
    _run_apt([*prefix, apt_get, "update"], env)
    _run_apt([*prefix, apt_get, "install", "-y", "activemq"], env)
    if not ACTIVEMQ_JAR.is_file():
        raise LocalBrokerError(f"apt-get installed activemq but {ACTIVEMQ_JAR} is still missing")


class LocalBroker:
    """Starts, stops and inspects one broker instance living in settings.home."""

    def __init__(self, settings: LocalBrokerSettings) -> None:
        self.settings = settings
        # Absolute, because it is matched against the broker's command line to recognise it.
        self.home = settings.home.expanduser().resolve()
        self.conf_dir = self.home / "conf"
        self.data_dir = self.home / "data"
        self.logs_dir = self.home / "logs"
        self.pid_file = self.home / "broker.pid"
        self.log_file = self.logs_dir / "broker.log"
        self.console_file = self.logs_dir / "broker.out"
        self._java: str | None = None
        # Kept so a broker started by this process is reaped: an unreaped child stays a zombie,
        # which signal 0 reports as alive.
        self._process: subprocess.Popen[bytes] | None = None

    # -- installation -------------------------------------------------------------------------

    def ensure_installed(self) -> None:
        """Make sure ActiveMQ and Java are present, installing the activemq package if needed."""
        # ActiveMQ first: the package depends on a JRE, so on a fresh machine one install
        # brings both.
        if not ACTIVEMQ_JAR.is_file():
            install_activemq()
        java = shutil.which("java")
        if java is None:
            raise LocalBrokerError(JAVA_MISSING_MESSAGE)
        self._java = java

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the broker and wait until STOMP answers; a broker already running is kept."""
        self.ensure_installed()
        with self._locked():
            pid = self._read_pid()
            if pid is not None and self._is_ours(pid):
                if not self.is_ready():
                    # Started by someone else moments ago: wait for it rather than start twice.
                    self._wait_ready(pid, launched=False)
                return
            self._remove_pid_file()
            for name, port in (
                ("STOMP", self.settings.stomp_port),
                ("OpenWire", self.settings.openwire_port),
            ):
                if port_in_use(self.settings.host, port):
                    raise LocalBrokerError(
                        f"port {port} ({name}) on {self.settings.host} is in use by another "
                        f"process, not by the broker in {self.home}; stop it or choose another "
                        f"port ({ENV_STOMP_PORT} / {ENV_OPENWIRE_PORT})"
                    )
            pid = self._launch()
            self._wait_ready(pid, launched=True)

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after timeout_s; nothing running is fine."""
        if not self.home.exists():
            return
        with self._locked():
            pid = self._read_pid()
            if pid is not None and self._is_ours(pid):
                # SIGTERM runs the JVM's shutdown hook, which closes KahaDB cleanly.
                self._signal(pid, signal.SIGTERM)
                if not self._wait_exit(pid, timeout_s):
                    self._signal(pid, signal.SIGKILL)
                    if not self._wait_exit(pid, _KILL_WAIT_S):
                        raise LocalBrokerError(f"broker pid {pid} survived SIGKILL")
            self._remove_pid_file()

    def restart(self) -> None:
        """Stop the broker (if running) and start it again."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL the broker without a clean shutdown, as a crash would."""
        if not self.home.exists():
            return
        with self._locked():
            pid = self._read_pid()
            if pid is not None and self._is_ours(pid):
                self._signal(pid, signal.SIGKILL)
                if not self._wait_exit(pid, _KILL_WAIT_S):
                    raise LocalBrokerError(f"broker pid {pid} survived SIGKILL")
            self._remove_pid_file()

    def purge_data(self) -> None:
        """Delete the stored messages and scheduled jobs; refused while the broker runs."""
        if not self.home.exists():
            return
        with self._locked():
            if self.is_running():
                raise LocalBrokerError(
                    f"the broker in {self.home} is running; stop it before purging its data"
                )
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(self.data_dir)

    # -- inspection ---------------------------------------------------------------------------

    def is_running(self) -> bool:
        """True when the process named by the pid file is alive and is this instance's broker."""
        pid = self._read_pid()
        return pid is not None and self._is_ours(pid)

    def is_ready(self) -> bool:
        """True when the STOMP connector completes a CONNECT handshake."""
        return stomp_handshake(self.settings.host, self.settings.stomp_port)

    def status(self) -> dict[str, object]:
        """Running state, pid, ports and home, as JSON-ready values."""
        pid = self._read_pid()
        running = pid is not None and self._is_ours(pid)
        return {
            "running": running,
            "ready": running and self.is_ready(),
            "pid": pid if running else None,
            "host": self.settings.host,
            "stomp_port": self.settings.stomp_port,
            "openwire_port": self.settings.openwire_port,
            "home": str(self.home),
            "log": str(self.log_file),
        }

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the broker log and of the JVM console output, for error reports."""
        sections = []
        for path in (self.log_file, self.console_file):
            tail = _tail(path, lines)
            if tail:
                sections.append(f"--- last {len(tail)} lines of {path} ---\n" + "\n".join(tail))
        return "\n".join(sections) if sections else f"(no broker log in {self.logs_dir})"

    # -- internals ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Serialises start/stop across processes (parallel test workers share one instance).
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "broker.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def command(self) -> list[str]:
        """The java command line that runs this instance's broker."""
        java = self._java or shutil.which("java") or "java"
        heap = self.settings.heap_mb
        return [
            java,
            f"-Xms{min(128, heap)}M",
            f"-Xmx{heap}M",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={self.home}",
            f"-Dactivemq.conf={self.conf_dir}",
            f"-Dactivemq.data={self.data_dir}",
            f"-Dlog4j.configuration={(self.conf_dir / 'log4j.properties').as_uri()}",
            "-jar",
            str(ACTIVEMQ_JAR),
            "start",
            f"xbean:{(self.conf_dir / 'activemq.xml').as_uri()}",
        ]

    def _launch(self) -> int:
        for directory in (self.conf_dir, self.data_dir, self.logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "activemq.xml").write_text(render_config(self.settings), encoding="utf-8")
        (self.conf_dir / "log4j.properties").write_text(LOG4J_PROPERTIES, encoding="utf-8")
        with self.console_file.open("wb") as console:
            try:
                # A new session keeps the broker alive after the shell or test run that started
                # it, and out of reach of a Ctrl-C meant for that shell.
                self._process = subprocess.Popen(
                    self.command(),
                    cwd=self.home,
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LocalBrokerError(f"cannot run java: {exc}") from exc
        pid = self._process.pid
        temporary = self.pid_file.with_suffix(".pid.tmp")
        temporary.write_text(f"{pid}\n", encoding="ascii")
        temporary.replace(self.pid_file)
        return pid

    def _wait_ready(self, pid: int, *, launched: bool) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while True:
            if not self._is_alive(pid):
                self._remove_pid_file()
                code = self._process.returncode if self._process is not None else None
                how = f" with exit code {code}" if code is not None else ""
                raise LocalBrokerError(
                    f"the broker exited{how} during start-up (see {self.log_file})\n"
                    + self.log_tail()
                )
            if self.is_ready():
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(_POLL_INTERVAL_S)
        tail = self.log_tail()
        if launched:
            # A broker that never became ready is useless and would hold the ports.
            with contextlib.suppress(LocalBrokerError):
                self._signal(pid, signal.SIGKILL)
                self._wait_exit(pid, _KILL_WAIT_S)
            self._remove_pid_file()
        raise LocalBrokerError(
            f"the broker did not answer STOMP on {self.settings.host}:{self.settings.stomp_port} "
            f"within {self.settings.start_timeout_s:g} s (see {self.log_file})\n{tail}"
        )

    def _read_pid(self) -> int | None:
        try:
            text = self.pid_file.read_text(encoding="ascii").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def _remove_pid_file(self) -> None:
        self.pid_file.unlink(missing_ok=True)

    def _is_alive(self, pid: int) -> bool:
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            return True
        # The state follows the parenthesised command name; a zombie has exited.
        return stat.rpartition(")")[2].split()[:1] != ["Z"]

    def _is_ours(self, pid: int) -> bool:
        if not self._is_alive(pid):
            return False
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")
        except FileNotFoundError:
            return not Path("/proc/self").exists()
        except OSError:
            return True
        # Guards against a stale pid file whose pid now belongs to an unrelated process.
        return os.fsencode(f"-Dactivemq.base={self.home}") in argv

    def _signal(self, pid: int, signum: signal.Signals) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise LocalBrokerError(
                f"not allowed to signal broker pid {pid}; it belongs to another user"
            ) from exc

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._is_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_INTERVAL_S / 2)
        return True


def run_cli(argv: Sequence[str]) -> int:
    """Run a broker command; 0 on success, 2 on error (one line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="boost-tenancy broker",
        description="Run the local ActiveMQ broker for development, tests and demos.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("start", help="install if needed, start and wait until STOMP answers")
    stop = commands.add_parser("stop", help="stop the broker (SIGTERM, then SIGKILL)")
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait before SIGKILL (default 30)"
    )
    commands.add_parser("restart", help="stop, then start")
    commands.add_parser("status", help="print the broker's state as JSON")
    commands.add_parser("purge", help="delete stored messages (the broker must be stopped)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2

    try:
        broker = LocalBroker(LocalBrokerSettings.from_env(os.environ))
        if args.command == "start":
            broker.start()
            _print_running(broker)
        elif args.command == "stop":
            broker.stop(timeout_s=args.timeout)
            print(f"broker stopped ({broker.home})")
        elif args.command == "restart":
            broker.restart()
            _print_running(broker)
        elif args.command == "status":
            print(json.dumps(broker.status(), indent=2))
        else:
            broker.purge_data()
            print(f"broker data deleted ({broker.data_dir})")
    except (BoostTenancyError, OSError) as exc:
        # The full message may carry a log tail; the command keeps to one line, which names the
        # log file to read.
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"boost-tenancy broker {args.command}: {first_line}", file=sys.stderr)
        return 2
    return 0


def _print_running(broker: LocalBroker) -> None:
    status = broker.status()
    host = broker.settings.host
    print(
        f"broker running (pid {status['pid']}): stomp://{host}:{broker.settings.stomp_port} "
        f"tcp://{host}:{broker.settings.openwire_port}, home {broker.home}"
    )


if __name__ == "__main__":
    raise SystemExit(run_cli(sys.argv[1:]))
