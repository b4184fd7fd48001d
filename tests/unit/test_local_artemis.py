"""The project's local Artemis manager: its configuration from the project's broker.xml, its
ports, its cache, and one Artemis version named everywhere."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from boost_tenancy.errors import ConfigError
from boost_tenancy.transports.artemis_management import STOMP_LOSS_PLUGIN
from devtools import artemis_cluster
from devtools import local_artemis as la
from devtools.artemis_pair import ENV_HOME as PAIR_HOME
from devtools.artemis_pair import ArtemisPair
from devtools.artemis_pair import run_cli as run_pair_cli
from devtools.artemis_plugin import plugin_xml
from devtools.broker_settings import LocalBrokerError
from services.common.contract import ROUTED_QUEUES
from tests.artemis_container import DEFAULT_IMAGE, suite_broker_xml, suite_etc_override

ROOT = Path(__file__).resolve().parents[2]


def test_compose_the_test_container_and_the_local_broker_name_one_artemis_version() -> None:
    dockerfile = (ROOT / "docker" / "artemis" / "Dockerfile").read_text(encoding="utf-8")
    images = set(re.findall(r"FROM apache/activemq-artemis:([0-9.]+)", dockerfile))
    assert images == {la.ARTEMIS_VERSION}
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert "dockerfile: docker/artemis/Dockerfile" in compose
    assert f"apache/activemq-artemis:{la.ARTEMIS_VERSION}" == DEFAULT_IMAGE


def test_the_projects_broker_xml_is_rendered_with_every_acceptor_on_its_own_loopback_port() -> None:
    rendered = la.render_broker_xml(la.ArtemisSettings(home=Path("/x"), port_offset=100))
    acceptors = re.findall(r"tcp://([0-9.]+):(\d+)", rendered)
    assert acceptors == [("127.0.0.1", "61816"), ("127.0.0.1", "61813"), ("127.0.0.1", "5872")]
    assert "0.0.0.0" not in rendered


def test_address_settings_of_a_test_go_among_the_projects_own() -> None:
    extra = '<address-setting match="t.#"><max-size-bytes>1</max-size-bytes></address-setting>'
    rendered = la.render_broker_xml(la.ArtemisSettings(home=Path("/x"), address_settings_xml=extra))
    settings = re.search(r"<address-settings>(.*?)</address-settings>", rendered, re.S)
    assert settings is not None
    assert extra in settings[1] and '<address-setting match="#">' in settings[1]


@pytest.mark.parametrize(
    ("name", "plain", "tls_port"), [("stomp", 61813, 61812), ("amqp", 5872, 5871)]
)
def test_a_keystore_adds_a_tls_acceptor_with_the_plain_acceptors_settings(
    name: str, plain: int, tls_port: int
) -> None:
    settings = la.ArtemisSettings(
        home=Path("/x"),
        port_offset=100,
        tls_keystore=Path("/keys/broker.p12"),
        tls_password="pw-1",
    )
    rendered = la.render_broker_xml(settings)
    acceptor = re.search(rf'<acceptor name="{name}">tcp://127.0.0.1:{plain}\?([^<]*)<', rendered)
    tls = re.search(rf'<acceptor name="{name}-tls">tcp://127.0.0.1:{tls_port}\?([^<]*)<', rendered)
    assert acceptor is not None and tls is not None
    assert tls[1] == (
        f"{acceptor[1]};sslEnabled=true;keyStoreType=PKCS12;keyStorePath=/keys/broker.p12;"
        "keyStorePassword=pw-1"
    )
    assert settings.ports()[f"{name}_tls"] == tls_port
    assert f"{name}_tls" not in la.ArtemisSettings(home=Path("/x")).ports()
    assert f'name="{name}-tls"' not in la.render_broker_xml(la.ArtemisSettings(home=Path("/x")))


def test_a_keystore_password_that_would_end_the_acceptors_url_is_refused() -> None:
    with pytest.raises(LocalBrokerError, match="keystore password cannot hold"):
        la.ArtemisSettings(tls_keystore=Path("/k.p12"), tls_password="a;b=c")


def test_scripts_artemis_takes_a_keystore_and_its_password_together(tmp_path: Path) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text("pw-2\n")
    base = {"BOOST_ARTEMIS_HOME": str(tmp_path / "a"), "BOOST_ARTEMIS_ROUTED_QUEUES": "none"}
    settings = la.ArtemisSettings.from_env(
        {
            **base,
            "BOOST_ARTEMIS_KEYSTORE": str(tmp_path / "broker.p12"),
            "BOOST_ARTEMIS_KEYSTORE_PASSWORD_FILE": str(password_file),
        }
    )
    assert settings.tls_keystore == tmp_path / "broker.p12"
    assert settings.tls_password == "pw-2"
    assert la.ArtemisSettings.from_env(base).tls_keystore is None
    for one in ({"BOOST_ARTEMIS_KEYSTORE": "k.p12"}, {"BOOST_ARTEMIS_KEYSTORE_PASSWORD": "pw"}):
        with pytest.raises(LocalBrokerError, match="needs both BOOST_ARTEMIS_KEYSTORE"):
            la.ArtemisSettings.from_env({**base, **one})


def test_an_unexpected_acceptor_port_is_refused() -> None:
    source = la.BROKER_XML.read_text(encoding="utf-8").replace(":5672", ":5673")
    with pytest.raises(LocalBrokerError, match="unknown port 5673"):
        la.render_broker_xml(la.ArtemisSettings(home=Path("/x")), source)


def test_the_compose_broker_runs_the_tenant_plugin_for_every_queue() -> None:
    """docker/artemis/etc-override/broker.xml carries what `boost-tenancy broker-routes --broker
    artemis --queue '*'` prints, and its image the plugin's jars."""
    compose_xml = la.BROKER_XML.read_text(encoding="utf-8")
    assert plugin_xml(["*"]) in compose_xml
    dockerfile = (ROOT / "docker" / "artemis" / "Dockerfile").read_text(encoding="utf-8")
    assert "brokers/artemis" in dockerfile
    assert "/opt/activemq-artemis/lib/" in dockerfile


