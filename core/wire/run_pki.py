"""A run's own certificate authority and the agent's server certificate, made fresh for each run.

Why per run: the data plane is encrypted and the workers must know they reached this run's agent,
not something else on the network, without anyone managing certificates. The run makes a CA, signs
one server certificate for the names the agent is reached by (the address it advertises and the one
it binds), and hands the CA's certificate (public) to every caller and worker; the CA's key is
dropped once the server certificate is signed, so nothing else can ever be issued under it. A user
who has certificates of their own puts them in the same layout (`TLS_FILES`) and passes the
directory instead.

VM side only: it needs `cryptography`, which the workers never import (they get the CA as PEM).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core import atomic_write
from core.wire.protocol import CA_FILE

CERT_FILE, KEY_FILE = "server.pem", "server.key"
TLS_FILES = (CA_FILE, CERT_FILE, KEY_FILE)
VALID_FOR = dt.timedelta(days=7)  # longer than any run; a resumed run makes new ones


@dataclass(frozen=True)
class ServerPki:
    """PEM bytes: the CA callers trust, and the agent's certificate and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path) -> Path:
        """Write the three files (the key readable by this user only); return `directory`."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write.write_bytes(directory / CA_FILE, self.ca_pem)
        atomic_write.write_bytes(directory / CERT_FILE, self.cert_pem)
        atomic_write.write_bytes(directory / KEY_FILE, self.key_pem)
        (directory / KEY_FILE).chmod(0o600)
        return directory


def make_server_pki(hosts: Iterable[str]) -> ServerPki:
    """A new CA and a server certificate it signed for `hosts` (IP addresses or DNS names)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sponge run CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = sorted(set(hosts))
    cert = (
        _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]), ca_name, key.public_key(), now
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in names]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServerPki(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: dt.datetime) -> x509.CertificateBuilder:  # type: ignore[no-untyped-def]
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not cert_sign,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
