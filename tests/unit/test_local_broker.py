"""Unit tests of the local broker helper that need neither Java nor ActiveMQ."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.errors import BoostTenancyError, ConfigError
from boost_tenancy.ops.broker_routes import classic_destination_interceptors
from devtools import local_broker as lb
from devtools.artemis_plugin import plugin_xml
from devtools.broker_probes import stomp_handshake
from devtools.broker_settings import plugin_queues_in
from devtools.local_broker import (
    JAVA_MISSING_MESSAGE,
    LocalBroker,
    LocalBrokerError,
    LocalBrokerSettings,
    render_config,
    run_cli,
)

CORE_NS = "{http://activemq.apache.org/schema/core}"


@pytest.fixture
def listener() -> Iterator[int]:
    """A foreign process's listening socket on a free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# -- settings -------------------------------------------------------------------------------------


def test_defaults_come_from_the_repo_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)

    settings = LocalBrokerSettings.from_env({})

    assert settings.home == tmp_path.resolve() / ".broker"
    assert (settings.host, settings.stomp_port, settings.openwire_port) == (
        "127.0.0.1",
        61613,
        61616,
    )
    assert settings.heap_mb == 512
    assert settings.start_timeout_s == 60.0


def test_home_falls_back_to_cwd_without_pyproject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert LocalBrokerSettings().home == tmp_path.resolve() / ".broker"


def test_from_env_reads_every_variable(tmp_path: Path) -> None:
    settings = LocalBrokerSettings.from_env(
        {
            "BOOST_BROKER_HOME": str(tmp_path / "b"),
            "BOOST_BROKER_URL": "stomp://localhost:62613",
            "BOOST_BROKER_OPENWIRE_PORT": " 62616 ",
            "BOOST_BROKER_HEAP_MB": "256",
        }
    )
    assert settings == LocalBrokerSettings(
        home=tmp_path / "b",
        host="localhost",
        stomp_port=62613,
        openwire_port=62616,
        heap_mb=256,
        routed_queues=("*",),
    )


def test_empty_variables_count_as_unset(tmp_path: Path) -> None:
    settings = LocalBrokerSettings.from_env(
        {"BOOST_BROKER_HOME": str(tmp_path), "BOOST_BROKER_URL": ""}
    )
    assert settings.stomp_port == 61613


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BOOST_BROKER_URL", "stomp://h:stomp"),
        ("BOOST_BROKER_URL", "stomp://h:0"),
        ("BOOST_BROKER_URL", "stomp://bad host:1"),
        ("BOOST_BROKER_URL", 'stomp://x"/><bean'),
        ("BOOST_BROKER_URL", "amqp://h:5672"),
        ("BOOST_BROKER_URL", "stomp://a:1,b:2"),
        ("BOOST_BROKER_OPENWIRE_PORT", "65536"),
        ("BOOST_BROKER_OPENWIRE_PORT", "-1"),
        ("BOOST_BROKER_HEAP_MB", "lots"),
        ("BOOST_BROKER_HEAP_MB", "64"),
    ],
)
def test_invalid_variable_is_named_with_its_value(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LocalBrokerSettings.from_env({variable: value})
    assert variable in str(caught.value)
    assert value in str(caught.value)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("BOOST_BROKER_STOMP_PORT", "BOOST_BROKER_URL"),
        ("BOOST_BROKER_HOST", "BOOST_BROKER_URL"),
        ("BOOST_STOMP_PORT", "BOOST_BROKER_URL"),
    ],
)
def test_the_old_address_variables_are_refused_naming_the_new_one(old: str, new: str) -> None:
    """The local broker and the clients once read different variables, and a client then used
    another broker on the default port: the old names stop start-up instead."""
    with pytest.raises(ConfigError, match=f"{old} -> {new}"):
        LocalBrokerSettings.from_env({old: "62613"})


