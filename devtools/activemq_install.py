"""ActiveMQ Classic from the Debian package ``activemq``, installed with apt-get when missing.

As root directly, through ``sudo -n`` otherwise; the package depends on a JRE, so Java comes too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from devtools.broker_settings import LocalBrokerError
from devtools.commands import run_checked

ACTIVEMQ_HOME: Final = Path("/usr/share/activemq")
"""Where the Debian package ``activemq`` installs ActiveMQ Classic."""

ACTIVEMQ_JAR: Final = ACTIVEMQ_HOME / "bin" / "activemq.jar"
"""The broker's launcher; its presence is what 'ActiveMQ is installed' means here."""

STOMP_JSON_JARS: Final = (Path("/usr/share/java/xstream.jar"), Path("/usr/share/java/jettison.jar"))
"""XStream and Jettison, which Classic's STOMP connector needs to send a MapMessage as JSON
(subscription header ``transformation: jms-map-json``; the queue statistics read that way).
Upstream's distribution has them in lib/optional; Debian installs them (libxstream-java and
libjettison-java, dependencies of the package) but leaves them off the broker's class path, and
the broker then drops the connection instead of converting the message."""

_APT_TIMEOUT_S: Final = 1800.0


def _run_apt(command: list[str], env: Mapping[str, str], packages: Sequence[str]) -> None:
    advice = f"install it yourself: apt-get install {' '.join(packages)}"
    run_checked(command, timeout_s=_APT_TIMEOUT_S, advice=advice, env=env)


def install_packages(packages: Sequence[str], *, why: str) -> None:
    """Install Debian packages with apt-get, as root or through passwordless sudo; why says
    what needs them, in the error when they cannot be installed."""
    wanted = " ".join(packages)
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise LocalBrokerError(
            f"{why}, and apt-get is not available: install it (Debian: apt-get install {wanted})"
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
            f"{why}, and installing it needs root: run `apt-get install {wanted}` as root"
        )
    # A fresh machine (or container) has empty package lists, so install alone would not find it.
    _run_apt([*prefix, apt_get, "update"], env, packages)
    _run_apt([*prefix, apt_get, "install", "-y", *packages], env, packages)


def install_activemq(jar: Path = ACTIVEMQ_JAR) -> None:
    """Install the Debian package activemq with apt-get, as root or through passwordless sudo.

    jar is the launcher the package must leave behind; its absence afterwards is an error.
    """
    # The JSON jars are only Recommends of the package: named, so a system that skips
    # recommended packages still gets them.
    install_packages(
        ["activemq", "libxstream-java", "libjettison-java"],
        why=f"ActiveMQ is not installed ({jar} is missing)",
    )
    if not jar.is_file():
        raise LocalBrokerError(f"apt-get installed activemq but {jar} is still missing")