def test_the_suites_container_routes_the_pipelines_queues_alone() -> None:
    """As the suite's other brokers run (scripts/test): its shared-topology tests send to
    shared queue names."""
    rendered = suite_broker_xml()
    assert plugin_xml(sorted(ROUTED_QUEUES)) in rendered
    assert rendered.replace(plugin_xml(sorted(ROUTED_QUEUES)), plugin_xml(["*"])) == (
        la.BROKER_XML.read_text(encoding="utf-8")
    )


def test_the_local_broker_runs_the_plugins_its_settings_name(tmp_path: Path) -> None:
    default = la.ArtemisSettings.from_env({la.ENV_HOME: str(tmp_path)})
    assert la.render_broker_xml(default).count("<broker-plugins>") == 1
    assert plugin_xml(["*"]) in la.render_broker_xml(default)
    pipeline = la.ArtemisSettings.from_env({la.ENV_HOME: str(tmp_path), la.ENV_ROUTED: "pipeline"})
    assert plugin_xml(ROUTED_QUEUES) in la.render_broker_xml(pipeline)
    listed = la.ArtemisSettings.from_env({la.ENV_HOME: str(tmp_path), la.ENV_ROUTED: "cmd.a"})
    assert la.render_broker_xml(listed).count("<broker-plugins>") == 1
    assert plugin_xml(["cmd.a"]) in la.render_broker_xml(listed)
    # Routing nothing, it still runs the StompLossPlugin: a lost STOMP connection's messages
    # come back on every broker the suites use (docs/interop.md).
    none = la.ArtemisSettings.from_env({la.ENV_HOME: str(tmp_path), la.ENV_ROUTED: "none"})
    assert plugin_xml([]) in la.render_broker_xml(none)
    assert la.render_broker_xml(none).count("<broker-plugin ") == 1
    made = la.ArtemisSettings(home=tmp_path, extra_xml="    <ha-policy/>")
    for settings in (default, pipeline, listed, none, made):
        assert STOMP_LOSS_PLUGIN in la.render_broker_xml(settings)
    for refused in (
        la.ArtemisSettings(home=tmp_path, plugins_xml=""),
        la.ArtemisSettings(home=tmp_path, plugins_xml=plugin_xml([]).replace("Stomp", "Other")),
        la.ArtemisSettings(home=tmp_path, extra_xml=plugin_xml(["cmd.a"])),
    ):
        with pytest.raises(LocalBrokerError, match="one <broker-plugins> element"):
            la.render_broker_xml(refused)
    shared = {la.ENV_HOME: str(tmp_path), la.ENV_ROUTED: "cmd.a", "BOOST_ROUTING": "shared"}
    with pytest.raises(ConfigError, match=re.escape("BOOST_ARTEMIS_ROUTED_QUEUES='cmd.a'")):
        la.ArtemisSettings.from_env(shared)