def test_the_clients_url_is_where_the_broker_listens(tmp_path: Path) -> None:
    env = {"BOOST_BROKER_URL": "stomp://127.0.0.1:62613"}
    settings = LocalBrokerSettings.from_env(env)
    assert (settings.host, settings.stomp_port, settings.keystore) == ("127.0.0.1", 62613, None)
    assert settings.stomp_url == env["BOOST_BROKER_URL"]
    assert stomp_settings_from_env(env).addresses == (("127.0.0.1", 62613),)


def test_a_tls_url_needs_a_keystore_and_renders_a_tls_connector(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BOOST_BROKER_KEYSTORE"):
        LocalBrokerSettings.from_env({"BOOST_BROKER_URL": "stomp+ssl://127.0.0.1:62612"})
    keystore = tmp_path / "broker.p12"
    keystore.write_bytes(b"not read here")
    password_file = tmp_path / "pw"
    password_file.write_text("store&<pass>\n")
    settings = LocalBrokerSettings.from_env(
        {
            "BOOST_BROKER_HOME": str(tmp_path / "home"),
            "BOOST_BROKER_URL": "stomp+ssl://127.0.0.1:62612",
            "BOOST_BROKER_KEYSTORE": str(keystore),
            "BOOST_BROKER_KEYSTORE_PASSWORD_FILE": str(password_file),
        }
    )
    assert settings.keystore is not None
    assert settings.keystore.password == "store&<pass>"
    assert "store&" not in repr(settings)
    assert settings.stomp_url == "stomp+ssl://127.0.0.1:62612"
    broker = ET.fromstring(render_config(settings)).find(f"{CORE_NS}broker")
    assert broker is not None
    uris = [c.get("uri") for c in broker.iter(f"{CORE_NS}transportConnector")]
    assert (
        "stomp+ssl://127.0.0.1:62612?transport.tcpNoDelay=true&transport.socketBufferSize=1048576"
        in uris
    )
    context = broker.find(f"{CORE_NS}sslContext/{CORE_NS}sslContext")
    assert context is not None
    assert context.get("keyStore") == keystore.resolve().as_uri()
    assert context.get("keyStorePassword") == "store&<pass>"


def test_a_keystore_without_a_tls_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not stomp\\+ssl"):
        LocalBrokerSettings.from_env({"BOOST_BROKER_KEYSTORE": str(tmp_path)})


def test_a_plain_broker_has_no_ssl_context(tmp_path: Path) -> None:
    rendered = render_config(LocalBrokerSettings(home=tmp_path))
    assert "sslContext" not in rendered.split("-->")[-1]
    assert "stomp://127.0.0.1:61613?" in rendered


def test_same_port_for_both_connectors_is_refused() -> None:
    with pytest.raises(ConfigError, match="BOOST_BROKER_URL and BOOST_BROKER_OPENWIRE_PORT"):
        LocalBrokerSettings.from_env({"BOOST_BROKER_URL": "stomp://127.0.0.1:61616"})


def test_constructor_validates_and_names_the_field() -> None:
    with pytest.raises(ConfigError, match="stomp_port"):
        LocalBrokerSettings(stomp_port=70000)
    with pytest.raises(ConfigError, match="start_timeout_s"):
        LocalBrokerSettings(start_timeout_s=0)


# -- configuration --------------------------------------------------------------------------------


def test_config_has_the_configured_connectors_and_scheduler(tmp_path: Path) -> None:
    settings = LocalBrokerSettings(home=tmp_path, stomp_port=62613, openwire_port=62616)

    rendered = render_config(settings)

    # Nagle off on STOMP: with Classic's default a MESSAGE written after a RECEIPT waited for
    # the client's delayed TCP acknowledgement (docs/operations.md).
    assert (
        'uri="stomp://127.0.0.1:62613?transport.tcpNoDelay=true&amp;transport.socketBufferSize=1048576"'
        in rendered
    )
    assert 'uri="tcp://127.0.0.1:62616"' in rendered
    assert 'schedulerSupport="true"' in rendered
    assert "@" not in rendered.replace("${activemq.data}", "")
    broker = ET.fromstring(rendered).find(f"{CORE_NS}broker")
    assert broker is not None
    assert broker.get("schedulerSupport") == "true"
    # Advisories must stay on: JMS clients need them to reply to temporary queues.
    assert broker.get("advisorySupport") in (None, "true")
    # Dead letters keep Classic's default; the one policy garbage-collects tenant queues that a
    # delete purged (`boost-tenancy queues delete`).
    assert not broker.findall(f".//{CORE_NS}deadLetterStrategy")
    (entry,) = broker.findall(f".//{CORE_NS}policyEntry")
    assert (entry.get("queue"), entry.get("gcInactiveDestinations")) == ("tenant.>", "true")
    assert int(entry.get("inactiveTimoutBeforeGC", "0")) > 0
    assert int(broker.get("schedulePeriodForDestinationPurge", "0")) > 0
    memory = broker.find(f"{CORE_NS}systemUsage/{CORE_NS}systemUsage/{CORE_NS}memoryUsage/*")
    assert memory is not None
    assert memory.get("limit") == "256 mb"


def test_memory_limit_stays_within_half_the_heap(tmp_path: Path) -> None:
    rendered = render_config(LocalBrokerSettings(home=tmp_path, heap_mb=128))
    assert '<memoryUsage limit="64 mb"/>' in rendered


def test_ipv6_host_is_bracketed_in_uris(tmp_path: Path) -> None:
    rendered = render_config(LocalBrokerSettings(home=tmp_path, host="::1"))
    assert (
        'uri="stomp://[::1]:61613?transport.tcpNoDelay=true&amp;transport.socketBufferSize=1048576"'
        in rendered
    )


def test_command_points_the_broker_at_its_home(tmp_path: Path) -> None:
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path, heap_mb=256))
    command = broker.command()
    assert f"-Dactivemq.base={tmp_path.resolve()}" in command
    assert "-Xmx256M" in command
    assert command[-1] == f"xbean:{(tmp_path.resolve() / 'conf' / 'activemq.xml').as_uri()}"


