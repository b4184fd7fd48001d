"""A local ActiveMQ Classic 5.17 broker for development, tests and demos; not part of the toolkit.

Run from a checkout; ``scripts/broker COMMAND`` does the same from any directory::

    python -m devtools.local_broker start    # installs ActiveMQ if missing, waits for STOMP
    python -m devtools.local_broker status   # JSON: running, ready, pid, host, ports, home,
                                             # log, routed_queues (what its plugin routes)
    python -m devtools.local_broker stop     # SIGTERM, then SIGKILL after --timeout seconds
    python -m devtools.local_broker restart
    python -m devtools.local_broker purge    # deletes stored messages (broker stopped)

Settings come from the environment (an empty variable counts as unset):

=============================  =========================================================
BOOST_BROKER_HOME              instance directory; default ``<repo root>/.broker``, where the
                               repo root is the nearest directory upward from the working
                               directory holding pyproject.toml (else the working directory)
BOOST_BROKER_URL               the address clients use, ``stomp://HOST:PORT`` (default
                               ``stomp://127.0.0.1:61613``): the STOMP connector listens there,
                               and OpenWire on the same host; ``stomp+ssl://HOST:PORT`` makes
                               the STOMP connector TLS (default port 61612)
BOOST_BROKER_KEYSTORE          with stomp+ssl://: a PKCS12 file with the broker's certificate
                               and key
BOOST_BROKER_KEYSTORE_PASSWORD its password (or BOOST_BROKER_KEYSTORE_PASSWORD_FILE, a file
                               holding it)
BOOST_BROKER_OPENWIRE_PORT     default 61616
BOOST_BROKER_HEAP_MB           maximum JVM heap in MiB; default 512, at least 128
BOOST_BROKER_ROUTES            a file holding the <destinationInterceptors> element printed by
                               ``boost-tenancy broker-routes``: tenants routed at send time
BOOST_BROKER_ROUTED_QUEUES     the queues the tenant routing plugin routes: unset or ``*``
                               every queue but BOOST_ROUTING_OVERRIDES's shared ones;
                               ``pipeline`` the sample pipeline's; a list; ``none``
=============================  =========================================================

The broker runs from the Debian package ``activemq`` (``/usr/share/activemq``) with the project's
configuration (``devtools/resources/activemq.xml``). Everything it writes stays in the
instance directory: ``conf/`` (rendered activemq.xml and log4j.properties), ``data/`` (KahaDB and
scheduler store), ``logs/broker.log`` (broker log), ``logs/broker.out`` (JVM console output of the
latest start) and ``broker.pid``.

When the package is missing, ``start`` installs it with apt-get (devtools.activemq_install).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from boost_tenancy.errors import BoostTenancyError
from devtools.activemq_install import (
    ACTIVEMQ_HOME,
    ACTIVEMQ_JAR,
    STOMP_JSON_JARS,
    install_activemq,
)
from devtools.broker_probes import stomp_handshake
from devtools.broker_process import BrokerProcess, command_parser, failed, parse_command
from devtools.broker_settings import (
    ENV_OPENWIRE_PORT,
    LOG4J_PROPERTIES,
    LocalBrokerError,
    LocalBrokerSettings,
    plugin_queues_in,
    render_config,
)
from devtools.classic_plugin import build_plugin

JAVA_MISSING_MESSAGE: Final = (
    "Java is missing: install a JRE 11+ (Debian: apt-get install default-jre-headless)"
)

CLI_NAME: Final = "scripts/broker"
"""How the commands are invoked from a checkout; names them in usage and error lines."""


class LocalBroker(BrokerProcess):
    """Starts, stops and inspects one ActiveMQ Classic instance living in settings.home."""

    name = "broker"

    def __init__(self, settings: LocalBrokerSettings) -> None:
        super().__init__(settings.home, start_timeout_s=settings.start_timeout_s)
        self.settings = settings
        self.conf_dir = self.home / "conf"
        self.data_dir = self.home / "data"
        self.lib_dir = self.home / "lib"
        self._java: str | None = None
        self._plugin_jar: Path | None = None

    @property
    def marker(self) -> str:
        return f"-Dactivemq.base={self.home}"

    def where(self) -> str:
        return f"STOMP on {self.settings.host}:{self.settings.stomp_port}"

    def _ports(self) -> dict[str, tuple[str, int]]:
        host = self.settings.host
        return {
            "STOMP": (host, self.settings.stomp_port),
            "OpenWire": (host, self.settings.openwire_port),
        }

    # -- installation -------------------------------------------------------------------------

    def ensure_installed(self) -> None:
        """Make sure ActiveMQ and Java are present, installing the activemq package if needed."""
        # ActiveMQ first: the package depends on a JRE, so on a fresh machine one install
        # brings both.
        # The JSON jars too: an activemq installed without its recommended packages has none,
        # and its statistics plugin then drops the connection instead of answering.
        if not ACTIVEMQ_JAR.is_file() or not all(jar.is_file() for jar in STOMP_JSON_JARS):
            install_activemq(ACTIVEMQ_JAR)
        java = shutil.which("java")
        if java is None:
            raise LocalBrokerError(JAVA_MISSING_MESSAGE)
        self._java = java

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the broker and wait until STOMP answers; a broker already running is kept.
        True when this call launched it."""
        self.ensure_installed()
        advice = f"stop it or choose another port (BOOST_BROKER_URL / {ENV_OPENWIRE_PORT})"
        return self._start(advice)

    def restart(self) -> bool:
        """Stop the broker (if running) and start it again; True when this call launched it
        (False: another process started one in between, which is kept)."""
        self.stop()
        return self.start()

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

    def is_ready(self) -> bool:
        """True when the STOMP connector completes a CONNECT handshake."""
        return stomp_handshake(
            self.settings.host, self.settings.stomp_port, tls=self.settings.keystore is not None
        )

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
            "url": self.settings.stomp_url,
            "openwire_port": self.settings.openwire_port,
            "home": str(self.home),
            "log": str(self.log_file),
            "routed_queues": plugin_queues_in(self.conf_dir / "activemq.xml") if running else None,
        }

    def command(self) -> list[str]:
        """The java command line that runs this instance's broker."""
        java = self._java or shutil.which("java") or "java"
        heap = self.settings.heap_mb
        # The launcher adds activemq.classpath to the broker's class path (os.pathsep-separated).
        extra = [str(jar) for jar in STOMP_JSON_JARS if jar.is_file()]
        if self._plugin_jar is not None:
            extra.append(str(self._plugin_jar))
        return [
            java,
            f"-Xms{min(128, heap)}M",
            f"-Xmx{heap}M",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={self.home}",
            f"-Dactivemq.conf={self.conf_dir}",
            f"-Dactivemq.data={self.data_dir}",
            f"-Dlog4j.configuration={(self.conf_dir / 'log4j.properties').as_uri()}",
            *([f"-Dactivemq.classpath={os.pathsep.join(extra)}"] if extra else []),
            "-jar",
            str(ACTIVEMQ_JAR),
            "start",
            f"xbean:{(self.conf_dir / 'activemq.xml').as_uri()}",
        ]

    def _launch(self) -> int:
        for directory in (self.conf_dir, self.data_dir, self.logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._plugin_jar = build_plugin(self.lib_dir) if self.settings.routed_queues else None
        (self.conf_dir / "activemq.xml").write_text(render_config(self.settings), encoding="utf-8")
        (self.conf_dir / "log4j.properties").write_text(LOG4J_PROPERTIES, encoding="utf-8")
        return self._spawn(self.command())


def run_cli(argv: Sequence[str]) -> int:
    """Run a broker command; 0 on success, 2 on error (one line on stderr)."""
    parser = command_parser(
        CLI_NAME,
        "Run the local ActiveMQ broker for development, tests and demos.",
        "install if needed, start and wait until STOMP answers",
    )
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    try:
        broker = LocalBroker(LocalBrokerSettings.from_env(os.environ))
        if args.command == "start":
            _print_running(broker, launched=broker.start())
        elif args.command == "stop":
            broker.stop(timeout_s=args.timeout)
            print(f"broker stopped ({broker.home})")
        elif args.command == "restart":
            _print_running(broker, launched=broker.restart())
        elif args.command == "status":
            print(json.dumps(broker.status(), indent=2))
        else:
            broker.purge_data()
            print(f"broker data deleted ({broker.data_dir})")
    except (BoostTenancyError, OSError) as exc:
        return failed(CLI_NAME, args.command, exc)
    return 0


def _print_running(broker: LocalBroker, *, launched: bool) -> None:
    """ "broker started" or "broker already running", the words scripts/demo and scripts/test
    read to stop only a broker they started."""
    status = broker.status()
    host = broker.settings.host
    print(
        f"broker {'started' if launched else 'already running'} (pid {status['pid']}): "
        f"{broker.settings.stomp_url} "
        f"tcp://{host}:{broker.settings.openwire_port}, home {broker.home}"
    )


if __name__ == "__main__":
    raise SystemExit(run_cli(sys.argv[1:]))