def test_extra_configuration_goes_into_core() -> None:
    settings = la.ArtemisSettings(home=Path("/x"), extra_xml="    <ha-policy/>")
    assert "    <ha-policy/>\n" + plugin_xml([]) + "\n  </core>" in la.render_broker_xml(settings)


def test_every_start_installs_the_projects_jars_and_lists_the_loss_plugin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """However the instance was made (the pair, the cluster, a test's own), the StompLossPlugin's
    jar is in its lib/ and its broker.xml names the plugin."""
    jar = tmp_path / "build" / "boost-tenancy-artemis.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"jar")
    monkeypatch.setattr(la, "build_plugin", lambda: (jar,))
    monkeypatch.setattr(
        la.LocalArtemis, "_create", lambda self, _d: (self.home / "etc").mkdir(parents=True)
    )
    monkeypatch.setattr(la.LocalArtemis, "_spawn", lambda self, _argv: 4242)
    broker = la.LocalArtemis(la.ArtemisSettings(home=tmp_path / "home", extra_xml="<x/>"))
    broker._distribution = tmp_path
    assert broker._launch() == 4242
    assert (tmp_path / "home" / "lib" / jar.name).read_bytes() == b"jar"
    written = (tmp_path / "home" / "etc" / "broker.xml").read_text(encoding="utf-8")
    assert written.count(STOMP_LOSS_PLUGIN) == 1

    def no_build() -> tuple[Path, ...]:
        raise AssertionError("built for a configuration that is refused")

    monkeypatch.setattr(la, "build_plugin", no_build)
    refused = la.LocalArtemis(la.ArtemisSettings(home=tmp_path / "other", plugins_xml=""))
    refused._distribution = tmp_path
    with pytest.raises(LocalBrokerError, match="one <broker-plugins> element"):
        refused._launch()
    assert not (tmp_path / "other").exists()


def test_settings_from_the_environment_and_their_refusals(tmp_path: Path) -> None:
    settings = la.ArtemisSettings.from_env(
        {
            la.ENV_HOME: str(tmp_path),
            la.ENV_OFFSET: "7",
            la.ENV_CACHE: str(tmp_path / "c"),
            la.ENV_ROUTED: "none",
        }
    )
    assert (settings.home, settings.cache) == (tmp_path, tmp_path / "c")
    assert settings.ports() == {"stomp": 61720, "core": 61723, "amqp": 5779}
    env = settings.suite_env()
    assert env["BOOST_TEST_BROKER_FLAVOUR"] == "artemis"
    assert env["BOOST_BROKER_URL"] == "stomp://127.0.0.1:61720"
    assert env["BOOST_BROKER_AMQP_URL"] == "amqp://boost:boost-test@127.0.0.1:5779"
    with pytest.raises(LocalBrokerError, match="number of ports"):
        la.ArtemisSettings.from_env({la.ENV_OFFSET: "-1"})
    with pytest.raises(LocalBrokerError, match="0-2000"):
        la.ArtemisSettings(home=tmp_path, port_offset=5000)


