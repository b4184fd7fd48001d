"""Throw-away certificates for TLS tests: a CA, and a broker certificate it signs, as the PEM
file clients trust and the PKCS12 keystore the local broker serves (devtools.local_broker)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

KEYSTORE_PASSWORD = "test-keystore-pw"


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA: its key signs, its certificate (ca_file) is what clients trust."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    ca_file: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(
        now + datetime.timedelta(days=2)
    )


def make_authority(directory: Path, name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        _validity(x509.CertificateBuilder())
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    ca_file = directory / f"{name}.pem"
    ca_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return Authority(key=key, certificate=certificate, ca_file=ca_file)


def _signed(
    authority: Authority, names: list[str], usage: x509.ObjectIdentifier
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and its certificate for names (DNS names or IP addresses), signed by
    authority, for usage (server or client authentication)."""
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives: list[x509.GeneralName] = []
    for name in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    certificate = (
        _validity(x509.CertificateBuilder())
        .subject_name(_name(names[0]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
        .sign(authority.key, hashes.SHA256())
    )
    return key, certificate


def broker_keystore(directory: Path, authority: Authority, names: list[str]) -> Path:
    """A PKCS12 keystore (password KEYSTORE_PASSWORD) holding a server certificate for names
    (DNS names or IP addresses), signed by authority."""
    key, certificate = _signed(authority, names, x509.oid.ExtendedKeyUsageOID.SERVER_AUTH)
    path = directory / "broker.p12"
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"broker",
            key,
            certificate,
            [authority.certificate],
            serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode()),
        )
    )
    return path


def server_pem(
    directory: Path, authority: Authority, names: list[str], *, client: bool = False
) -> tuple[Path, Path]:
    """A certificate for names signed by authority, with its key, as PEM files (certificate
    file, key file): what Python's ssl serves, or (client=True) what a client presents."""
    oid = x509.oid.ExtendedKeyUsageOID
    key, certificate = _signed(authority, names, oid.CLIENT_AUTH if client else oid.SERVER_AUTH)
    stem = directory / ("client" if client else "server")
    cert_file, key_file = stem.with_suffix(".crt"), stem.with_suffix(".key")
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file
