"""A local ActiveMQ Artemis broker for development and tests, from Maven Central; not part of the
toolkit. ``scripts/artemis COMMAND`` runs it from any directory::

    python -m devtools.local_artemis start     # installs Artemis if missing, waits for STOMP
    python -m devtools.local_artemis status    # JSON: running, ready, pid, ports, home, log,
                                               # routed_queues (what its plugin routes)
    python -m devtools.local_artemis stop      # SIGTERM, then SIGKILL after --timeout seconds
    python -m devtools.local_artemis restart
    python -m devtools.local_artemis kill      # SIGKILL, as a crash would
    python -m devtools.local_artemis env       # the variables that point the suite at it

The distribution is ``org.apache.activemq:apache-artemis:<ARTEMIS_VERSION>:zip:bin``, the
version docker-compose.yml runs, fetched with ``mvn dependency:copy`` and unpacked once into a
cache keyed by version and checksum (``~/.cache/boost-tenancy``, or BOOST_ARTEMIS_CACHE); a
download or unpacking that did not finish is never used. The instance lives in ``.artemis/``
of the checkout (or BOOST_ARTEMIS_HOME): ``bin/``, ``etc/`` (the project's
docker/artemis/etc-override/broker.xml with loopback ports), ``data/`` (journal, paging) and
``log/artemis.log``. Ports do not collide with the local Classic (61613/61616) or RabbitMQ
(5672): STOMP 61713, CORE and OpenWire 61716, AMQP 5772 (BOOST_ARTEMIS_PORT_OFFSET shifts all
three, for a second broker). With BOOST_ARTEMIS_KEYSTORE (a PKCS12 file with the broker's
certificate and key) and BOOST_ARTEMIS_KEYSTORE_PASSWORD (or BOOST_ARTEMIS_KEYSTORE_PASSWORD_FILE,
a file holding it), it also takes STOMP over TLS on 61712 and AMQP over TLS on 5771, each with its
plain acceptor's settings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from boost_tenancy.envvars import secret_from_env
from boost_tenancy.errors import BoostTenancyError
from boost_tenancy.transports.artemis_management import STOMP_LOSS_PLUGIN
from devtools.artemis_plugin import build_plugin, install_jars, plugin_xml
from devtools.broker_probes import stomp_login
from devtools.broker_process import (
    BrokerProcess,
    command_parser,
    failed,
    parse_command,
    print_exports,
)
from devtools.broker_settings import (
    LocalBrokerError,
    find_repo_root,
    plugin_queues_from_env,
    plugin_queues_in,
)
from devtools.commands import run_checked

ARTEMIS_VERSION: Final = "2.44.0"
"""The version docker-compose.yml and the testcontainers image name: the one the toolkit's
Artemis behaviour is measured on."""
ARTIFACT: Final = f"org.apache.activemq:apache-artemis:{ARTEMIS_VERSION}:zip:bin"
CLIENT_ARTIFACT: Final = f"org.apache.activemq:artemis-jms-client-all:{ARTEMIS_VERSION}"
REPO_ROOT: Final = Path(__file__).resolve().parents[1]
BROKER_XML: Final = REPO_ROOT / "docker" / "artemis" / "etc-override" / "broker.xml"
USER: Final = "boost"
PASSWORD: Final = "boost-test"  # noqa: S105 (a test broker on loopback)
HOST: Final = "127.0.0.1"
STOMP_PORT: Final = 61713
STOMP_TLS_PORT: Final = 61712
"""The stomp+ssl acceptor's port, when an instance has one (ArtemisSettings.tls_keystore)."""
AMQP_TLS_PORT: Final = 5771
"""The amqps acceptor's port, when an instance has one (ArtemisSettings.tls_keystore)."""
CORE_PORT: Final = 61716
AMQP_PORT: Final = 5772
HEAP: Final = "1G"
START_TIMEOUT_S: Final = 120.0
_MVN_TIMEOUT_S: Final = 900.0
_CONTAINER_PORTS: Final = {"61616": "core", "61613": "stomp", "5672": "amqp"}
"""The acceptor ports of the project's broker.xml, which this instance moves to its own."""