def test_command_puts_the_json_jars_on_the_class_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without XStream and Jettison, Classic drops a STOMP connection that asks for a MapMessage
    # as JSON (queue statistics) instead of converting it.
    jars = (tmp_path / "xstream.jar", tmp_path / "jettison.jar", tmp_path / "absent.jar")
    for jar in jars[:2]:
        jar.write_bytes(b"")
    monkeypatch.setattr(lb, "STOMP_JSON_JARS", jars)
    command = LocalBroker(LocalBrokerSettings(home=tmp_path)).command()
    assert f"-Dactivemq.classpath={jars[0]}{os.pathsep}{jars[1]}" in command
    assert command.index(f"-Dactivemq.classpath={jars[0]}{os.pathsep}{jars[1]}") < command.index(
        "-jar"
    )


def test_statistics_plugin_is_enabled(tmp_path: Path) -> None:
    broker = ET.fromstring(render_config(LocalBrokerSettings(home=tmp_path))).find(
        f"{CORE_NS}broker"
    )
    assert broker is not None
    assert broker.find(f"{CORE_NS}plugins/{CORE_NS}statisticsBrokerPlugin") is not None


# -- installation ----------------------------------------------------------------------------------


def _which_without(*missing: str) -> object:
    real_which = shutil.which

    def which(name: str) -> str | None:
        return None if name in missing else real_which(name) or f"/usr/bin/{name}"

    return which


def test_missing_java_gives_the_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "activemq.jar"
    jar.touch()
    monkeypatch.setattr(lb, "ACTIVEMQ_JAR", jar)
    monkeypatch.setattr(lb, "STOMP_JSON_JARS", (jar,))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    with pytest.raises(LocalBrokerError) as caught:
        LocalBroker(LocalBrokerSettings(home=tmp_path)).ensure_installed()

    assert str(caught.value) == JAVA_MISSING_MESSAGE
    assert isinstance(caught.value, BoostTenancyError)


def test_missing_json_jars_are_installed_with_activemq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "activemq.jar"
    jar.touch()
    monkeypatch.setattr(lb, "ACTIVEMQ_JAR", jar)
    monkeypatch.setattr(lb, "STOMP_JSON_JARS", (tmp_path / "xstream.jar",))
    installed: list[Path] = []
    monkeypatch.setattr(lb, "install_activemq", installed.append)
    LocalBroker(LocalBrokerSettings(home=tmp_path)).ensure_installed()
    assert installed == [jar]


