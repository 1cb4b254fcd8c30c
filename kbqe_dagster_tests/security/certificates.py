"""A certificate authority of a test's own, a server and a client certificate it signed, as PEM
files: what a broker or a registry requiring client certificates (mutual TLS) and the clients
reaching it need. Made with ``cryptography``; no keytool, no openssl command.

The server certificate names ``127.0.0.1`` and ``localhost``: librdkafka checks the broker's
name (``ssl.endpoint.identification.algorithm=https`` is its default), as Python's TLS does.
The client key is encrypted with :data:`CLIENT_KEY_PASSWORD`, so a client must be given
``ssl.key.password`` too: a secret that must never be logged.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kbqe_dagster_tests.security.conftest import KAFKA_SECRET

CLIENT_KEY_PASSWORD = KAFKA_SECRET  # a recognizable secret: the leak scans look for it
CLIENT_NAME = "kbqe-client"


@dataclass(frozen=True)
class Certificates:
    ca: Path
    """The CA certificate (what both sides trust)."""
    server_certificate: Path
    server_key: Path
    """Unencrypted PKCS#8."""
    server_keystore: Path
    """The server's key and certificate chain in one PEM file (Kafka's ``ssl.keystore.type=PEM``)."""
    client_certificate: Path
    client_key: Path
    """PKCS#8, encrypted with :data:`CLIENT_KEY_PASSWORD`."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
    server_names: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(directory: Path) -> Certificates:
    """A fresh CA, server and client certificate under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kbqe test CA")
    ca = _issue("kbqe test CA", ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        "127.0.0.1", server_key, ca_name, ca_key,
        usage=ExtendedKeyUsageOID.SERVER_AUTH, server_names=True,
    )  # fmt: skip
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(CLIENT_NAME, client_key, ca_name, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)

    plain_pkcs8 = server_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    encrypted_pkcs8 = client_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(CLIENT_KEY_PASSWORD.encode()),
    )
    files = {
        "ca.pem": _pem(ca),
        "server.pem": _pem(server) + _pem(ca),
        "server.key": plain_pkcs8,
        "server-keystore.pem": plain_pkcs8 + _pem(server) + _pem(ca),
        "client.pem": _pem(client),
        "client.key": encrypted_pkcs8,
    }
    for name, content in files.items():
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o600)
    return Certificates(
        ca=directory / "ca.pem",
        server_certificate=directory / "server.pem",
        server_key=directory / "server.key",
        server_keystore=directory / "server-keystore.pem",
        client_certificate=directory / "client.pem",
        client_key=directory / "client.key",
    )