ENV_HOME: Final = "BOOST_ARTEMIS_HOME"
ENV_CACHE: Final = "BOOST_ARTEMIS_CACHE"
ENV_OFFSET: Final = "BOOST_ARTEMIS_PORT_OFFSET"
ENV_ROUTED: Final = "BOOST_ARTEMIS_ROUTED_QUEUES"
"""Shared queues the project's tenant plugin routes on this broker, as BOOST_BROKER_ROUTED_QUEUES
names them: unset, every queue but the shared ones ("*", as docker/artemis/etc-override/broker.xml
runs it); "pipeline": the sample pipeline's; a comma-separated list; "none": no tenant plugin
(StompLossPlugin, which no broker the STOMP transport uses should lack, runs on every instance)."""
ENV_KEYSTORE: Final = "BOOST_ARTEMIS_KEYSTORE"
"""A PKCS12 file with the broker's certificate and key: a stomp+ssl acceptor on STOMP_TLS_PORT and
an amqps one on AMQP_TLS_PORT."""
ENV_KEYSTORE_PASSWORD: Final = "BOOST_ARTEMIS_KEYSTORE_PASSWORD"  # noqa: S105 (a variable's name)
CLI_NAME: Final = "scripts/artemis"


def _cache_root(env: Mapping[str, str]) -> Path:
    given = env.get(ENV_CACHE, "").strip()
    if given:
        return Path(given).expanduser()
    base = env.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "boost-tenancy"


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtemisSettings:
    """Where the instance lives and where it listens."""

    home: Path = field(default_factory=lambda: find_repo_root() / ".artemis")
    cache: Path = field(default_factory=lambda: _cache_root(os.environ))
    port_offset: int = 0
    extra_xml: str = ""
    """Elements put into broker.xml's <core> as they are (a cluster's connectors, an HA
    policy)."""
    shared_data: Path | None = None
    """Where the journal, bindings, paging and large messages live when not in the instance's
    own data/: the one store a live broker and its shared-store backup both use."""
    catch_all_xml: str = ""
    """Elements added to the address settings every address gets (match "#"): a cluster's
    redistribution delay."""
    address_settings_xml: str = ""
    """<address-setting> elements added to the address settings (a test's address that refuses
    what does not fit, say)."""
    plugins_xml: str = field(default_factory=lambda: plugin_xml([]))
    """The <broker-plugins> element put into <core> (devtools.artemis_plugin.plugin_xml): by
    default the StompLossPlugin alone, which every Artemis of the project runs (docs/interop.md).
    The project's jar and its drivers go in the instance's lib/ at every start."""
    start_timeout_s: float = START_TIMEOUT_S
    """How long start() waits for a STOMP login (a backup answers only once it is active)."""
    tls_keystore: Path | None = None
    """A PKCS12 keystore: the instance also takes STOMP over TLS on stomp_tls_port and AMQP over
    TLS on amqp_tls_port, each with its plain acceptor's settings."""
    tls_password: str = ""
    """The keystore's password."""

    def __post_init__(self) -> None:
        if not 0 <= self.port_offset <= 2000:
            raise LocalBrokerError(f"{ENV_OFFSET} must be 0-2000, got {self.port_offset}")
        # Both go into the acceptor's URL, whose parameters ; = & and XML's < > " ' would end.
        for name, value in (
            ("keystore path", str(self.tls_keystore or "")),
            ("keystore password", self.tls_password),
        ):
            if any(c in value for c in ";=&<>\"'\n"):
                raise LocalBrokerError(f"the {name} cannot hold ; = & < > quotes or newlines")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ArtemisSettings:
        home = env.get(ENV_HOME, "").strip()
        offset_text = env.get(ENV_OFFSET, "").strip() or "0"
        if not offset_text.isdigit():
            raise LocalBrokerError(f"{ENV_OFFSET} must be a number of ports, got {offset_text!r}")
        routed, shared = plugin_queues_from_env(env, ENV_ROUTED)
        keystore = env.get(ENV_KEYSTORE, "").strip()
        password = secret_from_env(env, ENV_KEYSTORE_PASSWORD)
        if bool(keystore) != (password is not None):
            raise LocalBrokerError(
                f"TLS (STOMP and AMQP) needs both {ENV_KEYSTORE} (a PKCS12 file with the broker's "
                f"certificate and key) and {ENV_KEYSTORE_PASSWORD} (or "
                f"{ENV_KEYSTORE_PASSWORD}_FILE); only one is set"
            )
        return cls(
            home=Path(home).expanduser() if home else find_repo_root() / ".artemis",
            cache=_cache_root(env),
            port_offset=int(offset_text),
            plugins_xml=plugin_xml(routed, shared=shared),
            tls_keystore=Path(keystore).expanduser().resolve() if keystore else None,
            tls_password=password or "",
        )

    @property
    def stomp_port(self) -> int:
        return STOMP_PORT + self.port_offset

    @property
    def core_port(self) -> int:
        return CORE_PORT + self.port_offset

    @property
    def amqp_port(self) -> int:
        return AMQP_PORT + self.port_offset

    @property
    def stomp_tls_port(self) -> int:
        return STOMP_TLS_PORT + self.port_offset

    @property
    def amqp_tls_port(self) -> int:
        return AMQP_TLS_PORT + self.port_offset

    def ports(self) -> dict[str, int]:
        ports = {"stomp": self.stomp_port, "core": self.core_port, "amqp": self.amqp_port}
        if self.tls_keystore is not None:
            ports["stomp_tls"] = self.stomp_tls_port
            ports["amqp_tls"] = self.amqp_tls_port
        return ports

    def suite_env(self) -> dict[str, str]:
        """The variables that point the contract and integration suites at this broker
        (tests/broker_target.py)."""
        return {
            "BOOST_TEST_BROKER_FLAVOUR": "artemis",
            "BOOST_BROKER_URL": f"stomp://{HOST}:{self.stomp_port}",
            "BOOST_BROKER_AMQP_URL": f"amqp://{USER}:{PASSWORD}@{HOST}:{self.amqp_port}",
            "BOOST_BROKER_OPENWIRE_PORT": str(self.core_port),
            "BOOST_BROKER_USER": USER,
            "BOOST_BROKER_PASSWORD": PASSWORD,
            "BOOST_TEST_ARTEMIS_HOME": str(self.home.expanduser().resolve()),
        }


