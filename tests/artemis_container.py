"""ActiveMQ Artemis in a container (testcontainers), configured by the project's own
docker/artemis/etc-override, with the project's tenant plugin, as docker-compose.yml runs it in
production, but for the queues its plugin routes: the sample pipeline's alone, as the suite runs
its other brokers (BOOST_ARTEMIS_ROUTED_QUEUES=pipeline, scripts/test), since its tests of the
shared topology send to shared queue names no broker declares shared.

Used by `pytest --artemis-container` (the whole suite against it) and by
tests/integration/test_artemis.py. Needs a Docker engine; none runs on the project's development
and CI machines.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from boost_tenancy.errors import BoostTenancyError
from devtools.artemis_plugin import build_plugin
from services.common.contract import ROUTED_QUEUES
from tests.broker_target import BrokerTarget, connected_server

IMAGE_ENV: Final = "BOOST_TEST_ARTEMIS_IMAGE"
DEFAULT_IMAGE: Final = "apache/activemq-artemis:2.44.0"
"""The version the toolkit's Artemis behaviour was measured on (shared BROKERS.md), and the one
docker-compose.yml runs."""
ETC_OVERRIDE: Final = Path(__file__).resolve().parents[1] / "docker" / "artemis" / "etc-override"
USER: Final = "boost"
PASSWORD: Final = "boost-test"
STOMP, OPENWIRE, AMQP = 61613, 61616, 5672
READY_TIMEOUT_S: Final = 120.0


_EVERY_QUEUE_PROPERTY: Final = '<property key="queues" value="*"/>'


def suite_broker_xml() -> str:
    """The compose broker.xml with its plugin routing the sample pipeline's queues alone."""
    text = (ETC_OVERRIDE / "broker.xml").read_text(encoding="utf-8")
    if text.count(_EVERY_QUEUE_PROPERTY) != 1:
        raise ArtemisStartError(
            f"{ETC_OVERRIDE / 'broker.xml'} should have one {_EVERY_QUEUE_PROPERTY}"
        )
    listed = ",".join(sorted(ROUTED_QUEUES))
    return text.replace(_EVERY_QUEUE_PROPERTY, f'<property key="queues" value="{listed}"/>')


def suite_etc_override() -> Path:
    """A copy of etc-override with suite_broker_xml, readable by the image's own user (the
    entry point copies it as that user, and mkdtemp's folder is its creator's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="artemis-etc-"))
    for source in ETC_OVERRIDE.iterdir():
        target = folder / source.name
        if source.name == "broker.xml":
            target.write_text(suite_broker_xml(), encoding="utf-8")
        else:
            shutil.copy(source, target)
        target.chmod(0o644)
    folder.chmod(0o755)
    return folder


def docker_engine_missing() -> str | None:
    """Why no container can be started here, or None when a Docker engine answers."""
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception as exc:  # any failure means the same: no engine to use
        return f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return None


class ArtemisStartError(RuntimeError):
    """The broker did not come up; the message ends with the tail of its log."""


class ArtemisContainer:
    """One Artemis broker for as long as the caller holds it; stop() removes the container."""

    def __init__(self, image: str | None = None) -> None:
        self.image = image or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE
        self._container: Any = None
        self._etc: Path | None = None

    def start(self) -> BrokerTarget:
        """Start the broker and wait until STOMP answers with the suite's credentials."""
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        self._etc = suite_etc_override()
        container = (
            DockerContainer(self.image)
            # The image's entry point creates an instance that requires a login with these,
            # then copies etc-override over its etc/ (our broker.xml replaces the generated one).
            .with_env("ARTEMIS_USER", USER)
            .with_env("ARTEMIS_PASSWORD", PASSWORD)
            .with_volume_mapping(str(self._etc), "/var/lib/artemis-instance/etc-override", "ro")
            .with_exposed_ports(STOMP, OPENWIRE, AMQP)
        )
        # The tenant plugin its broker.xml lists, built here as docker/artemis/Dockerfile builds
        # it for docker-compose.yml, on the broker's classpath.
        for jar in build_plugin():
            container.with_volume_mapping(str(jar), f"/opt/activemq-artemis/lib/{jar.name}", "ro")
        try:
            container.start()
        except BaseException:
            self.stop()  # the copied etc-override goes too
            raise
        self._container = container
        try:
            # AMQ221007: the server is live (or "active" in newer wording); the code is stable.
            # raise_on_exit: a broker.xml the broker refuses ends the container; say so at once.
            wait_for_logs(container, "AMQ221007", timeout=READY_TIMEOUT_S, raise_on_exit=True)
            host = container.get_container_host_ip()
            target = BrokerTarget(
                flavour="artemis",
                host=host,
                stomp_port=int(container.get_exposed_port(STOMP)),
                openwire_port=int(container.get_exposed_port(OPENWIRE)),
                amqp_url=f"amqp://{host}:{container.get_exposed_port(AMQP)}",
                username=USER,
                password=PASSWORD,
                external=True,
                origin=f"--artemis-container ({self.image})",
            )
            self._await_stomp(target)
        except Exception as exc:
            tail = self._log_tail()
            self.stop()
            raise ArtemisStartError(f"{type(exc).__name__}: {exc}\n{tail}") from exc
        except BaseException:
            self.stop()
            raise
        return target

    def _log_tail(self, lines: int = 40) -> str:
        """The end of the broker's output: why it refused its configuration, for one."""
        try:
            stdout, stderr = self._container.get_logs()
        except Exception as exc:  # the container may be gone already
            return f"(no container log: {exc})"
        text = (stdout or b"").decode("utf-8", "replace") + (stderr or b"").decode(
            "utf-8", "replace"
        )
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def _await_stomp(target: BrokerTarget) -> None:
        # Docker's port proxy accepts TCP before the broker listens: wait for a real CONNECTED.
        deadline = time.monotonic() + 30.0
        while True:
            try:
                connected_server(target.stomp_settings())
                return
            except BoostTenancyError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            container.stop()
        etc, self._etc = self._etc, None
        if etc is not None:
            shutil.rmtree(etc, ignore_errors=True)
