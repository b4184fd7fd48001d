"""Python driver for ``JmsPeer.java``, a minimal JMS client used to prove wire interoperability.

The BOOST services are Java JMS programs talking OpenWire; this helper compiles and runs a tiny
JMS peer built on the same ActiveMQ client jars, so tests can check what a real
``javax.jms`` consumer sees (message class, ``getText()``, ``getStringProperty("tenantUUID")``)
and what a real JMS producer puts on the wire.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JAVA_LIB_DIR = Path("/usr/share/java")

JMS_JARS: tuple[Path, ...] = tuple(
    JAVA_LIB_DIR / name
    for name in (
        "activemq-client.jar",
        "geronimo-jms_1.1_spec.jar",
        "hawtbuf.jar",
        "slf4j-api.jar",
        "slf4j-nop.jar",
        "geronimo-j2ee-management-1.1-spec.jar",
    )
)

PEER_SOURCE = Path(__file__).resolve().with_name("JmsPeer.java")
PEER_CLASS = "JmsPeer"

COMPILE_TIMEOUT_S = 120.0
# JVM start-up plus connection set-up, added on top of the receive timeout.
JVM_OVERHEAD_S = 30.0


def jms_available() -> str | None:
    """Return why the JMS peer cannot run here, or ``None`` when it can."""
    missing_tools = [tool for tool in ("javac", "java") if shutil.which(tool) is None]
    if missing_tools:
        return f"{' and '.join(missing_tools)} not found on PATH"
    missing_jars = [str(jar) for jar in JMS_JARS if not jar.is_file()]
    if missing_jars:
        return f"ActiveMQ JMS client jars missing: {', '.join(missing_jars)}"
    if not PEER_SOURCE.is_file():
        return f"peer source missing: {PEER_SOURCE}"
    return None


def _classpath(*extra: Path) -> str:
    return os.pathsep.join(str(path) for path in (*extra, *JMS_JARS))


def _java_env() -> dict[str, str]:
    # Command-line arguments are decoded with the locale's charset; force UTF-8 so message
    # bodies and property values with non-ASCII characters reach the JVM intact.
    env = dict(os.environ)
    env["LC_ALL"] = "C.UTF-8"
    return env


def _run(
    command: Sequence[str], timeout_s: float, what: str, env: Mapping[str, str] | None = None
) -> str:
    try:
        completed = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=timeout_s,
            env=dict(env) if env is not None else _java_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raw = exc.stderr or b""
        stderr = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        raise RuntimeError(f"{what} timed out after {timeout_s:.0f}s: {stderr.strip()}") from exc
    if completed.returncode != 0:
        raise RuntimeError(
            f"{what} failed with exit code {completed.returncode}: {completed.stderr.strip()}"
        )
    return completed.stdout


ARTEMIS_FACTORY = "org.apache.activemq.artemis.jms.client.ActiveMQConnectionFactory"
"""The Artemis JMS 2.0 client's connection factory (CORE protocol)."""


@dataclass(frozen=True)
class JmsPeer:
    """A compiled ``JmsPeer`` class, run once per call in a fresh JVM: with the ActiveMQ Classic
    client over OpenWire, or, given artemis_client (the Artemis JMS 2.0 client jar from Maven
    Central), with it over CORE, logged in as login."""

    classes_dir: Path
    artemis_client: Path | None = None
    login: tuple[str, str] | None = None

    def _command(self, *args: str) -> list[str]:
        if self.artemis_client is None:
            return ["java", "-cp", _classpath(self.classes_dir), PEER_CLASS, *args]
        classpath = os.pathsep.join([str(self.classes_dir), str(self.artemis_client)])
        return ["java", f"-Dpeer.factory={ARTEMIS_FACTORY}", "-cp", classpath, PEER_CLASS, *args]

    def _env(self) -> dict[str, str]:
        env = _java_env()
        if self.login is not None:
            env["JMS_PEER_USER"], env["JMS_PEER_PASSWORD"] = self.login
        return env

    def send(
        self,
        broker_url: str,
        queue: str,
        tenant: str,
        text: str,
        properties: Mapping[str, str] | None = None,
    ) -> str:
        """Send a persistent ``TextMessage`` stamped with ``tenantUUID``; return its message id."""
        extra: list[str] = []
        for key, value in (properties or {}).items():
            if not key or "=" in key:
                raise ValueError(f"JMS property name not usable on the command line: {key!r}")
            extra.append(f"{key}={value}")
        stdout = _run(
            self._command("send", broker_url, queue, tenant, text, *extra),
            JVM_OVERHEAD_S,
            f"JMS send to {queue}",
            self._env(),
        )
        lines = [line for line in stdout.splitlines() if line.strip()]
        if len(lines) != 1:
            raise RuntimeError(f"JMS send printed unexpected output: {stdout!r}")
        result: dict[str, Any] = json.loads(lines[0])
        if result.get("sent") is not True or not isinstance(result.get("jmsMessageId"), str):
            raise RuntimeError(f"JMS send printed unexpected output: {stdout!r}")
        message_id: str = result["jmsMessageId"]
        return message_id

    def send_each(self, broker_url: str, queue: str, text: str, tenants: Sequence[str]) -> None:
        """One JMS producer bound to queue sends a persistent TextMessage per tenant, in order
        (an empty tenant: no tenantUUID property)."""
        stdout = _run(
            self._command("send-each", broker_url, queue, text, *tenants),
            JVM_OVERHEAD_S,
            f"JMS sends to {queue}",
            self._env(),
        )
        if json.loads(stdout.strip() or "{}").get("sent") != len(tenants):
            raise RuntimeError(f"JMS send-each printed unexpected output: {stdout!r}")

    def receive(
        self,
        broker_url: str,
        queue: str,
        *,
        selector: str = "",
        count: int = 1,
        timeout_ms: int = 10000,
    ) -> list[dict[str, Any]]:
        """Receive and acknowledge up to ``count`` messages within ``timeout_ms``.

        Each entry has ``class``, ``text``, ``tenantUUID``, ``correlationId``,
        ``deliveryMode`` and ``properties`` (every JMS property as a string), plus
        ``jmsMessageId``, ``jmsType``, ``priority``, ``expiration``, ``redelivered`` and
        ``replyTo``. Fewer than ``count`` entries means the timeout ran out.
        """
        if count <= 0 or timeout_ms <= 0:
            raise ValueError("count and timeout_ms must be positive")
        stdout = _run(
            self._command("receive", broker_url, queue, selector, str(count), str(timeout_ms)),
            timeout_ms / 1000 + JVM_OVERHEAD_S,
            f"JMS receive from {queue}",
            self._env(),
        )
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def compile_peer(out_dir: Path) -> JmsPeer:
    """Compile ``JmsPeer.java`` into ``out_dir`` and return a runnable peer."""
    reason = jms_available()
    if reason is not None:
        raise RuntimeError(f"cannot compile the JMS peer: {reason}")
    out_dir.mkdir(parents=True, exist_ok=True)
    _run(
        ["javac", "-encoding", "UTF-8", "-cp", _classpath(), "-d", str(out_dir), str(PEER_SOURCE)],
        COMPILE_TIMEOUT_S,
        "javac JmsPeer.java",
    )
    return JmsPeer(classes_dir=out_dir)