_COMPOSE_PLUGIN: Final = re.compile(
    r"\n *<!-- The project's tenant plugin.*?</broker-plugins>\n", re.S
)
"""The plugin element of the compose broker.xml (with its comment), for every queue: an instance
runs the plugins its settings ask for instead (plugins_xml)."""


def render_broker_xml(settings: ArtemisSettings, source: str | None = None) -> str:
    """The project's broker.xml without its plugin element, with every acceptor on loopback at
    this instance's port, and settings.extra_xml and plugins_xml (the plugins it runs) added to
    <core>."""
    text = BROKER_XML.read_text(encoding="utf-8") if source is None else source
    text, plugins = _COMPOSE_PLUGIN.subn("", text)
    if plugins != 1:
        raise LocalBrokerError(f"{BROKER_XML} should have one <broker-plugins>, found {plugins}")
    ports = settings.ports()

    def moved(match: re.Match[str]) -> str:
        name = _CONTAINER_PORTS.get(match.group(1))
        if name is None:
            raise LocalBrokerError(f"{BROKER_XML} has an acceptor on an unknown port {match[1]}")
        return f"tcp://{HOST}:{ports[name]}"

    text, count = re.subn(r"tcp://0\.0\.0\.0:(\d+)", moved, text)
    if count != len(_CONTAINER_PORTS):
        raise LocalBrokerError(
            f"{BROKER_XML} should have {len(_CONTAINER_PORTS)} acceptors on 0.0.0.0, found {count}"
        )
    if settings.tls_keystore is not None:
        text = _with_tls(text, "stomp", settings.stomp_tls_port, settings)
        text = _with_tls(text, "amqp", settings.amqp_tls_port, settings)
    if "<broker-plugins>" in settings.extra_xml or STOMP_LOSS_PLUGIN not in settings.plugins_xml:
        raise LocalBrokerError(
            "an Artemis of the project runs one <broker-plugins> element, its plugins_xml "
            "(devtools.artemis_plugin.plugin_xml), with the StompLossPlugin in it"
        )
    core = "\n".join(xml for xml in (settings.extra_xml, settings.plugins_xml) if xml)
    text = text.replace("  </core>", core + "\n  </core>", 1)
    if settings.catch_all_xml:
        text, matched = re.subn(
            r'(<address-setting match="#">)', rf"\g<1>\n{settings.catch_all_xml}", text
        )
        if matched != 1:
            raise LocalBrokerError(f"{BROKER_XML} should have one address-setting for #")
    if settings.address_settings_xml:
        text, added = re.subn(
            r"(\n *</address-settings>)", rf"\n{settings.address_settings_xml}\g<1>", text
        )
        if added != 1:
            raise LocalBrokerError(f"{BROKER_XML} should have one <address-settings>")
    if settings.shared_data is not None:
        text, moved_dirs = re.subn(
            r"(<[a-z-]+-directory>)data/", rf"\g<1>{settings.shared_data}/", text
        )
        if moved_dirs != 4:
            raise LocalBrokerError(
                f"{BROKER_XML} should name 4 data directories, found {moved_dirs}"
            )
    return text


