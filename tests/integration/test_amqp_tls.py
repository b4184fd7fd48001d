"""AMQP 1.0 over TLS (amqps://) to the real AMQP 1.0 broker, through a TLS terminator in front
of it (tests/tls_support.py; a load balancer or stunnel does the same in front of a broker): the
test makes its CAs and certificates, and shows a round trip over TLS configured only by
BOOST_BROKER_* variables, a server signed by another CA refused, a certificate not naming the
host refused unless BOOST_BROKER_VERIFY_HOST=off, and a client certificate presented where the
server requires one (refused without it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from boost_tenancy.transports.base import Transport
from tests.tls_certificates import make_authority, server_pem
from tests.tls_support import TlsTerminator, amqps_client, refused, round_trip

pytestmark = [pytest.mark.amqp_broker]


@dataclass(frozen=True, slots=True)
class Tls:
    terminator: TlsTerminator
    """Serves a certificate for "localhost" signed by ca_file, no client certificate asked."""
    mutual: TlsTerminator
    """The same, requiring a client certificate signed by ca_file."""
    ca_file: Path
    other_ca_file: Path
    client_cert: Path
    client_key: Path
    credentials: str
    """user:password@ of the broker's URL (or nothing)."""


@pytest.fixture(scope="module")
def tls(amqp_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    home = tmp_path_factory.mktemp("amqp-tls")
    authority = make_authority(home, "boost-test-ca")
    other = make_authority(home, "other-ca")
    cert_file, key_file = server_pem(home, authority, ["localhost"])
    client_cert, client_key = server_pem(home, authority, ["boost-client"], client=True)
    parts = urlsplit(amqp_url)
    upstream = (parts.hostname or "127.0.0.1", parts.port or 5672)
    credentials = amqp_url.split("://", 1)[1].rpartition("@")[0]
    with (
        TlsTerminator(upstream, cert_file, key_file) as terminator,
        TlsTerminator(upstream, cert_file, key_file, client_ca=authority.ca_file) as mutual,
    ):
        yield Tls(
            terminator=terminator,
            mutual=mutual,
            ca_file=authority.ca_file,
            other_ca_file=other.ca_file,
            client_cert=client_cert,
            client_key=client_key,
            credentials=f"{credentials}@" if credentials else "",
        )


def client(tls: Tls, host: str, *, mutual: bool = False, **env: str) -> Transport:
    """A transport configured as an entry point is: a URL and BOOST_BROKER_* variables."""
    port = (tls.mutual if mutual else tls.terminator).port
    return amqps_client(f"amqps://{tls.credentials}{host}:{port}", tls.ca_file, **env)


def test_a_message_goes_round_trip_over_tls(tls: Tls) -> None:
    failed_before = tls.terminator.handshakes_failed
    assert round_trip(client(tls, "localhost")).startswith("over tls ")
    assert tls.terminator.handshakes_failed == failed_before


def test_a_server_signed_by_another_ca_is_refused(tls: Tls) -> None:
    other = {"BOOST_BROKER_CA_FILE": str(tls.other_ca_file)}
    assert refused(client(tls, "localhost", **other))
    assert refused(client(tls, "localhost", BOOST_BROKER_VERIFY_HOST="off", **other))


def test_a_certificate_not_naming_the_host_is_refused_unless_the_check_is_turned_off(
    tls: Tls,
) -> None:
    assert refused(client(tls, "127.0.0.1"))  # the certificate names localhost only
    assert round_trip(client(tls, "127.0.0.1", BOOST_BROKER_VERIFY_HOST="off"))


def test_a_client_certificate_is_presented_where_the_server_requires_one(tls: Tls) -> None:
    assert refused(client(tls, "localhost", mutual=True))
    presented = {
        "BOOST_BROKER_CERT_FILE": str(tls.client_cert),
        "BOOST_BROKER_KEY_FILE": str(tls.client_key),
    }
    assert round_trip(client(tls, "localhost", mutual=True, **presented))
