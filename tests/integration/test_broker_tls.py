"""STOMP over TLS against a real ActiveMQ Classic and a real ActiveMQ Artemis, and AMQP 1.0 over
TLS against the same Artemis: the test makes a CA and a broker certificate for "localhost",
starts a broker of its own with TLS acceptors (Classic's stomp+ssl, from the same BOOST_BROKER_*
variables scripts/broker reads; Artemis with the project's broker.xml and stomp-tls and
amqp-tls acceptors beside the plain ones, from the variables scripts/artemis reads), and shows a
round trip over TLS, a broker signed by another CA refused (with or without the host name
check), a certificate that does not name the host connected to refused unless
BOOST_BROKER_VERIFY_HOST=off says so, and batches larger than the sockets' buffers stored whole.
"""

from __future__ import annotations

import shutil
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from boost_tenancy.application.environment import stomp_settings_from_env
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.base import Transport
from boost_tenancy.transports.stomp import StompTransport
from devtools.local_artemis import PASSWORD as ARTEMIS_PASSWORD
from devtools.local_artemis import USER as ARTEMIS_USER
from devtools.local_artemis import ArtemisSettings, LocalArtemis
from devtools.local_broker import LocalBroker, LocalBrokerSettings
from tests.conftest import require_activemq, unavailable
from tests.integration.test_local_broker import _free_port_pair
from tests.tls_certificates import KEYSTORE_PASSWORD, broker_keystore, make_authority
from tests.tls_support import amqps_client, refused
from tests.tls_support import round_trip as tls_round_trip

pytestmark = [
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.local_broker("starts a Classic and an Artemis with a stomp+ssl acceptor"),
]

ARTEMIS_OFFSET = 1800
"""Ports 63512 (STOMP over TLS), 63513 (STOMP), 63516 (CORE), 7571 (AMQP over TLS), 7572 (AMQP):
clear of every other broker of the suite."""


@dataclass(frozen=True, slots=True)
class TlsBroker:
    port: int
    ca_file: Path
    other_ca_file: Path
    """A CA that did not sign the broker's certificate."""
    login: dict[str, str]
    """The BOOST_BROKER_USER and _PASSWORD the broker asks for (none for the Classic)."""
    amqp_port: int | None = None
    """The broker's AMQP 1.0 over TLS port (Artemis; the project's Classic takes no AMQP)."""


@pytest.fixture(scope="module", params=["classic", "artemis"])
def tls_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsBroker]:
    flavour: str = request.param
    home = tmp_path_factory.mktemp(f"tls-{flavour}")
    authority = make_authority(home, "boost-test-ca")
    other = make_authority(home, "other-ca")
    keystore = broker_keystore(home, authority, ["localhost"])
    if flavour == "artemis":
        yield from _artemis(home, keystore, authority.ca_file, other.ca_file)
        return
    require_activemq()
    password_file = home / "keystore-password"
    password_file.write_text(f"{KEYSTORE_PASSWORD}\n")
    stomp_port, openwire_port = _free_port_pair()
    # The variables scripts/broker reads: the clients' URL says where and that it is TLS.
    settings = LocalBrokerSettings.from_env(
        {
            "BOOST_BROKER_HOME": str(home / "broker"),
            "BOOST_BROKER_URL": f"stomp+ssl://127.0.0.1:{stomp_port}",
            "BOOST_BROKER_OPENWIRE_PORT": str(openwire_port),
            "BOOST_BROKER_KEYSTORE": str(keystore),
            "BOOST_BROKER_KEYSTORE_PASSWORD_FILE": str(password_file),
        }
    )
    broker = LocalBroker(settings)
    broker.start()
    try:
        yield TlsBroker(stomp_port, authority.ca_file, other.ca_file, {})
    finally:
        broker.stop(timeout_s=10)


def _artemis(home: Path, keystore: Path, ca_file: Path, other_ca_file: Path) -> Iterator[TlsBroker]:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        unavailable("Java and Maven are needed to run an Artemis of the test's own")
    password_file = home / "artemis-keystore-password"
    password_file.write_text(f"{KEYSTORE_PASSWORD}\n")
    # The variables scripts/artemis reads; no tenant plugin (the StompLossPlugin runs anyway).
    settings = ArtemisSettings.from_env(
        {
            "BOOST_ARTEMIS_HOME": str(home / "artemis"),
            "BOOST_ARTEMIS_PORT_OFFSET": str(ARTEMIS_OFFSET),
            "BOOST_ARTEMIS_ROUTED_QUEUES": "none",
            "BOOST_ARTEMIS_KEYSTORE": str(keystore),
            "BOOST_ARTEMIS_KEYSTORE_PASSWORD_FILE": str(password_file),
        }
    )
    artemis = LocalArtemis(settings)
    artemis.start()
    try:
        login = {"BOOST_BROKER_USER": ARTEMIS_USER, "BOOST_BROKER_PASSWORD": ARTEMIS_PASSWORD}
        yield TlsBroker(
            artemis.settings.stomp_tls_port,
            ca_file,
            other_ca_file,
            login,
            amqp_port=artemis.settings.amqp_tls_port,
        )
    finally:
        artemis.stop(timeout_s=30)