def test_missing_activemq_without_apt_get(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lb, "ACTIVEMQ_JAR", tmp_path / "missing.jar")
    monkeypatch.setattr(shutil, "which", _which_without("apt-get"))

    with pytest.raises(LocalBrokerError, match="apt-get install activemq"):
        LocalBroker(LocalBrokerSettings(home=tmp_path)).ensure_installed()


def test_missing_activemq_as_user_without_sudo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lb, "ACTIVEMQ_JAR", tmp_path / "missing.jar")
    monkeypatch.setattr(shutil, "which", _which_without("sudo"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    with pytest.raises(LocalBrokerError, match=r"run `apt-get install activemq[^`]*` as root"):
        LocalBroker(LocalBrokerSettings(home=tmp_path)).ensure_installed()


@pytest.mark.parametrize(("euid", "prefix"), [(0, []), (1000, ["sudo", "-n"])])
def test_missing_activemq_is_installed_with_apt_get(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, euid: int, prefix: list[str]
) -> None:
    jar = tmp_path / "activemq.jar"
    monkeypatch.setattr(lb, "ACTIVEMQ_JAR", jar)
    monkeypatch.setattr(shutil, "which", _which_without())
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        env = kwargs["env"]
        assert isinstance(env, dict)
        calls.append((command, env))
        if "install" in command:
            jar.touch()
        return subprocess.CompletedProcess(command, 0, stdout="")

    monkeypatch.setattr(subprocess, "run", run)

    LocalBroker(LocalBrokerSettings(home=tmp_path)).ensure_installed()

    commands = [command for command, _ in calls]
    assert [c[: len(prefix)] for c in commands] == [prefix, prefix]
    assert commands[0][-1] == "update"
    # The JSON jars the queue statistics need are only recommended by the package: named.
    assert commands[1][-5:] == ["install", "-y", "activemq", "libxstream-java", "libjettison-java"]
    for command, env in calls:
        noninteractive = "DEBIAN_FRONTEND=noninteractive" in command
        assert noninteractive or env.get("DEBIAN_FRONTEND") == "noninteractive"


def test_failed_apt_get_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lb, "ACTIVEMQ_JAR", tmp_path / "missing.jar")
    monkeypatch.setattr(shutil, "which", _which_without())
    monkeypatch.setattr(os, "geteuid", lambda: 0)

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 100, stdout="E: Unable to locate package")

    monkeypatch.setattr(subprocess, "run", run)

    with pytest.raises(LocalBrokerError, match="exit code 100") as caught:
        LocalBroker(LocalBrokerSettings(home=tmp_path)).ensure_installed()
    assert "Unable to locate package" in str(caught.value)


# -- state without a broker ------------------------------------------------------------------------


def test_status_when_nothing_runs(tmp_path: Path) -> None:
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path / "home", stomp_port=1, openwire_port=2))

    assert broker.status() == {
        "running": False,
        "ready": False,
        "pid": None,
        "host": "127.0.0.1",
        "stomp_port": 1,
        "url": "stomp://127.0.0.1:1",
        "openwire_port": 2,
        "home": str((tmp_path / "home").resolve()),
        "log": str((tmp_path / "home").resolve() / "logs" / "broker.log"),
        "routed_queues": None,
    }
    assert not broker.is_running()
    assert not (tmp_path / "home").exists()


def test_stale_pid_file_is_not_a_running_broker(tmp_path: Path) -> None:
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path))
    # This test process is alive but is not a broker of this home.
    broker.pid_file.write_text(f"{os.getpid()}\n")

    assert not broker.is_running()
    broker.stop()
    assert not broker.pid_file.exists()


def test_stop_kill_and_purge_are_no_ops_without_a_home(tmp_path: Path) -> None:
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path / "never"))
    broker.stop()
    broker.kill()
    broker.purge_data()
    assert not (tmp_path / "never").exists()


