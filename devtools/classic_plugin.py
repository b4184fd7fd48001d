"""The project's ActiveMQ Classic plugin (brokers/classic), compiled for the local broker.

TenantRoutingPlugin stores each tenant's messages of the routed shared queues in
tenant.<tenant>.<queue> at send time (docs/fairness.md). It is compiled here, against the
installed broker's own jars, with the JDK's javac (apt-get installs a JDK where javac is
missing), into <broker home>/lib/boost-tenancy-classic-<digest>.jar: a jar already built from
the same sources against the same broker jars is reused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

from devtools.activemq_install import ACTIVEMQ_HOME, install_packages
from devtools.broker_settings import LocalBrokerError
from devtools.commands import run_checked

SOURCE_ROOT: Final = Path(__file__).resolve().parent.parent / "brokers" / "classic" / "src"
"""The plugin's Java sources."""

_BROKER_JARS: Final = (
    ACTIVEMQ_HOME / "lib" / "activemq-broker.jar",
    ACTIVEMQ_HOME / "lib" / "activemq-client.jar",
    ACTIVEMQ_HOME / "lib" / "geronimo-jms_1.1_spec.jar",
    ACTIVEMQ_HOME / "lib" / "hawtbuf.jar",
    Path("/usr/share/java/slf4j-api.jar"),
)
"""What the plugin is compiled against: the broker it runs in."""

JDK_PACKAGE: Final = "default-jdk-headless"

_BUILD_TIMEOUT_S: Final = 300.0


def _sources(root: Path) -> list[Path]:
    sources = sorted(root.rglob("*.java"))
    if not sources:
        raise LocalBrokerError(f"the broker plugin's sources are missing: no .java under {root}")
    return sources


def build_digest(root: Path = SOURCE_ROOT) -> str:
    """A digest of what the jar is built from, the plugin's sources and the broker's jars (name
    and size: a broker upgraded in place rebuilds it); the jar carries it in its name."""
    digest = hashlib.sha256()
    for path in _sources(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    for jar in _BROKER_JARS:
        size = jar.stat().st_size if jar.is_file() else -1
        digest.update(f"\0{jar}\0{size}".encode())
    return digest.hexdigest()[:16]


def _jdk_tools() -> tuple[str, str]:
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        install_packages([JDK_PACKAGE], why="the broker plugin is compiled with javac")
        javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise LocalBrokerError(
            f"javac and jar are needed to build the broker plugin: install a JDK 11+ "
            f"(Debian: apt-get install {JDK_PACKAGE})"
        )
    return javac, jar


def _run(command: list[str]) -> None:
    run_checked(
        command,
        timeout_s=_BUILD_TIMEOUT_S,
        advice=f"the broker plugin ({SOURCE_ROOT}) was not built",
    )


def build_plugin(lib_dir: Path, root: Path = SOURCE_ROOT) -> Path:
    """The plugin's jar in lib_dir, compiled from root's sources unless already built from
    them; older builds there are removed."""
    jar_path = lib_dir / f"boost-tenancy-classic-{build_digest(root)}.jar"
    if jar_path.is_file():
        return jar_path
    missing = [str(p) for p in _BROKER_JARS if not p.is_file()]
    if missing:
        raise LocalBrokerError(
            f"building the broker plugin needs the broker's jars; missing: {', '.join(missing)}"
        )
    javac, jar = _jdk_tools()
    lib_dir.mkdir(parents=True, exist_ok=True)
    # Built beside its final name and renamed into it: an interrupted build never leaves a jar
    # of that name behind to be reused.
    with tempfile.TemporaryDirectory(prefix=".build-", dir=lib_dir) as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        classpath = ":".join(str(p) for p in _BROKER_JARS)
        sources = [str(p) for p in _sources(root)]
        _run([javac, "--release", "11", "-cp", classpath, "-d", str(classes), *sources])
        partial = Path(tmp) / jar_path.name
        _run([jar, "--create", "--file", str(partial), "-C", str(classes), "."])
        for old in lib_dir.glob("boost-tenancy-classic-*.jar"):
            old.unlink()
        os.replace(partial, jar_path)
    return jar_path
