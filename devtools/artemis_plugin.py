"""The project's Artemis broker plugin (brokers/artemis), built with Maven for the local brokers.

TenantPlugin routes every tenant of the listed shared queues at send time, quarantines messages
without a valid tenant and applies each tenant's limits at the broker (docs/fairness.md, "The
Artemis plugin"); StompLossPlugin gives every unacknowledged message of a lost STOMP connection
back to its queue (docs/interop.md), on every local broker. `mvn package` builds both against
Artemis's server API from Maven Central, with the JDBC drivers the first reads the policy store
with; a build of the same sources is reused.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from boost_tenancy.ops.broker_routes import artemis_stomp_loss_plugin, artemis_tenant_plugin
from devtools.broker_settings import LocalBrokerError
from devtools.commands import run_checked

PROJECT: Final = Path(__file__).resolve().parent.parent / "brokers" / "artemis"
"""The plugin's Maven project."""
_BUILD_TIMEOUT_S: Final = 900.0
_STAMP: Final = ".boost-build-digest"


def build_digest(project: Path = PROJECT) -> str:
    """A digest of what the jars are built from: the pom and every source."""
    digest = hashlib.sha256()
    for path in [project / "pom.xml", *sorted((project / "src").rglob("*.java"))]:
        digest.update(path.relative_to(project).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_plugin(project: Path = PROJECT) -> tuple[Path, ...]:
    """The plugin's jar and the JDBC drivers it needs, built by Maven unless already built from
    the same sources."""
    target = project / "target"
    jar = target / "boost-tenancy-artemis.jar"
    stamp = target / _STAMP
    digest = build_digest(project)
    if not (jar.is_file() and stamp.is_file() and stamp.read_text().strip() == digest):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LocalBrokerError(
                "Maven (mvn) builds the Artemis plugin: install it (Debian: apt-get install maven)"
            )
        run_checked(
            [mvn, "-q", "-B", "-f", str(project / "pom.xml"), "package"],
            timeout_s=_BUILD_TIMEOUT_S,
            advice=f"the Artemis plugin ({project}) was not built",
        )
        stamp.write_text(digest + "\n", encoding="utf-8")
    return (jar, *sorted((target / "lib").glob("*.jar")))


def install_jars(jars: Sequence[Path], lib_dir: Path) -> None:
    """Copy jars into a broker instance's lib/, replacing older copies of the same names."""
    lib_dir.mkdir(parents=True, exist_ok=True)
    for jar in jars:
        shutil.copy2(jar, lib_dir / jar.name)


def plugin_xml(
    queues: Sequence[str],
    properties: Mapping[str, str] | None = None,
    *,
    shared: Sequence[str] = (),
) -> str:
    """The <broker-plugins> element of broker.xml that runs the tenant plugin for queues (["*"]:
    every queue but shared), with its other properties, and the StompLossPlugin, indented for
    <core> (what `boost-tenancy broker-routes --broker artemis` prints); no queues: the
    StompLossPlugin alone."""
    element = (
        artemis_tenant_plugin(queues, properties, shared=shared, indent="  ")
        if queues
        else artemis_stomp_loss_plugin(indent="  ")
    )
    return "\n".join(f"    {line}" for line in element.splitlines() if not line.startswith("<!--"))


__all__ = ["PROJECT", "build_plugin", "install_jars", "plugin_xml"]