def _with_tls(text: str, name: str, port: int, settings: ArtemisSettings) -> str:
    """text with a TLS acceptor (name-tls) next to the acceptor called name: the same
    parameters, on port, with the keystore (sslEnabled)."""
    found = re.search(rf'<acceptor name="{name}">tcp://[^:]+:\d+\?([^<]*)</acceptor>', text)
    if found is None:
        raise LocalBrokerError(f"{BROKER_XML} should have an acceptor named {name}")
    tls = (
        f'<acceptor name="{name}-tls">tcp://{HOST}:{port}?{found[1]};'
        f"sslEnabled=true;keyStoreType=PKCS12;keyStorePath={settings.tls_keystore};"
        f"keyStorePassword={settings.tls_password}</acceptor>"
    )
    return text.replace(found[0], f"{found[0]}\n      {tls}", 1)


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()  # noqa: S324 (Maven Central's published checksum is SHA-1)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_artifact(artifact: str, cache: Path) -> Path:
    """The file of a Maven Central artifact (group:name:version[:extension[:classifier]]) in
    cache, fetched with mvn once and checked against its published SHA-1; a download that did
    not finish is never used. LocalBrokerError names what failed."""
    group, name, version, *rest = artifact.split(":")
    extension = rest[0] if rest else "jar"
    classifier = f"-{rest[1]}" if len(rest) > 1 else ""
    filename = f"{name}-{version}{classifier}.{extension}"
    target = cache / filename
    if target.is_file():
        return target
    if shutil.which("java") is None:
        raise LocalBrokerError("Java is missing: install a JDK 17 (apt-get install openjdk-17-jdk)")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalBrokerError("Maven is missing: install it (apt-get install maven)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as scratch:
        run_checked(
            [
                mvn,
                "-q",
                "-B",
                "dependency:copy",
                f"-Dartifact={artifact}",
                f"-DoutputDirectory={scratch}",
            ],
            timeout_s=_MVN_TIMEOUT_S,
            advice=f"{artifact} could not be fetched from Maven Central",
        )
        fetched = Path(scratch) / filename
        m2 = Path.home() / ".m2" / "repository" / Path(*group.split(".")) / name / version
        _check_checksum(fetched, m2 / f"{filename}.sha1")
        fetched.replace(target)  # the same file system: whole or not at all
    return target


def ensure_distribution(cache: Path) -> Path:
    """The unpacked distribution of ARTEMIS_VERSION, fetched and unpacked if missing; raises
    LocalBrokerError naming what failed."""
    target = cache / f"apache-artemis-{ARTEMIS_VERSION}"
    launcher = target / "bin" / "artemis"
    if (target / ".complete").is_file() and launcher.is_file():
        return target
    archive = fetch_artifact(ARTIFACT, cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".unpack-") as scratch:
        unpacked = Path(scratch)
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(unpacked)
        root = unpacked / f"apache-artemis-{ARTEMIS_VERSION}"
        for script in (root / "bin").iterdir():
            script.chmod(0o755)
        (root / ".complete").write_text(_sha1(archive) + "\n", encoding="ascii")
        # A half-unpacked copy from an earlier, interrupted run is replaced, never used.
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(target)
        root.rename(target)
    return target


def ensure_client_jar(cache: Path) -> Path:
    """The Artemis JMS 2.0 client of ARTEMIS_VERSION, every dependency inside, from Maven
    Central: what a Java service uses to reach Artemis over CORE."""
    return fetch_artifact(CLIENT_ARTIFACT, cache)


def _check_checksum(archive: Path, published: Path) -> None:
    """The archive's SHA-1 against the one Maven Central publishes beside it (kept in the local
    Maven repository by dependency:copy)."""
    if not published.is_file():
        return  # a mirror without checksums: Maven itself checked what it could
    expected = published.read_text(encoding="ascii").split()[0].strip().lower()
    actual = _sha1(archive)
    if actual != expected:
        raise LocalBrokerError(
            f"{archive.name} has SHA-1 {actual}, Maven Central publishes {expected}; "
            f"delete {published.parent} and start again"
        )


class LocalArtemis(BrokerProcess):
    """One Artemis instance in settings.home, created from the cached distribution."""

    name = "Artemis broker"

    def __init__(self, settings: ArtemisSettings) -> None:
        super().__init__(
            settings.home,
            start_timeout_s=settings.start_timeout_s,
            logs="log",
            log="artemis.log",
            console="artemis.out",
        )
        self.settings = settings
        self.data_dir = self.home / "data"
        self._distribution: Path | None = None

    @property
    def marker(self) -> str:
        return f"-Dartemis.instance={self.home}"

    def where(self) -> str:
        return f"a STOMP login on {HOST}:{self.settings.stomp_port}"

    def is_ready(self) -> bool:
        return stomp_login(HOST, self.settings.stomp_port, USER, PASSWORD)

    def start(self, *, wait: bool = True) -> bool:
        """Install if needed, create the instance once, write its broker.xml, start it and wait
        until a STOMP login succeeds (wait=False: only launch it, as for a backup, which answers
        once it is active); a broker already running is kept. True when this call launched it."""
        self._distribution = ensure_distribution(self.settings.cache)
        return self._start(f"stop it or set {ENV_OFFSET}", wait=wait)

    def _ports(self) -> dict[str, tuple[str, int]]:
        return {name: (HOST, port) for name, port in self.settings.ports().items()}

    def _launch(self) -> int:
        assert self._distribution is not None
        broker_xml = render_broker_xml(self.settings)  # refused before anything is made or built
        self._create(self._distribution)
        install_jars(build_plugin(), self.home / "lib")
        (self.home / "etc" / "broker.xml").write_text(broker_xml, encoding="utf-8")
        return self._spawn([str(self.home / "bin" / "artemis"), "run"])

    def restart(self) -> bool:
        """Stop the broker (if running) and start it again; True when this call launched it."""
        self.stop()
        return self.start()

    def purge_data(self) -> None:
        """Delete the journal, bindings and paging; refused while the broker runs."""
        with self._locked():
            if self.is_running():
                raise LocalBrokerError(f"the Artemis in {self.home} is running; stop it first")
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(self.data_dir)

    def status(self) -> dict[str, object]:
        pid = self.running_pid()
        return {
            "running": pid is not None,
            "ready": pid is not None and self.is_ready(),
            "pid": pid,
            "version": ARTEMIS_VERSION,
            "host": HOST,
            **{f"{name}_port": port for name, port in self.settings.ports().items()},
            "home": str(self.home),
            "log": str(self.log_file),
            "routed_queues": plugin_queues_in(self.home / "etc" / "broker.xml") if pid else None,
        }

    def _create(self, distribution: Path) -> None:
        if (self.home / "bin" / "artemis").is_file():
            return
        java_options = "-Dlog4j2.disableJmx=true"
        run_checked(
            [
                str(distribution / "bin" / "artemis"),
                "create",
                "--silent",
                "--force",
                "--user",
                USER,
                "--password",
                PASSWORD,
                "--require-login",
                "--no-web",
                "--nio",
                "--no-autotune",
                "--java-memory",
                HEAP,
                "--java-options",
                java_options,
                str(self.home),
            ],
            timeout_s=120.0,
            advice=f"the Artemis instance in {self.home} could not be created",
            env={**os.environ, "ARTEMIS_HOME": str(distribution)},
        )


def run_cli(argv: Sequence[str]) -> int:
    """Run an Artemis command; 0 on success, 2 on error (one line on stderr)."""
    parser = command_parser(
        CLI_NAME,
        f"Run the local ActiveMQ Artemis {ARTEMIS_VERSION} for development and tests.",
        "install if needed, start and wait for a STOMP login",
        ("kill", "SIGKILL the broker, as a crash would"),
        ("env", "print the variables that point the test suite at it"),
    )
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    try:
        broker = LocalArtemis(ArtemisSettings.from_env(os.environ))
        if args.command in ("start", "restart"):
            launched = broker.start() if args.command == "start" else broker.restart()
            ports = broker.settings.ports()
            # "started" or "already running": what scripts/test reads to stop only its own.
            tls = (
                f" stomp+ssl://{HOST}:{ports['stomp_tls']} amqps://{HOST}:{ports['amqp_tls']}"
                if "stomp_tls" in ports
                else ""
            )
            print(
                f"Artemis {ARTEMIS_VERSION} {'started' if launched else 'already running'} "
                f"(pid {broker.running_pid()}): "
                f"stomp://{HOST}:{ports['stomp']}{tls} amqp://{HOST}:{ports['amqp']} "
                f"tcp://{HOST}:{ports['core']}, home {broker.home}"
            )
        elif args.command == "stop":
            broker.stop(timeout_s=args.timeout)
            print(f"Artemis stopped ({broker.home})")
        elif args.command == "kill":
            broker.kill()
            print(f"Artemis killed ({broker.home})")
        elif args.command == "status":
            print(json.dumps(broker.status(), indent=2))
        elif args.command == "purge":
            broker.purge_data()
            print(f"Artemis data deleted ({broker.data_dir})")
        else:
            print_exports(broker.settings.suite_env())
    except (BoostTenancyError, OSError, subprocess.SubprocessError) as exc:
        return failed(CLI_NAME, args.command, exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(sys.argv[1:]))