def test_purge_deletes_the_data_of_a_stopped_broker(tmp_path: Path) -> None:
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path))
    (broker.data_dir / "kahadb").mkdir(parents=True)
    (broker.data_dir / "kahadb" / "db.data").write_bytes(b"x")

    broker.purge_data()

    assert not broker.data_dir.exists()


def test_start_refuses_a_port_held_by_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: int
) -> None:
    broker = LocalBroker(LocalBrokerSettings(home=tmp_path, stomp_port=listener))
    monkeypatch.setattr(broker, "ensure_installed", lambda: None)

    with pytest.raises(LocalBrokerError, match=f"port {listener} \\(STOMP\\)"):
        broker.start()
    assert not broker.pid_file.exists()


def test_handshake_fails_against_a_non_stomp_listener(listener: int) -> None:
    assert not stomp_handshake("127.0.0.1", listener, timeout_s=0.3)


# -- command line ---------------------------------------------------------------------------------


def test_cli_status_prints_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BOOST_BROKER_HOME", str(tmp_path))

    assert run_cli(["status"]) == 0

    status = json.loads(capsys.readouterr().out)
    assert status["running"] is False
    assert status["home"] == str(tmp_path.resolve())


def test_cli_error_is_one_line_with_exit_code_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BOOST_BROKER_URL", "stomp://127.0.0.1:many")

    assert run_cli(["status"]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "BOOST_BROKER_URL" in captured.err and "many" in captured.err


def test_cli_rejects_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["explode"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_config_has_no_routes_unless_given(tmp_path: Path) -> None:
    broker = ET.fromstring(render_config(LocalBrokerSettings(home=tmp_path))).find(
        f"{CORE_NS}broker"
    )
    assert broker is not None
    assert broker.find(f"{CORE_NS}destinationInterceptors") is None


def test_routes_file_goes_into_the_broker_element(tmp_path: Path) -> None:
    routes = tmp_path / "routes.xml"
    routes.write_text(classic_destination_interceptors(["cmd.a"], ["acme"]))
    rendered = render_config(LocalBrokerSettings(home=tmp_path, routes=routes))
    broker = ET.fromstring(rendered).find(f"{CORE_NS}broker")
    assert broker is not None
    (composite,) = broker.iter(f"{CORE_NS}compositeQueue")
    assert composite.get("name") == "cmd.a"
    (forward,) = composite.iter(f"{CORE_NS}filteredDestination")
    assert forward.get("queue") == "tenant.acme.cmd.a"


def test_routes_variable_is_read(tmp_path: Path) -> None:
    settings = LocalBrokerSettings.from_env({"BOOST_BROKER_ROUTES": str(tmp_path / "r.xml")})
    assert settings.routes == tmp_path / "r.xml"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read it"),
        ("<destinationInterceptors>", "not well-formed XML"),
        ("<plugins/>", "must hold one <destinationInterceptors> element"),
    ],
)
def test_a_bad_routes_file_is_refused_naming_the_variable(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    routes = tmp_path / "routes.xml"
    if content is not None:
        routes.write_text(content)
    with pytest.raises(LocalBrokerError, match=rf"BOOST_BROKER_ROUTES=.*{problem}"):
        render_config(LocalBrokerSettings(home=tmp_path, routes=routes))


def test_status_names_the_queues_the_configuration_of_a_broker_routes(tmp_path: Path) -> None:
    """What `scripts/test` reads of a broker already running: the plugin of the configuration
    it was started with, Classic's or Artemis's, whatever the environment says now."""
    config = tmp_path / "activemq.xml"
    assert plugin_queues_in(config) is None
    for routed, expected in [(None, "*"), ("cmd.a,cmd.b", "cmd.a,cmd.b"), ("none", "none")]:
        env = {} if routed is None else {"BOOST_BROKER_ROUTED_QUEUES": routed}
        config.write_text(render_config(LocalBrokerSettings.from_env(env)), encoding="utf-8")
        assert plugin_queues_in(config) == expected
    config.write_text(plugin_xml(["cmd.a"]), encoding="utf-8")
    assert plugin_queues_in(config) == "cmd.a"