def client(host: str, broker: TlsBroker, **env: str) -> StompTransport:
    """A transport configured as an entry point is: from BOOST_BROKER_* variables."""
    settings = stomp_settings_from_env(
        {
            "BOOST_BROKER_URL": f"stomp+ssl://{host}:{broker.port}",
            "BOOST_BROKER_CA_FILE": str(broker.ca_file),
            "BOOST_BROKER_CONNECT_TIMEOUT_S": "10",
            **broker.login,
            **env,
        }
    )
    return StompTransport(settings)


def amqp_client(host: str, broker: TlsBroker, **env: str) -> Transport:
    """An AMQP 1.0 transport to the broker's amqps acceptor, configured as an entry point is: a
    URL and BOOST_BROKER_* variables."""
    if broker.amqp_port is None:
        pytest.skip("the project's Classic takes no AMQP 1.0 (scripts/broker)")
    credentials = f"{ARTEMIS_USER}:{ARTEMIS_PASSWORD}@"
    return amqps_client(f"amqps://{credentials}{host}:{broker.amqp_port}", broker.ca_file, **env)


def over_tls(transport: Transport) -> None:
    assert isinstance(transport, StompTransport)
    link = transport._connection.live()
    assert link is not None
    assert isinstance(link._conn.transport.socket, ssl.SSLSocket), "not a TLS connection"


def round_trip(transport: StompTransport) -> str:
    return tls_round_trip(transport, connected=over_tls)


def test_a_message_goes_round_trip_over_tls(tls_broker: TlsBroker) -> None:
    body = round_trip(client("localhost", tls_broker))
    assert body.startswith("over tls ")


def test_a_broker_signed_by_another_ca_is_refused(tls_broker: TlsBroker) -> None:
    other = {"BOOST_BROKER_CA_FILE": str(tls_broker.other_ca_file)}
    assert refused(client("localhost", tls_broker, **other))
    # Turning the name check off never turns the chain check off.
    assert refused(client("localhost", tls_broker, **other, BOOST_BROKER_VERIFY_HOST="off"))


def test_a_certificate_not_naming_the_host_is_refused_unless_the_check_is_turned_off(
    tls_broker: TlsBroker,
) -> None:
    # The certificate names "localhost" only; 127.0.0.1 is the same broker by another name.
    assert refused(client("127.0.0.1", tls_broker))
    assert refused(client("127.0.0.1", tls_broker, BOOST_BROKER_VERIFY_HOST="on"))
    body = round_trip(client("127.0.0.1", tls_broker, BOOST_BROKER_VERIFY_HOST="off"))
    assert body.startswith("over tls ")


@pytest.mark.parametrize("atomic", [False, True], ids=["receipt-on-last", "transaction"])
def test_a_batch_larger_than_the_sockets_buffers_is_stored_whole_over_tls(
    tls_broker: TlsBroker, atomic: bool
) -> None:
    """Over TLS stomp.py's socket is non-blocking: a write larger than what the socket takes at
    once failed with SSLWantWriteError ("The operation did not complete") before the transport
    queued its writes to stomp.py's io thread."""
    transport = client("localhost", tls_broker)
    transport.connect()
    queue = f"tenant.org-tls.big.{uuid.uuid4().hex[:8]}"
    try:
        body = "x" * 200_000
        items = [(queue, WireMessage(body=body, properties={"tenantUUID": "org-tls"}))] * 50
        transport.send_batch(items, atomic=atomic)
        stats = transport.queue_stats([queue])[queue]
        assert stats is not None and stats.waiting == 50, stats
    finally:
        transport.close()


def test_amqp_goes_round_trip_over_tls_to_the_brokers_own_acceptor(tls_broker: TlsBroker) -> None:
    """Not through a terminator (test_amqp_tls.py): Artemis's own TLS, with its SASL after it.
    The port takes TLS only (sslEnabled), so a round trip there went over TLS."""
    assert tls_round_trip(amqp_client("localhost", tls_broker)).startswith("over tls ")


def test_amqp_refuses_a_broker_signed_by_another_ca_or_not_naming_the_host(
    tls_broker: TlsBroker,
) -> None:
    other = {"BOOST_BROKER_CA_FILE": str(tls_broker.other_ca_file)}
    assert refused(amqp_client("localhost", tls_broker, **other))
    assert refused(amqp_client("localhost", tls_broker, **other, BOOST_BROKER_VERIFY_HOST="off"))
    assert refused(amqp_client("127.0.0.1", tls_broker))
    body = tls_round_trip(amqp_client("127.0.0.1", tls_broker, BOOST_BROKER_VERIFY_HOST="off"))
    assert body.startswith("over tls ")