def test_a_fetched_archive_whose_checksum_differs_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "apache-artemis-2.44.0-bin.zip"
    archive.write_bytes(b"not the archive")
    published = tmp_path / "apache-artemis-2.44.0-bin.zip.sha1"
    published.write_text("0" * 40 + "\n", encoding="ascii")
    with pytest.raises(LocalBrokerError, match="Maven Central publishes 0000"):
        la._check_checksum(archive, published)


def test_a_cached_artifact_is_used_without_asking_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = tmp_path / f"artemis-jms-client-all-{la.ARTEMIS_VERSION}.jar"
    cached.write_bytes(b"jar")
    monkeypatch.setattr(la.shutil, "which", lambda _name: None)  # mvn would be refused
    assert la.ensure_client_jar(tmp_path) == cached


def test_the_pair_gives_clients_both_brokers_and_each_broker_its_peer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = ArtemisPair(tmp_path, live_offset=100, backup_offset=200)
    assert pair.live.settings.plugins_xml == pair.backup.settings.plugins_xml == plugin_xml([])
    assert pair.client_env()["BOOST_BROKER_URL"] == "stomp://127.0.0.1:61813,127.0.0.1:61913"
    live_xml, backup_xml = pair.live.settings.extra_xml, pair.backup.settings.extra_xml
    assert "<primary>" in live_xml and "<backup><allow-failback>true" in backup_xml
    assert 'name="peer">tcp://127.0.0.1:61916<' in live_xml
    assert 'name="peer">tcp://127.0.0.1:61816<' in backup_xml
    assert pair.live.settings.shared_data == pair.backup.settings.shared_data == pair.store

    with pytest.MonkeyPatch.context() as env:
        env.setenv(PAIR_HOME, str(tmp_path))
        assert run_pair_cli(["env"]) == 0
        assert run_pair_cli(["purge"]) == 0
        assert run_pair_cli(["no-such-command"]) == 2
    out = capsys.readouterr()
    assert "export BOOST_BROKER_URL=stomp://127.0.0.1:61813,127.0.0.1:61913" in out.out
    assert "invalid choice: 'no-such-command'" in out.err


def test_the_suites_container_gets_a_readable_copy_of_etc_override() -> None:
    folder = suite_etc_override()
    try:
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            p.name for p in la.BROKER_XML.parent.iterdir()
        )
        assert (folder / "broker.xml").read_text(encoding="utf-8") == suite_broker_xml()
        assert folder.stat().st_mode & 0o777 == 0o755
        assert all(p.stat().st_mode & 0o777 == 0o644 for p in folder.iterdir())
    finally:
        shutil.rmtree(folder)


def test_the_cluster_routes_every_queue_by_default_or_the_queues_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = {artemis_cluster.ENV_HOME: str(tmp_path)}

    def plugins(env: dict[str, str]) -> set[str]:
        cluster = artemis_cluster.ArtemisCluster.from_env({**home, **env})
        return {node.settings.plugins_xml for node in cluster.nodes}

    every = plugins({})
    assert every == plugins({"BOOST_ARTEMIS_CLUSTER_QUEUES": "*"})
    assert all(plugin_xml(["*"]) in xml for xml in every)
    shared = plugins({"BOOST_ROUTING_OVERRIDES": "evt.document.text.extracted=shared"})
    assert all(plugin_xml(["*"], shared=["evt.document.text.extracted"]) in xml for xml in shared)
    assert all(
        plugin_xml(ROUTED_QUEUES) in xml
        for xml in plugins({"BOOST_ARTEMIS_CLUSTER_QUEUES": "pipeline"})
    )
    assert all(
        plugin_xml(["cmd.a"]) in xml for xml in plugins({"BOOST_ARTEMIS_CLUSTER_QUEUES": "cmd.a"})
    )
    with pytest.raises(LocalBrokerError, match="both nodes run the tenant plugin"):
        artemis_cluster.ArtemisCluster.from_env({**home, "BOOST_ARTEMIS_CLUSTER_QUEUES": "none"})
