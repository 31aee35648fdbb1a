"""A run's own certificate authority and the agent's server certificate, made fresh for each run.

Why per run: the data plane is encrypted and the workers must know they reached this run's agent,
not something else on the network, without anyone managing certificates. The run makes a CA, signs
one server certificate for the names the agent is reached by (the address it advertises and the one
it binds), and hands the CA's certificate (public) to every caller and worker; the CA's key is
dropped once the server certificate is signed, so nothing else can ever be issued under it.

Mutual TLS keeps the CA's key beside the agent's (this user's private directory): the agent issues
each worker a client certificate of its own, valid for the worker's session only, as it derives each
worker's token, and the VM-side callers get one certificate of their own. A user who has
certificates of their own puts them in the same layout (the file names below) and names the
directory (`tls_dir` in sponge.toml, `--tls-dir` of the bare agent); `own_server_pki` checks them.

VM side only: it needs `cryptography`, which the workers never import (they get the CA as PEM).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core import atomic_write
from core.errors import ConfigError
from core.wire.protocol import CA_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE

CERT_FILE, KEY_FILE = "server.pem", "server.key"
CA_KEY_FILE = "ca.key"  # mutual TLS only: the agent issues each worker's client certificate with it
VALID_FOR = dt.timedelta(days=7)  # longer than any run; a resumed run makes new ones


@dataclass(frozen=True)
class ServerPki:
    """PEM bytes: the CA callers trust, and the agent's certificate and key; for mutual TLS also the
    CA's key (to issue workers' certificates) and the VM-side callers' client certificate."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None

    def write(self, directory: Path) -> Path:
        """Write the files (keys readable by this user only); return `directory`."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        files = {
            CA_FILE: self.ca_pem,
            CERT_FILE: self.cert_pem,
            KEY_FILE: self.key_pem,
            CA_KEY_FILE: self.ca_key_pem,
            CLIENT_CERT_FILE: self.client_cert_pem,
            CLIENT_KEY_FILE: self.client_key_pem,
        }
        for name, data in files.items():
            if data is not None:
                atomic_write.write_bytes(directory / name, data)
                if name.endswith(".key"):
                    (directory / name).chmod(0o600)
        return directory


def make_server_pki(hosts: Iterable[str], mutual: bool = False) -> ServerPki:
    """A new CA and a server certificate it signed for `hosts` (IP addresses or DNS names); with
    `mutual`, the CA's key is kept and a client certificate is issued for the VM-side callers."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sponge run CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now, VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = sorted(set(hosts))
    cert_pem, key_pem = _issue(ca_key, ca_name, names[0], ExtendedKeyUsageOID.SERVER_AUTH, VALID_FOR, names)
    pki = ServerPki(ca_pem=ca.public_bytes(serialization.Encoding.PEM), cert_pem=cert_pem, key_pem=key_pem)
    if not mutual:
        return pki
    client_pem, client_key = _issue(ca_key, ca_name, "sponge vm", ExtendedKeyUsageOID.CLIENT_AUTH, VALID_FOR)
    return dataclasses.replace(
        pki, ca_key_pem=_private(ca_key), client_cert_pem=client_pem, client_key_pem=client_key
    )


def issue_client(ca_pem: bytes, ca_key_pem: bytes, name: str, valid_for: dt.timedelta) -> tuple[bytes, bytes]:
    """A client certificate and key for `name` (a worker), signed by the run's CA, valid `valid_for`."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, CertificateIssuerPrivateKeyTypes)
    return _issue(ca_key, ca.subject, name, ExtendedKeyUsageOID.CLIENT_AUTH, valid_for)


def own_server_pki(directory: Path, host: str, mutual: bool = False) -> ServerPki:
    """A user's own certificates, in the layout `ServerPki.write` makes: the CA callers and workers
    trust (ca.pem), the agent's certificate and key (server.pem, server.key), and for mutual TLS the
    CA's key (ca.key), with which the VM's callers and each worker get a certificate of their own.
    A ConfigError says what is missing or wrong: a key that is not the certificate's, a certificate
    the CA did not sign, or one that does not name `host`, the address its callers and workers dial."""
    files = {name: directory / name for name in (CA_FILE, CERT_FILE, KEY_FILE, CA_KEY_FILE)}
    needed = [CA_FILE, CERT_FILE, KEY_FILE] + ([CA_KEY_FILE] if mutual else [])
    missing = [name for name in needed if not files[name].is_file()]
    if missing:
        raise ConfigError(
            f"the TLS directory {directory} has no {', '.join(missing)}",
            hint=f"it holds {', '.join(needed)} (PEM)" + ("; mutual TLS needs the CA's key" * mutual),
        )
    ca_pem, cert_pem, key_pem = (files[n].read_bytes() for n in (CA_FILE, CERT_FILE, KEY_FILE))
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{directory}: not a PEM certificate or unencrypted key: {e}") from None
    if _public(key.public_key()) != _public(cert.public_key()):
        raise ConfigError(f"{files[KEY_FILE]} is not the key of {files[CERT_FILE]}")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise ConfigError(f"{files[CERT_FILE]} is not signed by {files[CA_FILE]}") from None
    if not _names(cert, host):
        raise ConfigError(
            f"{files[CERT_FILE]} does not name {host}, the address the agent's callers and workers dial",
            hint="issue it with that address among its subject alternative names, or change --advertise",
        )
    pki = ServerPki(ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)
    if not mutual:
        return pki
    ca_key_pem = files[CA_KEY_FILE].read_bytes()
    client_pem, client_key = issue_client(ca_pem, ca_key_pem, "sponge vm", VALID_FOR)
    return dataclasses.replace(
        pki, ca_key_pem=ca_key_pem, client_cert_pem=client_pem, client_key_pem=client_key
    )


def _public(key: object) -> bytes:
    return key.public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _names(cert: x509.Certificate, host: str) -> bool:
    """Whether `cert`'s subject alternative names cover `host` (an address, or a name, wildcards too)."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        return ipaddress.ip_address(host) in sans.get_values_for_type(x509.IPAddress)
    except ValueError:
        pass
    for name in sans.get_values_for_type(x509.DNSName):
        if name == host or (name.startswith("*.") and host.partition(".")[2] == name[2:]):
            return True
    return False


def _issue(
    ca_key: CertificateIssuerPrivateKeyTypes,
    issuer: x509.Name,
    name: str,
    usage: x509.ObjectIdentifier,
    valid_for: dt.timedelta,
    hosts: Iterable[str] = (),
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        _builder(subject, issuer, key.public_key(), dt.datetime.now(dt.UTC), valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    sans = [_general_name(h) for h in hosts]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _private(key)


def _private(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key, now: dt.datetime, valid_for: dt.timedelta
) -> x509.CertificateBuilder:  # type: ignore[no-untyped-def]
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + valid_for)
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
